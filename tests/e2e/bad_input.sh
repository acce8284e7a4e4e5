#!/usr/bin/env bash
# Bad input: each case gets one "error:" line naming the input, a "hint:" line and a non-zero exit, and leaves the
# earlier outputs of a good run (checkpoints, latest, metrics, shards) byte-for-byte intact.
source "$(dirname "$0")/common.bash"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run --checkpoint.interval=10
       --training.steps=20 --eval.every=0)
"${train[@]}"
snapshot() { (cd "$WORK" && find run data -type f -print0 | sort -z | xargs -0 md5sum); }
snapshot > before.md5

# Data problems.
expect_error missing_data "nonexistent" "${train[@]}" --data.dir=nonexistent --resume auto
mkdir -p badmagic && cp data/*.bin badmagic/
"$PYTHON" -c 'import struct,sys; f=open(sys.argv[1],"r+b"); f.write(struct.pack("<i",12345))' badmagic/train_000000.bin
expect_error bad_magic "train_000000.bin" "${train[@]}" --data.dir=badmagic --resume auto
mkdir -p truncated && cp data/*.bin truncated/
truncate -s -100 truncated/train_000000.bin
expect_error truncated_shard "train_000000.bin" "${train[@]}" --data.dir=truncated --resume auto
expect_error vocab_too_large "vocab" "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data \
  --run.dir=run2 --model.vocab_size=64
expect_error missing_prep_input "no-such-dir" "$EMBER" prep --input no-such-dir --output data

# Config problems.
expect_error seq_too_long "training.seq_len" "${train[@]}" --training.seq_len=64 --resume auto
expect_error unknown_key "n_layers" "${train[@]}" --model.n_layers=3
printf '[model]\nn_layer = 2\nwidth = 7\n' > bad.ini
expect_error unknown_key_in_file "width" "$EMBER" train --config bad.ini
expect_error negative_lr "optimizer.lr" "${train[@]}" --optimizer.lr=-0.001 --resume auto
expect_error wrong_type "batch_size" "${train[@]}" --training.batch_size=lots

# Checkpoint problems.
expect_error shape_mismatch "step_00000020.h5" "${train[@]}" --model.n_embd=64 --resume auto
echo "not hdf5" > fake.h5
expect_error not_hdf5 "fake.h5" "$EMBER" eval --checkpoint fake.h5 --data data
"$PYTHON" -c 'import h5py; f=h5py.File("other.h5","w"); f.attrs["format"]="something-else"; f.close()'
expect_error wrong_format "other.h5" "$EMBER" eval --checkpoint other.h5 --data data
expect_error missing_resume "nowhere.h5" "${train[@]}" --resume nowhere.h5

snapshot > after.md5
diff before.md5 after.md5 || fail "a bad-input run changed earlier outputs"
echo "ok: earlier checkpoints, metrics and shards unchanged"

# Usage errors exit 2.
rc=0; "$EMBER" frobnicate 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "unknown command exited $rc, expected 2"
echo PASS
