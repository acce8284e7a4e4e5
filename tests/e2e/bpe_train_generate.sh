#!/usr/bin/env bash
# The BPE story end to end: train a 1024-id tokenizer on the repository's docs and sources, prep a corpus with it,
# train the tiny model on those shards with data.tokenizer = auto, and check that the checkpoint carries the
# tokenizer: generate decodes BPE tokens into text (not ids), h5py hands the files back, and eval runs.
source "$(dirname "$0")/support/common.bash"

V=1024
mkdir -p corpus
cp -r "$SRC/docs" corpus/docs
cp -r "$SRC/src" corpus/src
find corpus -type f ! -name '*.md' ! -name '*.cpp' ! -name '*.h' -delete

"$EMBER" tokenizer train --input corpus --vocab-size "$V" --output tok >tok.log 2>&1 ||
  { cat tok.log >&2; fail "tokenizer train"; }
[ -n "$(ls tok)" ] || fail "tokenizer train wrote no files into tok/"
# The same documents as one gzip'd JSONL file (one object per line, the document in "text", another field beside
# it): tokenizer train reads them as prep does, one document per line, so the merges are the same.
"$PYTHON" - <<'PY' || fail "could not write corpus.jsonl.gz"
import gzip, json, pathlib
files = sorted(p for p in pathlib.Path("corpus").rglob("*") if p.is_file())
with gzip.open("corpus.jsonl.gz", "wt", encoding="utf-8") as out:
    for i, p in enumerate(files):
        out.write(json.dumps({"id": i, "text": p.read_bytes().decode("utf-8")}) + "\n")
PY
"$EMBER" tokenizer train --input corpus.jsonl.gz --vocab-size "$V" --output tok_jsonl >tok_jsonl.log 2>&1 ||
  { cat tok_jsonl.log >&2; fail "tokenizer train on JSONL"; }
cmp tok/merges.txt tok_jsonl/merges.txt || fail "tokenizer train on JSONL learned other merges than on the same text files"
"$EMBER" prep --input corpus --output data --tokenizer tok >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
[ -f data/prep.json ] && [ -d data/tokenizer ] || fail "prep wrote no prep.json and tokenizer/ beside the shards"
read -r fingerprint ids < <("$PYTHON" -c 'import json; t = json.load(open("data/prep.json"))["tokenizer"]
assert t["kind"] == "bpe" and 256 < t["vocab_size"] <= '"$V"', t
print(t["fingerprint"], t["vocab_size"])') || fail "prep.json does not describe the BPE tokenizer"
[ -n "$ids" ] || fail "prep.json does not describe the BPE tokenizer"

"$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --data.tokenizer=auto --model.vocab_size="$V" \
  --run.dir=run --training.steps=40 --eval.every=0 >train.log 2>&1 || { cat train.log >&2; fail "train"; }
grep -qF "tokenizer: bpe ($ids ids, fingerprint $fingerprint)" train.log ||
  { grep tokenizer train.log >&2; fail "start-up does not log the BPE tokenizer of the shards"; }
ckpt=run/checkpoints/$(cat run/checkpoints/latest)

# The checkpoint records the tokenizer as prep recorded it, with its files byte for byte.
"$PYTHON" - "$ckpt" "$fingerprint" <<'PY' || fail "/tokenizer does not hold the prep's tokenizer"
import os, sys, h5py
path, fingerprint = sys.argv[1], sys.argv[2]
with h5py.File(path, "r") as f:
    t = f["tokenizer"]
    assert t.attrs["kind"] == "bpe" and t.attrs["fingerprint"] == fingerprint, dict(t.attrs)
    files = {name: ds[()].tobytes() for name, ds in t.items()}
assert files, "no tokenizer files in the checkpoint"
for name, data in files.items():
    with open(os.path.join("data", "tokenizer", name), "rb") as g:
        assert g.read() == data, name
PY
"$EMBER" inspect "$ckpt" >inspect.log 2>&1 || { cat inspect.log >&2; fail "inspect"; }
grep -q "^tokenizer   kind=bpe ids=$ids fingerprint=$fingerprint" inspect.log ||
  { cat inspect.log >&2; fail "inspect does not print the BPE tokenizer"; }

# generate decodes with the checkpoint's tokenizer: the output starts with the prompt and the new tokens decode to
# words (BPE tokens of several bytes), never to lists of ids. A model this briefly trained may sample a token that
# holds part of a multi-byte character, so the bytes are read with replacement, not as strict UTF-8.
"$EMBER" generate --checkpoint "$ckpt" --prompt "the checkpoint" --max-new-tokens 60 --seed 3 --temperature 0.8 \
  >gen.txt 2>gen.err || { cat gen.err >&2; fail "generate"; }
"$PYTHON" - <<'PY' || { cat gen.txt >&2; fail "generate did not print BPE-decoded text"; }
import re
text = open("gen.txt", "rb").read().decode("utf-8", "replace")
assert text.startswith("the checkpoint"), text[:40]
new = text[len("the checkpoint"):]
assert len(new) > 10, (len(new), new)          # generation may stop early at <|endoftext|>, not at once
assert re.search(r"[A-Za-z]{3,}", new), new    # words, not numbers
assert not re.fullmatch(r"[\s\d,\[\]]*", new), new
PY
"$EMBER" generate --help >generate_help.txt  # not `| grep -q`: with pipefail, an early quit fails the pipe
grep -qi "end-of-text" generate_help.txt || fail "generate --help does not say it stops at end-of-text"

"$EMBER" eval --checkpoint "$ckpt" --data data --seq-len 32 --json >eval.json 2>eval.err ||
  { cat eval.err >&2; fail "eval"; }
"$PYTHON" -c 'import json, math; r = json.load(open("eval.json")); assert 0 < r["loss"] < math.log('"$V"'), r' ||
  fail "eval loss out of range"
echo "ok: BPE tokenizer trained, used by prep, train, generate and eval"
