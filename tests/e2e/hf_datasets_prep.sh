#!/usr/bin/env bash
# Hugging Face datasets in: local parquet files (as a hub download leaves them) streamed to JSONL by
# scripts/data/hf_to_jsonl.py through the real `datasets` library, then prepped; every document arrives whole, each
# after the end-of-text token of a tokenizer trained here on that JSONL. A field that does not exist is one error
# line, no output.
source "$(dirname "$0")/support/common.bash"
VENV_PYTHON=${EMBER_VENV_PYTHON:-$SRC/.venv/bin/python}
[ -x "$VENV_PYTHON" ] || fail "no Python virtual environment at $VENV_PYTHON (hint: run scripts/python_env.sh)"
"$VENV_PYTHON" -c 'import datasets, pyarrow, tokenizers' 2>/dev/null ||
  fail "$VENV_PYTHON cannot import datasets, pyarrow and tokenizers (hint: run scripts/python_env.sh)"

# Two parquet shards of one schema, as a hub download leaves them, with non-ASCII text.
"$VENV_PYTHON" - <<'PY' || fail "could not write the parquet files"
import os, pyarrow as pa, pyarrow.parquet as pq
os.makedirs("hub", exist_ok=True)
docs = [f"Document {i}: caf\u00e9 \u65e5\u672c {'lorem ipsum ' * (i % 7)}end." for i in range(300)]
pq.write_table(pa.table({"text": docs[:120], "id": list(range(120))}), "hub/part-0.parquet")
pq.write_table(pa.table({"text": docs[120:], "id": list(range(120, 300))}), "hub/part-1.parquet")
PY

"$VENV_PYTHON" "$SRC/scripts/data/hf_to_jsonl.py" --data-files 'hub/*.parquet' --output docs.jsonl.gz >hf.log 2>&1 ||
  { cat hf.log >&2; fail "hf_to_jsonl.py"; }
"$EMBER" tokenizer train --input docs.jsonl.gz --vocab-size 400 --output tok >tok.log 2>&1 ||
  { cat tok.log >&2; fail "tokenizer train"; }
"$EMBER" prep --input docs.jsonl.gz --tokenizer tok --output data --val-fraction 0 >prep.log 2>&1 ||
  { cat prep.log >&2; fail "prep of the JSONL"; }

# The shards hold, for each document in order, <|endoftext|> and then the document's ids as Hugging Face
# tokenizers gives them.
"$VENV_PYTHON" - <<'PY' || fail "the shards do not hold the dataset's documents"
import glob, numpy as np, pyarrow.parquet as pq, tokenizers
tok = tokenizers.Tokenizer.from_file("tok/tokenizer.json")
eot = tok.token_to_id("<|endoftext|>")
want = []
for part in sorted(glob.glob("hub/*.parquet")):
    for text in pq.read_table(part).column("text").to_pylist():
        want += [eot] + tok.encode(text, add_special_tokens=False).ids
got = []
for path in sorted(glob.glob("data/train_*.bin")):
    header = np.fromfile(path, dtype="<i4", count=256)
    assert header[0] == 20240520 and header[1] == 1, header[:3]
    got += np.fromfile(path, dtype="<u2", offset=1024)[: header[2]].tolist()
assert got == want, f"{len(got)} tokens in the shards, {len(want)} expected; first difference at " + str(
    next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want))))
print(f"ok: 300 documents, {len(got)} tokens, equal to Hugging Face tokenizers' ids with <|endoftext|> before each")
PY

# A field the records do not have: one error line and a hint, nothing written.
if "$VENV_PYTHON" "$SRC/scripts/data/hf_to_jsonl.py" --data-files 'hub/*.parquet' --field body --output bad.jsonl \
  >bad.log 2>&1; then
  fail "hf_to_jsonl.py accepted a missing field"
fi
grep -q "^error: dataset record 0 has no string field 'body'" bad.log && grep -q "^hint: " bad.log ||
  { cat bad.log >&2; fail "hf_to_jsonl.py's error for a missing field"; }
[ ! -e bad.jsonl ] && [ ! -e bad.jsonl.tmp ] || fail "hf_to_jsonl.py left output behind after an error"
echo "ok: a Hugging Face dataset (local parquet) streamed to JSONL and prepped document by document"
