#!/usr/bin/env bash
# Bad input: each case gets one "error:" line naming the input, a "hint:" line and a non-zero exit, and leaves the
# earlier outputs of a good run (checkpoints, latest, metrics, shards) byte-for-byte intact.
here=$(cd "$(dirname "$0")" && pwd)
source "$here/support/common.bash"
source "$here/support/bad_input.bash"

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
# Bad corpora found only while streaming: even with --overwrite the earlier shards stay as they were.
"$PYTHON" - <<'PY'
import gzip, zipfile
data = gzip.compress(b"some text\n" * 20000)
open("cut.txt.gz", "wb").write(data[: len(data) // 2])
open("bad.jsonl", "w").write('{"text": "a"}\n{"text": "b"}\n{"txt": "c"}\n')
with zipfile.ZipFile("two.zip", "w") as z:
    z.writestr("a.txt", "a")
    z.writestr("b.txt", "b")
PY
bad_case prep_truncated_gzip 1 "cut.txt.gz: truncated gzip stream" -- "$EMBER" prep --input cut.txt.gz --output data --overwrite
bad_case prep_bad_jsonl_line 1 "bad.jsonl line 3: no \"text\" field" -- "$EMBER" prep --input bad.jsonl --output data --overwrite
bad_case prep_zip_two_members 1 "two.zip: zip archive holds 2 files" -- "$EMBER" prep --input two.zip --output data --overwrite
bad_case prep_unknown_format 1 "xml" -- "$EMBER" prep --input bad.jsonl --output data --format xml --overwrite
bad_case prep_zero_threads 1 "threads" -- "$EMBER" prep --input bad.jsonl --output data --threads 0 --overwrite

# Config problems.
bad_case seq_too_long 1 "training.seq_len" -- "${train[@]}" --training.seq_len=64 --resume auto
bad_case unknown_key 2 "n_layers" -- "${train[@]}" --model.n_layers=3
printf '[model]\nn_layer = 2\nwidth = 7\n' > bad.ini
bad_case unknown_key_in_file 1 "width" -- "$EMBER" train --config bad.ini
bad_case negative_lr 1 "optimizer.lr" -- "${train[@]}" --optimizer.lr=-0.001 --resume auto
bad_case zero_worker_timeout 1 "async.worker_timeout" -- "${train[@]}" --async.worker_timeout=0 --resume auto
bad_case join_in_sync_mode 1 "async.join = true applies to training.mode = async only" -- "${train[@]}" \
  --async.join=true --resume auto
bad_case join_no_job 1 "async.join: no async job runs in run.dir" -- "${train[@]}" --training.mode=async \
  --async.join=true --run.dir=no_such_run
bad_case negative_dist_timeout 1 "dist.timeout" -- "${train[@]}" --dist.timeout=-1 --resume auto
bad_case wrong_type 1 "batch_size" -- "${train[@]}" --training.batch_size=lots

# Checkpoint problems.
bad_case shape_mismatch 1 "step_00000020.h5" -- "${train[@]}" --model.n_embd=64 --resume auto
echo "not hdf5" > fake.h5
bad_case not_hdf5 1 "fake.h5" -- "$EMBER" eval --checkpoint fake.h5 --data data
"$PYTHON" -c 'import h5py; f=h5py.File("other.h5","w"); f.attrs["format"]="something-else"; f.close()'
bad_case wrong_format 1 "other.h5" -- "$EMBER" eval --checkpoint other.h5 --data data
bad_case missing_resume 1 "nowhere.h5" -- "${train[@]}" --resume nowhere.h5

# Config files that are no config: refused before they are read (a directory once trained on defaults, /dev/zero
# grew without end, a FIFO blocks the open), and one over the size limit.
mkdir -p cfgdir
bad_case config_directory 1 "cfgdir" --timeout 20 -- "$EMBER" train --config cfgdir
bad_case config_dev_zero 1 "/dev/zero" --timeout 20 -- "$EMBER" train --config /dev/zero
mkfifo fifo.ini
bad_case config_fifo 1 "fifo.ini" --timeout 20 -- "$EMBER" train --config fifo.ini
{ cat "$SRC/configs/tiny.ini"; head -c 1100000 /dev/zero | tr '\0' '#'; echo; } > big.ini
bad_case config_too_large 1 "big.ini" --timeout 20 -- "$EMBER" train --config big.ini
bad_case second_config 2 "--config given twice" -- "${train[@]}" --config "$SRC/configs/demo.ini"

# Sizes: out of their range, or in range but more memory than the machine has (refused before any allocation).
bad_case n_layer_huge 1 "model.n_layer" --timeout 20 -- "${train[@]}" --model.n_layer=100000000 --resume auto
bad_case n_embd_huge 1 "model.n_embd" --timeout 20 -- "${train[@]}" --model.n_embd=1000000000 --resume auto
bad_case model_over_memory 1 "memory: training needs" --timeout 20 -- "${train[@]}" --run.dir=run_big \
  --model.n_layer=1024 --model.n_embd=8192 --model.n_head=64
bad_case batch_over_memory 1 "memory: training needs" --timeout 20 -- "${train[@]}" --run.dir=run_big \
  --model.n_embd=4096 --model.n_head=32 --training.batch_size=65536
bad_case steps_overflow 1 "training.steps" -- "${train[@]}" --training.steps=99999999999 --resume auto
ckpt=run/checkpoints/step_00000020.h5
bad_case eval_batch_huge 1 "batch-size" --timeout 20 -- "$EMBER" eval --checkpoint $ckpt --data data --batch-size 100000
bad_case eval_batch_over_data 1 "fewer than one batch" --timeout 20 -- "$EMBER" eval --checkpoint $ckpt --data data \
  --batch-size 60000
bad_case eval_seq_len_over_block 1 "seq-len" -- "$EMBER" eval --checkpoint $ckpt --data data --seq-len 33
bad_case generate_tokens_huge 1 "max-new-tokens" --timeout 20 -- "$EMBER" generate --checkpoint $ckpt \
  --max-new-tokens 100000000

# Values outside their domain, from the command line and from a file: non-finite floats, negative unsigned values,
# thread counts far above the hardware.
bad_case nan_temperature 1 "temperature" -- "$EMBER" generate --checkpoint $ckpt --temperature nan
bad_case inf_temperature 1 "temperature" -- "$EMBER" generate --checkpoint $ckpt --temperature inf
bad_case inf_eps 1 "optimizer.eps" -- "${train[@]}" --optimizer.eps=inf --resume auto
bad_case nan_lr 1 "optimizer.lr" -- "${train[@]}" --optimizer.lr=nan --resume auto
bad_case nan_bucket_mb 1 "training.bucket_mb" -- "${train[@]}" --training.bucket_mb=nan --resume auto
bad_case inf_max_norm 1 "training.max_norm" -- "${train[@]}" --training.max_norm=inf --resume auto
printf '[optimizer]\nbeta1 = nan\n' > nan.ini
bad_case nan_in_file 1 "optimizer.beta1" -- "$EMBER" train --config nan.ini --data.dir=data --run.dir=run
bad_case threads_10000 1 "training.threads" -- "${train[@]}" --training.threads=10000 --resume auto
bad_case seed_negative 1 "training.seed" -- "${train[@]}" --training.seed=-1 --resume auto
printf '[training]\nseed = -1\n' > seed.ini
bad_case seed_negative_in_file 1 "training.seed" -- "$EMBER" train --config seed.ini --data.dir=data --run.dir=run
bad_case eval_negative_batch 1 "batch-size" -- "$EMBER" eval --checkpoint $ckpt --data data --batch-size -4
bad_case eval_negative_max_batches 1 "max-batches" -- "$EMBER" eval --checkpoint $ckpt --data data --max-batches -1
bad_case eval_bad_split 1 "split" -- "$EMBER" eval --checkpoint $ckpt --data data --split test
bad_case generate_negative_seed 1 "seed" -- "$EMBER" generate --checkpoint $ckpt --seed -1
bad_case generate_negative_top_k 1 "top-k" -- "$EMBER" generate --checkpoint $ckpt --top-k -1
bad_case prep_inf_val_fraction 1 "val-fraction" -- "$EMBER" prep --input "$SRC/src" --output data --val-fraction inf
bad_case prep_negative_shard 1 "shard-tokens" -- "$EMBER" prep --input "$SRC/src" --output data --shard-tokens -5
bad_case stop_after_zero 1 "stop-after" -- "${train[@]}" --resume auto --stop-after 0
bad_case stop_after_negative 1 "stop-after" -- "${train[@]}" --resume auto --stop-after -2
bad_case max_runtime_nan 1 "max-runtime" -- "${train[@]}" --resume auto --max-runtime nan

# The command line means what the README says: an unknown option or an argument that is no option is a usage error
# (exit 2) in every command; an unquoted prompt is not cut to its first word.
bad_case eval_unknown_option 2 "--batch" -- "$EMBER" eval --checkpoint $ckpt --data data --batch 4
bad_case generate_unknown_option 2 "--temp" -- "$EMBER" generate --checkpoint $ckpt --temp 0.5
bad_case prep_unknown_option 2 "--val" -- "$EMBER" prep --input "$SRC/src" --output data --val 0.1
bad_case inspect_unknown_option 2 "--verbose" -- "$EMBER" inspect $ckpt --verbose
bad_case train_stray_argument 2 "extra" -- "${train[@]}" --resume auto extra
bad_case eval_stray_argument 2 "val" -- "$EMBER" eval --checkpoint $ckpt --data data val
bad_case generate_unquoted_prompt 2 "world" -- "$EMBER" generate --checkpoint $ckpt --prompt hello world
bad_case prep_stray_argument 2 "more" -- "$EMBER" prep --input "$SRC/src" --output data more
bad_case inspect_stray_argument 2 "second.h5" -- "$EMBER" inspect $ckpt second.h5

# Outside input that would crash or block a reader: deep nesting, FIFOs.
head -c 100000 /dev/zero | tr '\0' '[' > nested.json
bad_case decode_nested 1 "stdin: nests deeper than 64 levels" -- bash -c "'$EMBER' tokenizer decode --tokenizer bytes < nested.json"
mkdir -p deep && { printf '{"text": "ok"}\n'; printf '{"text": "x", "a": '; cat nested.json; echo; } > deep/d.jsonl
bad_case prep_nested_jsonl 1 "deep/d.jsonl line 2: not valid JSON" -- "$EMBER" prep --input deep --output deep_out
mkdir -p fifo_tok && mkfifo fifo_tok/tokenizer.json
bad_case tokenizer_fifo 1 "fifo_tok/tokenizer.json is a FIFO" --timeout 20 -- \
  bash -c "echo hi | '$EMBER' tokenizer encode --tokenizer fifo_tok"
mkdir -p fifo_in && mkfifo fifo_in/a.txt
bad_case prep_fifo_input 1 "fifo_in/a.txt is neither a file nor a folder" --timeout 20 -- \
  "$EMBER" prep --input fifo_in/a.txt --output fifo_out

bad_case_summary

# Usage errors exit 2.
rc=0; "$EMBER" frobnicate 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "unknown command exited $rc, expected 2"
echo PASS
