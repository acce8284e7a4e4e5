#!/usr/bin/env bash
# A lost rank: `kill -9` of one rank of a 2-rank run ends the whole job with a non-zero exit within 60 s (never a
# hang), leaves no rank behind, and the checkpoint that `latest` names is complete and loads.
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

job_pid="" mpirun_pid="" rank_pids=()
cleanup() {
  local pid
  for pid in "${rank_pids[@]}" $mpirun_pid $job_pid; do kill -KILL "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null

# timeout 90: a job that hangs after losing a rank is ended (exit 124) instead of blocking the test.
timeout 90 mpirun -np 2 --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run \
  --training.steps=100000 --eval.every=0 --checkpoint.interval=5 --run.log_every=100 >job.log 2>&1 &
job_pid=$!
for _ in $(seq 600); do
  [ -s run/checkpoints/latest ] && break
  kill -0 "$job_pid" 2>/dev/null || { cat job.log >&2; fail "training ended before its first checkpoint"; }
  sleep 0.1
done
[ -s run/checkpoints/latest ] || { cat job.log >&2; fail "no checkpoint within 60 s"; }
mpirun_pid=$(pgrep -P "$job_pid" -x mpirun || pgrep -P "$job_pid" -x orterun) || fail "cannot find mpirun under timeout"
victim=$(rank_pid 1) && survivor=$(rank_pid 0) || fail "cannot find the rank processes among the children of mpirun"
rank_pids=("$victim" "$survivor")

kill -KILL "$victim"
start=$SECONDS
rc=0
wait "$job_pid" || rc=$?
elapsed=$((SECONDS - start))
job_pid=""
[ "$rc" -ne 124 ] || { tail -n 20 job.log >&2; fail "job hung after rank 1 was killed (timeout 90 ended it)"; }
[ "$rc" -ne 0 ] || fail "job exited 0 after rank 1 was killed"
[ "$elapsed" -le 60 ] || fail "job took $elapsed s to end after rank 1 was killed (limit 60 s)"
echo "ok: kill -9 of rank 1 -> job exited $rc after $elapsed s"

for pid in "${rank_pids[@]}" $mpirun_pid; do
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    ps -o pid,ppid,stat,etime,args -p "$pid" >&2 || true
    fail "process $pid of the job is still alive 10 s after mpirun exited"
  fi
done
echo "ok: no rank left behind ($((SECONDS - start)) s after the kill)"

latest=$(cat run/checkpoints/latest)
[[ "$latest" =~ ^step_[0-9]{8}\.h5$ ]] || fail "latest names '$latest'"
"$EMBER" eval --checkpoint "run/checkpoints/$latest" --data data --seq-len 32 >eval.log 2>&1 ||
  { cat eval.log >&2; fail "the last complete checkpoint $latest does not load"; }
echo "ok: $latest (named by latest) loads: $(grep -m1 -i "loss" eval.log || true)"
echo PASS
