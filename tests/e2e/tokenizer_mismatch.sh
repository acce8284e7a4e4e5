#!/usr/bin/env bash
# The tokenizer at training start-up: shards whose prep.json names another tokenizer, a tokenizer with more ids than
# the model has rows, shards without prep.json for a non-byte model, and a resume from a checkpoint trained with
# another tokenizer are each refused on every rank (one error naming both sides, a hint, no hang). h5py reads the
# /tokenizer group of a checkpoint as a user would, and matching data trains and resumes.
here=$(cd "$(dirname "$0")" && pwd)
source "$here/support/common.bash"
source "$here/support/bad_input.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 UCX_TLS=tcp,self

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }

# shards_with DIR KIND FINGERPRINT VOCAB: a copy of the byte shards whose prep.json claims the given tokenizer.
shards_with() {
  rm -rf "$1" && mkdir -p "$1" && cp data/*.bin "$1"/
  "$PYTHON" -c 'import json, sys
d, kind, fp, vocab = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
json.dump({"format": "ember-prep", "version": 1,
           "tokenizer": {"kind": kind, "fingerprint": fp, "vocab_size": vocab},
           "token_bytes": 2, "input": "src", "input_format": "text",
           "splits": {"train": {"tokens": 1, "documents": 1, "shards": 1}}}, open(d + "/prep.json", "w"))' "$@"
}
shards_with bytes_data bytes bytes 256
shards_with other_data bpe 0123456789abcdef 256
shards_with big_data bpe fedcba9876543210 5000
rm -rf noprep && mkdir noprep && cp data/*.bin noprep/  # shards as llm.c writes them: no prep.json

train=("$EMBER" train --config "$SRC/configs/tiny.ini" --eval.every=0 --checkpoint.interval=0 --run.log_every=1)
mpi_train=(mpirun -np 2 --oversubscribe "${train[@]}")

# Matching shards and tokenizer train, and record the tokenizer: auto on shards whose prep.json says bytes.
"${train[@]}" --data.dir=bytes_data --run.dir=run --training.steps=2 >run.log 2>&1 ||
  { cat run.log >&2; fail "training on byte shards with data.tokenizer = auto failed"; }
grep -q "tokenizer: bytes" run.log || { cat run.log >&2; fail "the tokenizer is not logged at start-up"; }
good=run/checkpoints/step_00000002.h5
[ -f "$good" ] || fail "the good run wrote no checkpoint"

# A user reads /tokenizer with h5py: attributes as str and int, and the (empty for bytes) file list.
"$PYTHON" -c 'import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    t = f["tokenizer"]
    kind, fp, vocab = t.attrs["kind"], t.attrs["fingerprint"], int(t.attrs["vocab_size"])
    assert isinstance(kind, str) and isinstance(fp, str), (type(kind), type(fp))
    assert (kind, fp, vocab) == ("bytes", "bytes", 256), (kind, fp, vocab)
    assert list(t.keys()) == [], list(t.keys())' "$good" || fail "h5py cannot read /tokenizer as documented"
"$EMBER" inspect "$good" >inspect.log 2>&1 || { cat inspect.log >&2; fail "inspect"; }
grep -q "^tokenizer   kind=bytes ids=256 fingerprint=bytes files=none" inspect.log ||
  { cat inspect.log >&2; fail "inspect does not print the tokenizer"; }

# The same checkpoint claiming a BPE tokenizer: a byte run must not resume it.
mkdir -p other_run/checkpoints
cp "$good" other_run/checkpoints/step_00000002.h5
"$PYTHON" -c 'import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["tokenizer"].attrs["kind"] = "bpe"
    f["tokenizer"].attrs["fingerprint"] = "00112233aabbccdd"' other_run/checkpoints/step_00000002.h5
# The same checkpoint with its /tokenizer group deleted: a run configured with data.tokenizer = auto recorded one, so
# it was lost, and the ids must not be read as bytes.
mkdir -p lost
cp "$good" lost/step_00000002.h5
"$PYTHON" -c 'import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    del f["tokenizer"]' lost/step_00000002.h5
protect run other_run lost

bad_case prep_fingerprint nonzero "shards in other_data were made with tokenizer bpe \(256 ids, fingerprint 0123456789abcdef\).* but data\.tokenizer \(bytes\) is bytes" \
  -- "${mpi_train[@]}" --data.dir=other_data --data.tokenizer=bytes --run.dir=r1
# auto on shards whose tokenizer/ folder is missing: the error names the folder it looked in.
bad_case prep_fingerprint_auto nonzero "other_data/tokenizer" \
  -- "${train[@]}" --data.dir=other_data --run.dir=r2
bad_case prep_vocab nonzero "shards in big_data hold ids of a 5000-id tokenizer .* model\.vocab_size is 256" \
  -- "${mpi_train[@]}" --data.dir=big_data --run.dir=r3
bad_case no_prep_json nonzero "data\.dir noprep has no prep\.json saying which tokenizer made its shards" \
  -- "${mpi_train[@]}" --data.dir=noprep --model.vocab_size=50257 --run.dir=r4
bad_case tokenizer_vocab nonzero "tokenizer bytes has 256 ids but model\.vocab_size is 200" \
  -- "${train[@]}" --data.dir=noprep --data.tokenizer=bytes --model.vocab_size=200 --run.dir=r5
bad_case resume_other_tokenizer nonzero "checkpoint .*step_00000002\.h5 was trained with tokenizer bpe \(256 ids, fingerprint 00112233aabbccdd\) but this run's is bytes" \
  -- "${mpi_train[@]}" --data.dir=bytes_data --run.dir=other_run --checkpoint.resume=auto --training.steps=4
bad_case lost_tokenizer_group 1 "checkpoint lost/step_00000002\.h5 has no /tokenizer group, though its configuration \(data\.tokenizer = auto\)" \
  -- "$EMBER" generate --checkpoint lost/step_00000002.h5 --prompt "ab" --max-new-tokens 2
bad_case_summary

# The untouched checkpoint resumes: the refusal above came from the tokenizer alone.
"${train[@]}" --data.dir=bytes_data --run.dir=run --checkpoint.resume=auto --training.steps=3 >resume.log 2>&1 ||
  { cat resume.log >&2; fail "resuming with the same tokenizer failed"; }
echo "ok: tokenizer mismatches refused, matching data trains and resumes"
