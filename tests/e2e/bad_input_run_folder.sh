#!/usr/bin/env bash
# The run folder: a fresh start over earlier results, a prep over earlier shards, a folder held by another job, and
# folders that cannot be written each stop at start-up with one "error:" line naming the folder, a "hint:" line and a
# non-zero exit, at 1 and 2 ranks, and leave the earlier outputs byte-for-byte intact (and no folder of their own).
# Then --overwrite moves earlier results aside and starts over.
here=$(cd "$(dirname "$0")" && pwd)
source "$here/support/common.bash"
source "$here/support/bad_input.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run --checkpoint.interval=10
       --training.steps=20 --eval.every=0)
"${train[@]}" >first.log 2>&1 || { cat first.log >&2; fail "first run failed"; }
grep -q '"state":"done"' run/run_state.json || fail "run_state.json of the first run: $(cat run/run_state.json)"
# A copy held by a live process on this host, as a running job would hold it.
cp -r run held
sleep 600 &
holder=$!
trap 'kill $holder 2>/dev/null || true' EXIT
printf '{"host":"%s","pid":%d,"job_id":"777","start":"2025-01-01T00:00:00Z"}\n' "$(hostname)" "$holder" >held/ember.lock
cp -r run/checkpoints held_ckpt  # a checkpoint folder outside its run folder, held too
cp held/ember.lock held_ckpt/
touch somefile
mkdir -p latest_dir/checkpoints/latest metrics_dir/metrics.jsonl
cp -r run bad_metrics  # a record not written by ember: its step is no whole number
echo '{"step":"twenty","loss":1.0}' >>bad_metrics/metrics.jsonl
protect run data held held_ckpt latest_dir metrics_dir bad_metrics somefile

# Earlier results: a fresh start (no --resume) would overwrite them.
bad_case fresh_start 1 "run holds the results of an earlier run" -- "${train[@]}"
bad_case fresh_start_np2 1 "run holds the results of an earlier run" -- \
  mpirun -np 2 --oversubscribe "${train[@]}"
bad_case fresh_start_async 1 "run holds the results" -- mpirun -np 3 --oversubscribe "${train[@]}" \
  --training.mode=async
bad_case fresh_over_metrics 1 "run/metrics.jsonl" -- "${train[@]}" --checkpoint.folder=ckpt_elsewhere
bad_case fresh_over_checkpoints 1 "checkpoint folder run/checkpoints holds .*step_00000020.h5" -- "${train[@]}" --run.dir=run_b \
  --checkpoint.folder=run/checkpoints
bad_case prep_over_shards 1 "ember prep: --output data exists" -- "$EMBER" prep --input "$SRC/src" --output data

# A folder another job holds.
bad_case held_lock 1 "held is in use by another job: .*pid $holder, job 777" -- \
  "${train[@]}" --run.dir=held --resume auto --training.steps=30
bad_case held_lock_np2 1 "held is in use by another job: .*pid $holder" -- \
  mpirun -np 2 --oversubscribe "${train[@]}" --run.dir=held --resume auto --training.steps=30
bad_case held_checkpoint_folder 1 "checkpoint folder held_ckpt is in use by another job" -- \
  "${train[@]}" --run.dir=other_run --checkpoint.folder=held_ckpt --resume auto --training.steps=30

# Folders that cannot be written, found at start-up although the run would save only at its end.
bad_case checkpoint_under_file 1 "somefile/ckpt: somefile exists and is not a folder" -- \
  "${train[@]}" --run.dir=r1 --checkpoint.folder=somefile/ckpt --checkpoint.interval=0
bad_case checkpoint_folder_is_file 1 "checkpoint folder somefile: somefile exists and is not a folder" -- \
  mpirun -np 2 --oversubscribe "${train[@]}" --run.dir=r2 --checkpoint.folder=somefile --checkpoint.interval=0
bad_case latest_is_folder 1 "latest is a folder" -- \
  "${train[@]}" --run.dir=latest_dir --resume auto --checkpoint.interval=0
bad_case run_dir_is_file 1 "run folder somefile: somefile exists and is not a folder" -- \
  "${train[@]}" --run.dir=somefile --checkpoint.folder=r3 --checkpoint.interval=0
bad_case run_dir_under_file 1 "run folder somefile/run" -- \
  mpirun -np 2 --oversubscribe "${train[@]}" --run.dir=somefile/run --checkpoint.interval=0
bad_case metrics_is_folder 1 "metrics.jsonl is a folder" -- "${train[@]}" --run.dir=metrics_dir --resume auto
# The files a run opens by name, as a FIFO (which would block the run forever) or a device: refused at start-up.
for f in metrics.jsonl metrics_rank1.jsonl ember.lock checkpoints/latest checkpoints/step_00000010.h5 \
  run_state.json; do
  d=special_$(echo $f | tr /. __)
  mkdir -p $d/checkpoints
  mkfifo $d/$f
  bad_case fifo_$d 1 "$d/$f is a FIFO" -- "${train[@]}" --run.dir=$d --resume auto
  [ -p $d/$f ] || fail "fifo_$d: the FIFO was replaced"
done
mkdir -p devnull_latest/checkpoints && ln -s /dev/null devnull_latest/checkpoints/latest
bad_case latest_links_to_device 1 "latest is a device" -- "${train[@]}" --run.dir=devnull_latest --resume auto
bad_case metrics_bad_step 1 'bad_metrics/metrics.jsonl line 21: "step" is "twenty", not a whole number' -- \
  "${train[@]}" --run.dir=bad_metrics --resume auto --training.steps=30
# Root ignores permission bits; a read-only file system stops it too.
if [ -d /sys/kernel ] && ! touch /sys/kernel/.ember-probe 2>/dev/null; then
  bad_case checkpoint_read_only 1 "checkpoint folder /sys/kernel" -- \
    "${train[@]}" --run.dir=r4 --checkpoint.folder=/sys/kernel --checkpoint.interval=0
else
  echo "skip: checkpoint_read_only (no read-only /sys/kernel here)"
fi

bad_case_summary
for dir in ckpt_elsewhere run_b other_run r1 r2 r3 r4; do
  [ ! -e "$dir" ] || fail "a refused start left $dir behind"
done
[ ! -e run/ember.lock ] || fail "a refused start left run/ember.lock behind"
[ -e held/ember.lock ] && [ -e held_ckpt/ember.lock ] || fail "a refused start removed the live holder's lock"

# --overwrite: the earlier results move aside (nothing is deleted) and the run starts over.
cp -r run over
"${train[@]}" --run.dir=over --overwrite >over.log 2>&1 || { cat over.log >&2; fail "--overwrite run failed"; }
grep -q "earlier results moved aside" over.log || { cat over.log >&2; fail "no 'moved aside' line"; }
cmp run/metrics.jsonl over/previous-*/metrics.jsonl || fail "the earlier metrics were not kept aside"
cmp run/checkpoints/step_00000020.h5 over/checkpoints/previous-*/step_00000020.h5 ||
  fail "the earlier checkpoint was not kept aside"
[ "$(wc -l <over/metrics.jsonl)" -eq 20 ] || fail "the overwriting run's metrics have $(wc -l <over/metrics.jsonl) lines"
[ "$(cat over/checkpoints/latest)" = step_00000020.h5 ] || fail "the overwriting run ended without its checkpoint"
echo "ok: --overwrite moved the earlier results aside and trained 20 steps"
"$EMBER" prep --input "$SRC/src/core" --output data --overwrite >/dev/null || fail "prep --overwrite failed"
echo PASS
