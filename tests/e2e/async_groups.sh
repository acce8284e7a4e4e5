#!/usr/bin/env bash
# Async mode with worker groups (async.ranks_per_worker = 2): a center and 2 groups of 2 ranks train in sync inside
# each group and async between groups. Only the leaders talk to the center (deltas in the metrics come from ranks 1
# and 3), a group's ranks hold bitwise the same state at every checkpoint, and the run resumes onto 4 single-rank
# workers and back onto groups. A group that loses a rank is dropped and the run goes on. A group size that does not
# divide the worker ranks is refused before any work.
source "$(dirname "$0")/support/common.bash"
source "$(dirname "$0")/support/bad_input.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
ARGS=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.mode=async --training.threads=1
      --async.local_steps=4 --eval.batches=4 --run.dir=run --checkpoint.interval=30)
train() {  # train NP LOG ARGS...: an async run of NP ranks (timeout 300: a hang fails instead of blocking)
  local np=$1 log=$2
  shift 2
  mpi_train "$np" "$log" "${ARGS[@]}" "$@"
}

# 1. Center + 2 groups of 2 ranks, 60 steps.
train 5 groups.log --training.steps=60 --async.ranks_per_worker=2 || { cat groups.log >&2; fail "groups of 2"; }
grep -q "2 worker(s) of 2 rank(s)" groups.log || { head -60 groups.log >&2; fail "not 2 workers of 2 ranks"; }
grep -q "done at step 60" groups.log || { cat groups.log >&2; fail "did not reach step 60"; }
[[ -f run/metrics_rank1.jsonl && -f run/metrics_rank3.jsonl ]] || fail "no metrics of the leaders (ranks 1 and 3)"
[[ ! -f run/metrics_rank2.jsonl && ! -f run/metrics_rank4.jsonl ]] || fail "a group's second rank wrote metrics"
"$PYTHON" - <<'PY' || fail "groups: checkpoint or metrics"
import json, math
import h5py, numpy as np
recs = [json.loads(l) for l in open("run/metrics.jsonl")]
workers = {d["worker"] for r in recs for d in r.get("deltas", [])}
assert workers == {1, 3}, f"deltas came from {workers}, not the leaders 1 and 3"
vals = [r["val_loss"] for r in recs if "val_loss" in r]
# ln 256 = 5.55 for a byte model knowing nothing; 60 steps of 4 ranks get well below it.
assert vals and math.isfinite(vals[-1]) and vals[-1] < 4.5, vals
for step in (30, 60):
    with h5py.File(f"run/checkpoints/step_{step:08d}.h5", "r") as f:
        assert sorted(f["ranks"].keys()) == ["0", "1", "2", "3", "4"], list(f["ranks"].keys())
        a = {r: {k: f[f"ranks/{r}/{k}"][()] for k in ("exp_avg", "exp_avg_sq", "residual")} for r in "1234"}
    for lead, other in (("1", "2"), ("3", "4")):
        for k in ("exp_avg", "exp_avg_sq"):
            assert np.array_equal(a[lead][k], a[other][k]), f"step {step}: ranks {lead} and {other} differ in {k}"
        assert np.abs(a[lead]["residual"]).max() > 0, f"step {step}: leader {lead} has no error-feedback residual"
        assert not a[other]["residual"].any(), f"step {step}: rank {other} (no exchange) has a residual"
    assert not np.array_equal(a["1"]["exp_avg"], a["3"]["exp_avg"]), "the two groups trained alike"
print(f"deltas from ranks {sorted(workers)}; val loss {vals[-1]:.4f}; replicas equal at steps 30 and 60")
PY
echo "ok: 2 groups of 2 ranks: only the leaders exchange, each group's replicas are bitwise equal"

# 2. Resume onto 4 single-rank workers, then back onto 2 groups of 2.
train 5 single.log --training.steps=90 --resume auto || { cat single.log >&2; fail "resume onto 4 workers"; }
grep -q "resumed from .*step_00000060.h5 at step 60" single.log || { cat single.log >&2; fail "did not resume at 60"; }
grep -q "4 worker(s) of 1 rank(s)" single.log || fail "not 4 single-rank workers"
grep -q "done at step 90" single.log || { cat single.log >&2; fail "4 workers did not reach step 90"; }
train 5 back.log --training.steps=120 --async.ranks_per_worker=2 --resume auto ||
  { cat back.log >&2; fail "resume onto groups"; }
grep -q "resumed from .*step_00000090.h5 at step 90" back.log || { cat back.log >&2; fail "did not resume at 90"; }
grep -q "done at step 120" back.log || { cat back.log >&2; fail "groups did not reach step 120"; }
"$PYTHON" - <<'PY' || fail "replicas after resuming onto groups"
import h5py, numpy as np
with h5py.File("run/checkpoints/step_00000120.h5", "r") as f:
    for lead, other in (("1", "2"), ("3", "4")):
        assert np.array_equal(f[f"ranks/{lead}/exp_avg"][()], f[f"ranks/{other}/exp_avg"][()]), (lead, other)
PY
echo "ok: resumed onto 4 single-rank workers (step 60 to 90) and back onto 2 groups of 2 (90 to 120)"

# 3. A group loses a rank (rank 2, not its leader, killed after the checkpoint at step 400): its leader's collective
# ends after dist.timeout with an error and leaves the job without ending it, the center drops the group after
# async.worker_timeout, and the other group finishes the run. mpirun runs with the options that let a job go on
# when one of its processes ends (docs/cluster.md).
mkdir -p ranks
write_rank_wrapper rank.sh
export RANK_DIR=$WORK/ranks
timeout 300 mpirun -np 5 --oversubscribe --enable-recovery --mca orte_abort_on_non_zero_status 0 -x RANK_DIR \
  ./rank.sh "$EMBER" train "${ARGS[@]}" --run.dir=lost --training.steps=3000 --checkpoint.interval=400 \
  --async.ranks_per_worker=2 --async.local_steps=5 --async.worker_timeout=5 --dist.timeout=10 >lost.log 2>&1 &
mpirun_pid=$!
trap kill_background_job EXIT
for _ in $(seq 1 600); do [[ -f lost/checkpoints/step_00000400.h5 ]] && break; sleep 0.2; done
[[ -f lost/checkpoints/step_00000400.h5 ]] || { cat lost.log >&2; fail "no checkpoint at step 400"; }
kill -KILL "$(cat ranks/rank2.pid)"
wait "$mpirun_pid" || true
grep -q "done at step 3000" lost.log || { cat lost.log ranks/*.err >&2; fail "the run did not finish without group 1"; }
for r in 0 3 4; do [[ $(cut -d' ' -f1 ranks/rank$r.exit) -eq 0 ]] || fail "rank $r: $(cat ranks/rank$r.exit)"; done
[[ $(cut -d' ' -f1 ranks/rank1.exit) -ne 0 ]] || fail "the leader of the broken group exited 0"
# The leader is waiting in the group's gradient all-reduce or in one of its broadcasts (the next step, the round's
# parameters), whichever the kill interrupted: the error names that collective.
grep -Eq "^\[rank 1\] error: MPI (all-reduce|broadcast) did not complete within dist.timeout = 10 s" ranks/rank1.err ||
  { cat ranks/rank1.err >&2; fail "rank 1: no error naming the group's collective"; }
grep -q "^hint: this worker's group leaves the job, which goes on" ranks/rank1.err ||
  { cat ranks/rank1.err >&2; fail "rank 1: the hint does not say that only its group leaves"; }
[[ $(grep -c "worker rank 1 (the group of ranks 1..2) on .* dropped" ranks/rank0.err) -eq 1 ]] ||
  { cat ranks/rank0.err >&2; fail "the center did not drop group 1 exactly once"; }
echo "ok: a group that lost a rank was dropped; the other group finished the run"

# 4. Bad input: 3 worker ranks cannot form groups of 2.
protect run
bad_case uneven_groups nonzero "async.ranks_per_worker = 2 does not divide the 3 worker ranks" --timeout 120 -- \
  mpirun -np 4 --oversubscribe "$EMBER" train "${ARGS[@]}" --training.steps=130 --async.ranks_per_worker=2 \
  --resume auto
bad_case_summary
echo PASS
