#!/usr/bin/env bash
# Bad input: each case gets one "error:" line naming the input, a "hint:" line and a non-zero exit, and leaves the
# earlier outputs of a good run (checkpoints, latest, metrics, shards) byte-for-byte intact.
here=$(cd "$(dirname "$0")" && pwd)
source "$here/common.bash"
source "$here/bad_input_lib.bash"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run --checkpoint.interval=10
       --training.steps=20 --eval.every=0)
"${train[@]}"
protect run data

# Data problems.
bad_case missing_data 1 "nonexistent" -- "${train[@]}" --data.dir=nonexistent --resume auto
mkdir -p badmagic && cp data/*.bin badmagic/
"$PYTHON" -c 'import struct,sys; f=open(sys.argv[1],"r+b"); f.write(struct.pack("<i",12345))' badmagic/train_000000.bin
bad_case bad_magic 1 "train_000000.bin" -- "${train[@]}" --data.dir=badmagic --resume auto
mkdir -p truncated && cp data/*.bin truncated/
truncate -s -100 truncated/train_000000.bin
bad_case truncated_shard 1 "train_000000.bin" -- "${train[@]}" --data.dir=truncated --resume auto
bad_case vocab_too_large 1 "vocab" -- "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data \
  --run.dir=run2 --model.vocab_size=64
bad_case missing_prep_input 1 "no-such-dir" -- "$EMBER" prep --input no-such-dir --output data

# Config problems.
bad_case seq_too_long 1 "training.seq_len" -- "${train[@]}" --training.seq_len=64 --resume auto
bad_case unknown_key 1 "n_layers" -- "${train[@]}" --model.n_layers=3
printf '[model]\nn_layer = 2\nwidth = 7\n' > bad.ini
bad_case unknown_key_in_file 1 "width" -- "$EMBER" train --config bad.ini
bad_case negative_lr 1 "optimizer.lr" -- "${train[@]}" --optimizer.lr=-0.001 --resume auto
bad_case wrong_type 1 "batch_size" -- "${train[@]}" --training.batch_size=lots

# Checkpoint problems.
bad_case shape_mismatch 1 "step_00000020.h5" -- "${train[@]}" --model.n_embd=64 --resume auto
echo "not hdf5" > fake.h5
bad_case not_hdf5 1 "fake.h5" -- "$EMBER" eval --checkpoint fake.h5 --data data
"$PYTHON" -c 'import h5py; f=h5py.File("other.h5","w"); f.attrs["format"]="something-else"; f.close()'
bad_case wrong_format 1 "other.h5" -- "$EMBER" eval --checkpoint other.h5 --data data
bad_case missing_resume 1 "nowhere.h5" -- "${train[@]}" --resume nowhere.h5

bad_case_summary

# Usage errors exit 2.
rc=0; "$EMBER" frobnicate 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "unknown command exited $rc, expected 2"
echo PASS
