#!/usr/bin/env bash
# One job per run folder, at 2 and 4 ranks: a second job started on a folder a running job holds, or pointing its
# checkpoint.folder into it, fails fast naming the holder, and the first job's outputs stay intact; after a crash (kill -9 of the whole job) the stale lock is
# reclaimed with a warning and --resume auto continues.
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

mpirun_pid=""
trap kill_background_job EXIT

# wait_lines FILE N LOG: until FILE has N lines while the job in $mpirun_pid runs.
wait_lines() {
  for _ in $(seq 1200); do
    [ "$(lines "$1")" -ge "$2" ] && return 0
    kill -0 "$mpirun_pid" 2>/dev/null || { cat "$3" >&2; fail "the job ended before $1 had $2 lines"; }
    sleep 0.1
  done
  cat "$3" >&2
  fail "$1 has no $2 lines after 120 s"
}

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --eval.every=0 --run.log_every=100)

for np in 2 4; do
  # 1. Two jobs on one run folder.
  dir=two$np
  mpirun -np "$np" --oversubscribe "${train[@]}" --run.dir=$dir --training.steps=100000 >first$np.log 2>&1 &
  mpirun_pid=$!
  wait_lines $dir/metrics.jsonl 3 first$np.log
  holder=$(rank_pid 0) || fail "no rank 0 among the children of mpirun $mpirun_pid"
  start=$SECONDS
  rc=0
  timeout 60 mpirun -np "$np" --oversubscribe "${train[@]}" --run.dir=$dir --training.steps=100000 --resume auto \
    >second$np.out 2>second$np.err || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat second$np.err >&2; fail "np $np: second job exited $rc"; }
  grep -Eq "^(\[rank 0\] )?error: run folder $dir is in use by another job: .*host $(hostname), pid $holder" \
    second$np.err || { cat second$np.err >&2; fail "np $np: the second job's error does not name the holder"; }
  grep -q "^\(\[rank 0\] \)\?hint: " second$np.err || fail "np $np: no hint"
  kill -0 "$mpirun_pid" 2>/dev/null || { cat first$np.log >&2; fail "np $np: the first job ended early"; }
  echo "ok: np $np: a second job on $dir failed in $((SECONDS - start)) s naming pid $holder"
  # A job of another run folder whose checkpoint.folder points into the running job's folder: refused too.
  rc=0
  timeout 60 "${train[@]}" --run.dir=other$np --checkpoint.folder=$dir/checkpoints --training.steps=10 \
    --resume auto >other$np.out 2>other$np.err || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat other$np.err >&2; fail "np $np: the job into its checkpoints exited $rc"; }
  grep -Eq "^error: checkpoint folder $dir/checkpoints is in use by another job: .*pid $holder" other$np.err ||
    { cat other$np.err >&2; fail "np $np: the job into $dir/checkpoints was not refused naming the holder"; }
  kill -0 "$mpirun_pid" 2>/dev/null || { cat first$np.log >&2; fail "np $np: the first job ended early"; }
  echo "ok: np $np: a job with checkpoint.folder inside $dir was refused"
  # The first job goes on, stops on request with its checkpoint, and its outputs are whole.
  wait_lines $dir/metrics.jsonl 6 first$np.log
  kill -USR1 "$mpirun_pid"
  rc=0
  wait "$mpirun_pid" || rc=$?
  mpirun_pid=""
  [ "$rc" -eq 3 ] || { cat first$np.log >&2; fail "np $np: first job exited $rc, expected 3"; }
  latest=$(cat $dir/checkpoints/latest)
  step=$((10#${latest:5:8}))
  "$EMBER" inspect "$dir/checkpoints/$latest" >/dev/null || fail "np $np: $latest is damaged"
  "$PYTHON" -c 'import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == list(range(1, int(sys.argv[2]) + 1)), steps' $dir/metrics.jsonl "$step" ||
    fail "np $np: metrics.jsonl is not steps 1..$step (NUL bytes, gaps or repeats)"
  grep -q "\"state\":\"stopped\",\"step\":$step," $dir/run_state.json || fail "np $np: run state $(cat $dir/run_state.json)"
  [ ! -e $dir/ember.lock ] || fail "np $np: the lock outlived the job"
  echo "ok: np $np: the first job stopped at step $step with whole outputs and released the lock"

  # 2. A crash: kill -9 of every rank and mpirun; the restart reclaims the stale lock and continues.
  dir=crash$np
  mpirun -np "$np" --oversubscribe "${train[@]}" --run.dir=$dir --training.steps=100000 --checkpoint.interval=3 \
    >crash$np.log 2>&1 &
  mpirun_pid=$!
  for _ in $(seq 1200); do [ -s $dir/checkpoints/latest ] && break; sleep 0.1; done
  [ -s $dir/checkpoints/latest ] || { cat crash$np.log >&2; fail "np $np: no checkpoint before the crash"; }
  ranks=$(pgrep -P "$mpirun_pid")
  for pid in $ranks; do kill -KILL "$pid" 2>/dev/null || true; done
  kill -KILL "$mpirun_pid"
  wait "$mpirun_pid" 2>/dev/null || true
  mpirun_pid=""
  for pid in $ranks; do  # dying takes a moment (a zombie until reaped)
    for _ in $(seq 100); do [ -d /proc/$pid ] && [ "$(awk '{print $3}' /proc/$pid/stat 2>/dev/null)" != Z ] || break; sleep 0.1; done
  done
  [ -e $dir/ember.lock ] || fail "np $np: no lock left behind by the crash"
  grep -q '"state":"running"' $dir/run_state.json || fail "np $np: run state after the crash: $(cat $dir/run_state.json)"
  latest=$(cat $dir/checkpoints/latest)
  step=$((10#${latest:5:8}))
  must_train "$np" restart$np.log "${train[@]:2}" --run.dir=$dir --training.steps=$((step + 3)) \
    --checkpoint.interval=3 --resume auto
  # Not anchored: mpirun forwards each rank's output in chunks of 1024 bytes, so in a log that merges stdout and
  # stderr this line may follow part of the start-up config's.
  grep -q "warning: run folder $dir: reclaimed a stale lock (its process [0-9]* is gone" restart$np.log ||
    { cat restart$np.log >&2; fail "np $np: no warning about the reclaimed lock"; }
  grep -q "resumed from .*$latest at step $step" restart$np.log || { cat restart$np.log >&2; fail "np $np: no resume"; }
  grep -q "\"state\":\"done\",\"step\":$((step + 3))," $dir/run_state.json || fail "np $np: $(cat $dir/run_state.json)"
  echo "ok: np $np: after kill -9 at step >= $step the restart reclaimed the lock and finished"
done
echo PASS
