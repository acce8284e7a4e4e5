#!/usr/bin/env bash
# Async mode end to end (training.mode = async): a center and 2 workers train, checkpoint and finish; the checkpoint
# is read unchanged by inspect, eval (same loss as the center's final validation) and generate; metrics show the
# 1-bit traffic; the center evaluates in the background; a restart with more or fewer workers resumes with a notice;
# each one-sided component (default, osc/pt2pt, osc/ucx over TCP) runs a job; SIGUSR1 to a worker stops the job with
# exit 3 after a checkpoint; a killed worker ends the job and the survivors resume; a center that stops serving and a
# job without workers give errors.
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 UCX_TLS=tcp,self

job_pid="" mpirun_pid=""
cleanup() { for pid in $mpirun_pid $job_pid; do kill -KILL "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
ARGS=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.mode=async --training.threads=1
      --async.local_steps=4 --eval.batches=4)
train() {  # train NP LOG ARGS...: an async run of NP ranks (timeout 300: a hang fails instead of blocking)
  local np=$1 log=$2
  shift 2
  mpi_train "$np" "$log" "${ARGS[@]}" "$@"
}

# 1. Center + 2 workers, 60 steps, checkpoints every 20.
train 3 a.log --run.dir=a --training.steps=60 --checkpoint.interval=20 || { cat a.log >&2; fail "async run failed"; }
grep -q "done at step 60" a.log || { cat a.log >&2; fail "async run did not reach step 60"; }
ckpt=a/checkpoints/step_00000060.h5
[ -f "$ckpt" ] || fail "no final checkpoint $ckpt"
[ "$(ls a/checkpoints/step_*.h5 | wc -l)" -ge 2 ] || fail "no intermediate checkpoint"
echo "ok: center + 2 workers trained 60 steps ($(ls a/checkpoints | tr '\n' ' '))"

"$EMBER" inspect "$ckpt" >inspect.log 2>&1 || { cat inspect.log >&2; fail "inspect rejects the async checkpoint"; }
grep -q "^mode        async" inspect.log || fail "inspect does not report mode async"
grep -q "role=worker" inspect.log || fail "inspect does not show the worker state"
grep -q "/optimizer/momentum_buffer/" inspect.log || fail "no momentum buffer in the checkpoint"
grep -q "/ranks/2/residual .* ok" inspect.log || fail "no residual of worker 2 in the checkpoint"
echo "ok: inspect reads the async checkpoint (mode async, worker state, momentum, residuals)"

# The center's final validation (eval.batches = 4 batches of 4 x 32) equals `ember eval` on the same batches.
center_val=$(grep "val loss" a.log | tail -1 | sed 's/.*val loss \([0-9.]*\).*/\1/')
"$EMBER" eval --checkpoint "$ckpt" --data data --batch-size 4 --seq-len 32 --max-batches 4 --json >eval.json 2>eval.err ||
  { cat eval.err >&2; fail "eval rejects the async checkpoint"; }
"$PYTHON" - "$center_val" eval.json <<'EOF' || fail "eval of the checkpoint differs from the center's validation"
import json, sys
center = float(sys.argv[1]); ev = json.load(open(sys.argv[2]))["loss"]
print(f"ok: center val loss {center:.4f}, ember eval {ev:.6f}")
sys.exit(0 if abs(center - ev) <= 1e-4 else 1)  # the log prints 4 decimals
EOF
"$EMBER" generate --checkpoint "$ckpt" --max-new-tokens 16 --seed 1 >gen.log 2>&1 || { cat gen.log >&2; fail "generate"; }
echo "ok: generate reads the async checkpoint"

# Metrics: per-worker bytes put per sync >= 30x fewer than an fp32 delta, staleness and blocked time recorded;
# the center's bytes ratio and versions per minute.
"$PYTHON" - a <<'EOF' || fail "async metrics"
import json, sys
d = sys.argv[1]
for r in (1, 2):
    recs = [json.loads(l) for l in open(f"{d}/metrics_rank{r}.jsonl")]
    assert recs, f"worker {r} wrote no metrics"
    for k in ("bytes_put", "bytes_got", "blocked_ms", "staleness", "loss", "round_ms"):
        assert k in recs[-1], f"worker {r}: no {k}"
    ratio = min(x["fp32_delta_bytes"] / x["bytes_put"] for x in recs)
    assert ratio >= 30, f"worker {r}: only {ratio:.1f}x fewer bytes than fp32 per sync"
    print(f"ok: worker {r}: {len(recs)} syncs, {recs[-1]['bytes_put']} bytes put per sync ({ratio:.1f}x fewer than fp32)")
center = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
pub = [x for x in center if "version" in x]
assert pub and pub[-1]["bytes_ratio"] >= 30 and pub[-1]["versions_per_min"] > 0, pub[-1]
assert any("val_loss" in x for x in center)
print(f"ok: center: {pub[-1]['version']} versions, bytes ratio {pub[-1]['bytes_ratio']:.1f}")
EOF

# 1a. The center evaluates a snapshot in the background and goes on folding deltas in meanwhile (evaluating in its
# loop held every worker's exchange): at least one evaluation records its loss after a version of a later
# step (one falls due every 2 steps and starts once the one before has ended). An evaluation in the loop never can.
train 3 ev.log --run.dir=ev --training.steps=60 --eval.every=2 --eval.batches=64 || { cat ev.log >&2; fail "eval run"; }
"$PYTHON" - ev/metrics.jsonl <<'EOF' || fail "the center does not fold deltas in while it evaluates"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
vals = [(i, r["step"]) for i, r in enumerate(recs) if "val_loss" in r]
overlapped = sum(any("version" in r and r["step"] > s for r in recs[:i]) for i, s in vals)
print(f"ok: {overlapped} of {len(vals)} evaluations overlapped newer versions")
sys.exit(0 if len(vals) >= 3 and overlapped >= 1 else 1)
EOF

# 1b. The workers' AdamW takes async.inner_beta1. One worker with fp32 messages, outer lr 1 and no outer momentum takes
# exactly sync's steps on one rank, so it ends where sync ends with optimizer.beta1 at that value (to fp32 rounding:
# a worker adds its delta back onto the parameters it started from), far from sync at the default beta1, and its
# checkpoint records the beta1 its moments were taken with.
ONE=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.threads=1 --training.steps=30 --eval.batches=4)
must_train 2 beta_async.log "${ONE[@]}" --run.dir=beta_async --training.mode=async --async.compression=none \
  --async.outer_lr=1 --async.outer_momentum=0 --async.inner_beta1=0.5
for beta in 0.5 0.9; do
  must_train 1 "beta_sync$beta.log" "${ONE[@]}" --run.dir="beta_sync$beta" --optimizer.beta1="$beta"
done
"$EMBER" inspect beta_async/checkpoints/step_00000030.h5 >beta_inspect.log 2>&1 ||
  { cat beta_inspect.log >&2; fail "inspect rejects the async checkpoint of beta_async"; }
grep -q "beta1=0.5 " beta_inspect.log || fail "the async checkpoint does not record the workers' beta1 0.5"
"$PYTHON" - beta_async beta_sync0.5 beta_sync0.9 <<'EOF' || fail "async.inner_beta1 is not the workers' beta1"
import json, sys
val = [[json.loads(l)["val_loss"] for l in open(f"{d}/metrics.jsonl") if "val_loss" in l][-1] for d in sys.argv[1:]]
a, s5, s9 = val
print(f"ok: one worker at inner beta1 0.5: {a:.6f}; sync at beta1 0.5: {s5:.6f}, at 0.9: {s9:.6f}")
assert abs(a - s5) <= 1e-4 * s5 and abs(a - s9) > 10 * abs(a - s5) + 1e-3
EOF

# 2. Restarts with another number of workers: 3 (one without saved state) and 1 (one state dropped).
for np in 4 2; do
  cp -r a "r$np"
  train "$np" "r$np.log" --run.dir="r$np" --training.steps=80 --resume auto || { cat "r$np.log" >&2; fail "resume at np $np"; }
  grep -q "notice: .*worker" "r$np.log" || { cat "r$np.log" >&2; fail "np $np: no notice about the worker state"; }
  grep -q "resumed from .*step_00000060.h5 at step 60" "r$np.log" || { cat "r$np.log" >&2; fail "np $np did not resume at 60"; }
  grep -q "done at step 80" "r$np.log" || { cat "r$np.log" >&2; fail "np $np did not finish"; }
  echo "ok: resumed with $((np - 1)) worker(s): $(grep -m1 'notice:' "r$np.log" | cut -c1-110)..."
done

# 3. Each one-sided component runs a short job (the center at rank 0 serves through it).
for osc in pt2pt ucx; do
  timeout 300 mpirun -np 3 --oversubscribe --mca osc "$osc" "$EMBER" train "${ARGS[@]}" --run.dir="osc_$osc" \
    --training.steps=24 >"osc_$osc.log" 2>&1 || { cat "osc_$osc.log" >&2; fail "async run with osc $osc"; }
  grep -q "done at step 24" "osc_$osc.log" || { cat "osc_$osc.log" >&2; fail "osc $osc did not finish"; }
  echo "ok: --mca osc $osc: trained 24 steps"
done

# 4. SIGUSR1 to a worker: checkpoint, exit 3, then the rerun resumes and finishes.
timeout 300 mpirun -np 3 --oversubscribe "$EMBER" train "${ARGS[@]}" --run.dir=sig --training.steps=100000 \
  --eval.every=0 >sig.log 2>&1 &
job_pid=$!
sleep 0.5
mpirun_pid=$(pgrep -P "$job_pid" -x mpirun || pgrep -P "$job_pid" -x orterun) || fail "cannot find mpirun"
for _ in $(seq 100); do w=$(rank_pid 2) && break; sleep 0.1; done
for _ in $(seq 300); do grep -q "step .*/100000" sig.log && break; sleep 0.1; done
kill -USR1 "$w"
rc=0
wait "$job_pid" || rc=$?
job_pid="" mpirun_pid=""
[ "$rc" -eq 3 ] || { cat sig.log >&2; fail "SIGUSR1 to worker rank 2: exit $rc, expected 3"; }
stopped=$(cat sig/checkpoints/latest)
echo "ok: SIGUSR1 to worker rank 2 -> exit 3 with $stopped"
stop_step=$((10#${stopped:5:8}))
train 3 sig2.log --run.dir=sig --training.steps=$((stop_step + 12)) --resume auto ||
  { cat sig2.log >&2; fail "resume after SIGUSR1"; }
grep -q "done at step $((stop_step + 12))" sig2.log || { cat sig2.log >&2; fail "resume after SIGUSR1 did not finish"; }
echo "ok: resumed after the stop and finished at step $((stop_step + 12))"

# 5. kill -9 of a worker ends the job (no hang); the two survivors (center + 1 worker) resume from the last checkpoint.
timeout 90 mpirun -np 3 --oversubscribe "$EMBER" train "${ARGS[@]}" --run.dir=kill --training.steps=100000 \
  --eval.every=0 --checkpoint.interval=8 >kill.log 2>&1 &
job_pid=$!
for _ in $(seq 600); do [ -s kill/checkpoints/latest ] && break; sleep 0.1; done
[ -s kill/checkpoints/latest ] || { cat kill.log >&2; fail "no checkpoint within 60 s"; }
mpirun_pid=$(pgrep -P "$job_pid" -x mpirun || pgrep -P "$job_pid" -x orterun) || fail "cannot find mpirun"
victim=$(rank_pid 1) || fail "cannot find worker rank 1"
kill -KILL "$victim"
start=$SECONDS
rc=0
wait "$job_pid" || rc=$?
job_pid="" mpirun_pid=""
[ "$rc" -ne 124 ] || fail "job hung after worker rank 1 was killed"
[ "$rc" -ne 0 ] || fail "job exited 0 after worker rank 1 was killed"
echo "ok: kill -9 of worker rank 1 -> job exited $rc after $((SECONDS - start)) s"
last=$(cat kill/checkpoints/latest)
last_step=$((10#${last:5:8}))
train 2 kill2.log --run.dir=kill --training.steps=$((last_step + 8)) --resume auto ||
  { cat kill2.log >&2; fail "the survivors did not resume"; }
grep -q "resumed from .*$last" kill2.log || { cat kill2.log >&2; fail "did not resume from $last"; }
echo "ok: center + 1 worker resumed from $last and finished"

# 6. Bad setups: one rank only; a center that stops serving (the workers' wait times out with a named error).
expect_error async_one_rank "mode = async needs at least 2 ranks" \
  timeout 60 mpirun -np 1 "$EMBER" train "${ARGS[@]}" --run.dir=one
[ ! -e one ] || fail "a refused run wrote into its run dir"
# The workers report it themselves ("[rank r] error: ..." as ranks other than 0 do), each one that times out.
start=$SECONDS
rc=0
timeout 120 mpirun -np 3 --oversubscribe "$EMBER" train "${ARGS[@]}" --run.dir=stall --training.steps=1000 \
  --async.test_center_stall=3 --async.center_timeout=3 >stall.log 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat stall.log >&2; fail "stalled center: exit $rc (0: no error, 124: hang)"; }
grep -Eq '^(\[rank [12]\] )?error: async worker rank [12]: the center \(rank 0\) has not taken' stall.log ||
  { cat stall.log >&2; fail "stalled center: no error naming the center"; }
grep -Eq '^(\[rank [12]\] )?hint: .*async.center_timeout' stall.log || { cat stall.log >&2; fail "stalled center: no hint"; }
echo "ok: stalled center -> exit $rc after $((SECONDS - start)) s: $(grep -m1 'error: ' stall.log)"
echo PASS
