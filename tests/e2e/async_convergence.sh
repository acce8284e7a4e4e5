#!/usr/bin/env bash
# Async convergence: on the same data and the same total tokens (600 sync-equivalent steps of 2 x 4 x 32 tokens),
# the async 1-bit run (center + 2 workers, the [async] defaults) is compared with the sync all-reduce run over
# 2 ranks in final validation loss (the whole val split). Async runs are not bitwise reproducible (message order
# depends on timing) and one seed's loss moves by several percent between repeats, so only a mean over many seeds is
# a measurement: the gap of the means over seeds 1..48 must be at most +3%. With the per-worker mirror downloads and
# local_steps 10 the mean over seeds 1..12 was +0.7% (2026-11-23); fetching every published version instead gave
# +1.8% to +2.2% over 48 seeds, with a standard error of about 0.3% (the corpus is this checkout's src/, so the
# numbers move a little as the sources change), and the defaults before that (local_steps 16, no outer momentum)
# +3.7%.
# Error feedback: with one scale for all parameters (async.block_size = 65536 > the model's size) the uncorrected
# codec is badly biased; there the loss without feedback (async.error_feedback = false drops what the messages lost
# both ways: the workers' residuals and the difference a download left behind) must be at least 2% above the loss
# with it (measured +9.2%, worse on 23 of 24 seeds; dropping only the workers' residuals gave +2.1%) and worse on
# most of seeds 1..24. The 48-seed gap at these defaults measured +2.37% (standard error 0.30%).
source "$(dirname "$0")/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
SEEDS=48 FEEDBACK_SEEDS=24

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
COMMON=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.threads=1 --training.steps=600
        --eval.batches=100000 --eval.every=0 --checkpoint.interval=0)
final_val() {  # final_val LOG: the last validation loss the run printed
  grep "val loss" "$1" | tail -1 | sed 's/.*val loss \([0-9.]*\).*/\1/'
}
async_run() {  # async_run NAME SEED ARGS...: one async run; its log is NAME.log
  local name=$1 seed=$2
  shift 2
  timeout 600 mpirun -np 3 --oversubscribe "$EMBER" train "${COMMON[@]}" --training.seed=$seed --training.mode=async \
    "$@" --run.dir="$name" >"$name.log" 2>&1 || { cat "$name.log" >&2; fail "async run $name"; }
  rm -rf "$name"
}
: >results.txt
for seed in $(seq 1 $SEEDS); do
  timeout 600 mpirun -np 2 --oversubscribe "$EMBER" train "${COMMON[@]}" --training.seed=$seed --run.dir="sync$seed" \
    >"sync$seed.log" 2>&1 || { cat "sync$seed.log" >&2; fail "sync run, seed $seed"; }
  rm -rf "sync$seed"
  async_run "async$seed" $seed
  echo "$seed $(final_val "sync$seed.log") $(final_val "async$seed.log")" | tee -a results.txt
done
: >feedback.txt
for seed in $(seq 1 $FEEDBACK_SEEDS); do
  async_run "oneblock_ef$seed" $seed --async.block_size=65536
  async_run "oneblock_noef$seed" $seed --async.block_size=65536 --async.error_feedback=false
  echo "$seed $(final_val "oneblock_ef$seed.log") $(final_val "oneblock_noef$seed.log")" | tee -a feedback.txt
done
"$PYTHON" - results.txt feedback.txt <<'PY' || fail "async convergence criteria"
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
fb = [list(map(float, l.split())) for l in open(sys.argv[2])]
sync, ef = [r[1] for r in rows], [r[2] for r in rows]
one_ef, one_noef = [r[1] for r in fb], [r[2] for r in fb]
def show(name, v):
    print(f"{name:38s} mean {st.mean(v):.4f}  sd {st.stdev(v):.4f}  min {min(v):.4f}  max {max(v):.4f}")
show("sync all-reduce (2 ranks)", sync)
show("async 1-bit + error feedback", ef)
show("async, one scale, error feedback", one_ef)
show("async, one scale, no feedback", one_noef)
gaps = [a / s - 1 for s, a in zip(sync, ef)]
gap = st.mean(ef) / st.mean(sync) - 1
worse = st.mean(one_noef) / st.mean(one_ef) - 1
wins = sum(n > e for n, e in zip(one_noef, one_ef))
print(f"async vs sync over {len(rows)} seeds: {gap:+.2%} (must be <= +3%); per seed {min(gaps):+.1%} to {max(gaps):+.1%}, "
      f"standard error {st.stdev(gaps) / len(gaps) ** 0.5:.2%}")
print(f"one scale, no feedback vs feedback: {worse:+.2%} (must be >= +2%), worse on {wins} of {len(fb)} seeds")
ok = gap <= 0.03 and worse >= 0.02 and wins > len(fb) / 2
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
