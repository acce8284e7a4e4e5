#!/usr/bin/env bash
# Hosts that come and go during one async job. Each host has an mpirun of its own (Open MPI 4.1 cannot connect a
# launch to a job whose mpirun started ranks on other hosts): host 0 starts the job (the center and worker 1), host 1
# joins it at once (async.join, through Open MPI's rendezvous server on host 0), host 2 joins at 30% of the run, and
# host 1's worker is killed at 60%. The run finishes: each joiner starts from the checkpoint of its join barrier, its
# deltas reach the center, it is in the next checkpoint, and the final one is written without the lost worker. A
# start whose config differs is refused while the job runs, and the job goes on. Then: joining a job that one mpirun
# started across hosts is refused; joining a job that has ended, one that crashed, and one whose center does
# not answer each end with one error line and a hint, before any work.
source "$2/tests/cluster/common.bash"
STEPS=6000 TIMEOUT=5

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
common=(train --config "$SRC/configs/tiny.ini" --model.n_layer=4 --model.n_embd=64 --data.dir="$WORK/data"
        --training.mode=async --eval.every=0
        --checkpoint.interval=0 --checkpoint.keep_latest_k=0 --run.log_every=200 --async.local_steps=5
        --async.worker_timeout=$TIMEOUT --async.center_timeout=10 --run.dir="$WORK/run" --training.steps=$STEPS)
cluster_up 4

# Open MPI connects two mpirun launches only through its rendezvous server, which both are given.
"${CLUSTER[@]}" exec 0 ompi-server --no-daemonize --report-uri "$WORK/uri.txt" \
  --mca oob_tcp_if_include "$CLUSTER_SUBNET.0/24" >ompi-server.log 2>&1 &
for _ in $(seq 50); do [[ -s uri.txt ]] && break; sleep 0.2; done
[[ -s uri.txt ]] || { cat ompi-server.log >&2; fail "ompi-server wrote no URI"; }
launch=(--enable-recovery --mca orte_abort_on_non_zero_status 0 --ompi-server "file:$WORK/uri.txt")
MPIRUN_OPTIONS=(--hosts 1 --ranks-per-host 2 "${launch[@]}")
start_job_with_rank_files "${common[@]}"
# join HOST: host HOST's mpirun joins the job, its rank files in joiner<HOST>/
join() {
  mkdir -p "joiner$1"
  RANK_DIR=$WORK/joiner$1 "$SRC/scripts/cluster/mpirun.sh" --name "$CLUSTER_NAME" --first-host "$1" --hosts 1 \
    --ranks-per-host 1 -x RANK_DIR "${launch[@]}" -- "$WORK/rank.sh" "$EMBER" "${common[@]}" --async.join=true \
    >"joiner$1.log" 2>&1 &
}
# center_step: the newest step in the center's metrics
center_step() { tail -n 1 run/metrics.jsonl 2>/dev/null | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["step"])' 2>/dev/null || echo 0; }
wait_for_step() {
  for _ in $(seq 1 1200); do
    (($(center_step) >= $1)) && return 0
    kill -0 "$mpirun_pid" 2>/dev/null || { cat job.log ranks/*.err >&2; fail "the job ended before step $1"; }
    sleep 0.1
  done
  fail "the job did not reach step $1 within 120 s"
}
# wait_joined RANK HOST: worker RANK (host HOST's joiner) has sent two rounds
wait_joined() {
  for _ in $(seq 1 1200); do [[ $(lines "run/metrics_rank$1.jsonl") -ge 2 ]] && break; sleep 0.1; done
  [[ $(lines "run/metrics_rank$1.jsonl") -ge 2 ]] ||
    { cat job.log ranks/*.err "joiner$2.log" "joiner$2"/*.err >&2; fail "host $2 did not join"; }
  grep -q "async center: 1 rank(s) on $CLUSTER_NAME-h$2 ask to join" job.log ranks/rank0.err ||
    fail "the center did not log host $2's request"
  echo "ok: host $2 joined as worker rank $1 by step $(center_step)"
}

# At once: host 1 joins, and a start with another config (on this machine, outside the cluster) is refused while
# the job goes on. (Under the load of the job, that start's own MPI set-up has taken 19 s.)
wait_for_file run/join/port 60
join 1
rc=0
timeout 90 "$EMBER" "${common[@]}" --async.join=true --optimizer.lr=0.001 >refused.log 2>&1 || rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || { cat refused.log >&2; fail "a join with another config exited $rc"; }
grep -q "^error: async.join: the job refused to take this start in: its config differs (optimizer.lr = 0.001" \
  refused.log || { cat refused.log >&2; fail "no refusal naming optimizer.lr"; }
grep -q "^hint: " refused.log || fail "the refusal has no hint"
echo "ok: a start with another config was refused, exit $rc"
wait_joined 2 1

# Host 2 joins at 30%; host 1's worker (rank 2) is lost at 60%.
wait_for_step $((STEPS * 3 / 10))
join 2
wait_joined 3 2
wait_for_step $((STEPS * 6 / 10))
kill -KILL "$(cat joiner1/rank0.pid)"
for f in ranks/rank0 ranks/rank1 joiner2/rank0; do
  for _ in $(seq 1 1800); do [[ -f $f.exit ]] && break; sleep 0.1; done
  [[ -f $f.exit ]] || { cat job.log ranks/*.err joiner*.log >&2; fail "$f had not exited 180 s after the loss"; }
  [[ $(cut -d' ' -f1 "$f.exit") -eq 0 ]] || { cat "$f.err" job.log >&2; fail "$f exited $(cut -d' ' -f1 "$f.exit")"; }
done
for _ in $(seq 1 600); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$mpirun_pid" 2>/dev/null && fail "the job's mpirun still runs 60 s after its ranks ended"
mpirun_pid=""
grep -q "async center: worker rank 2 on $CLUSTER_NAME-h1 gave no sign of life" job.log ranks/rank0.err ||
  fail "no drop line for worker rank 2"
grep -q '"state":"done"' run/run_state.json || fail "run state: $(cat run/run_state.json)"

# The metrics and the checkpoints: every worker's deltas reached the center; checkpoints are written at each join
# barrier (host 1's: the center and worker 1; host 2's: host 1's worker too) and at the end, where host 2's worker
# took part and host 1's, lost, did not.
"$PYTHON" - run "$STEPS" <<'PY' || fail "the metrics or checkpoints of the run"
import glob, h5py, json, os, sys
run, steps = sys.argv[1], int(sys.argv[2])
recs = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
workers = {d["worker"] for r in recs for d in r.get("deltas", [])}
assert workers == {1, 2, 3}, workers
ranks = {}
for path in sorted(glob.glob(f"{run}/checkpoints/step_*.h5")):
    with h5py.File(path, "r") as f:
        ranks[os.path.basename(path)] = sorted(int(k) for k in f["ranks"].keys())
assert list(ranks.values()) == [[0, 1], [0, 1, 2], [0, 1, 2]], ranks
assert list(ranks)[-1] == f"step_{steps:08d}.h5", ranks
print(f"deltas from workers {sorted(workers)}; ranks by checkpoint: {ranks}")
PY
final=$(printf 'step_%08d.h5' "$STEPS")
grep -q "checkpoint $WORK/run/checkpoints/$final" joiner2.log || { cat joiner2.log >&2; fail "host 2 was not in $final"; }
echo "ok: the run finished at step $STEPS with the joiners and without worker rank 2"

# A job that one mpirun started across hosts 0 and 1 refuses a join from host 2.
rm -rf ranks
MPIRUN_OPTIONS=(--hosts 2 "${launch[@]}")
start_job_with_rank_files "${common[@]}" --run.dir="$WORK/spread" --training.steps=1000000
for _ in $(seq 1 600); do [[ $(lines spread/metrics.jsonl) -ge 2 ]] && break; sleep 0.1; done
rc=0
timeout 60 "$EMBER" "${common[@]}" --run.dir="$WORK/spread" --training.steps=1000000 --async.join=true \
  >spread.log 2>&1 || rc=$?
grep -q "^error: async.join: the job refused to take this start in: one mpirun started the job's ranks on several" \
  spread.log && [[ $rc -ne 0 && $rc -ne 124 ]] || { cat spread.log >&2; fail "a join into a spread job: exit $rc"; }
echo "ok: a job one mpirun spread over 2 hosts refused the join, exit $rc"
kill_background_job
mpirun_pid=""

# expect_join_error NAME PATTERN ARGS...: a joining start ends non-zero within 30 s with one error line and a hint.
expect_join_error() {
  local name=$1 pattern=$2 rc=0 start=$SECONDS
  shift 2
  timeout 60 "$EMBER" "${common[@]}" --async.join=true "$@" >"$name.log" 2>&1 || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 && $((SECONDS - start)) -le 30 ]] ||
    { cat "$name.log" >&2; fail "$name: exit $rc after $((SECONDS - start)) s"; }
  [[ $(grep -c '^error: ' "$name.log") -eq 1 ]] && grep -Eq "^error: async.join: $pattern" "$name.log" &&
    grep -q '^hint: ' "$name.log" || { cat "$name.log" >&2; fail "$name: not one error matching '$pattern' and a hint"; }
  echo "ok: $name: exit $rc after $((SECONDS - start)) s: $(grep '^error: ' "$name.log" | cut -c1-100)"
}
expect_join_error ended "no async job runs in run.dir = $WORK/run \(it has no $WORK/run/join/port\)"
mkdir -p crashed/join silent/join
echo '{"port": "1234.0:5678"}' | tee crashed/join/port >silent/join/port
echo '{"state": "failed"}' >crashed/run_state.json
expect_join_error crashed "the job in run.dir = $WORK/crashed is not running \(its run state is 'failed'\)" \
  --run.dir="$WORK/crashed"
echo '{"state": "running"}' >silent/run_state.json
expect_join_error silent "the job in run.dir = $WORK/silent did not answer within async.center_timeout = 3 s" \
  --run.dir="$WORK/silent" --async.center_timeout=3
finish_cluster_test
