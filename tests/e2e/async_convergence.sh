#!/usr/bin/env bash
# Async convergence: on the same data and the same total tokens (600 sync-equivalent steps of 2 x 4 x 32 tokens),
# the async 1-bit run (center + 2 workers, async.local_steps = 16) is compared with the sync all-reduce run over
# 2 ranks in final validation loss (the whole val split), averaged over seeds 1..12. Async runs are not bitwise
# reproducible (message order depends on timing) and one seed's gap ranges over several percent between repeats, so
# only a mean over many seeds is a measurement: repeats of this 12-seed mean gave +3.2% to +4.3% (an uncompressed
# exchange gave +3.9%, so the gap is the cost of asynchronous local AdamW at this small, noisy batch, not of the
# 1-bit codec; the corpus is this checkout's src/, so the number moves a little as the sources change). The target
# is +3%, not met yet; the check prints the gap against it and fails above +6%, about four standard deviations of the
# 12-seed mean (~0.4%) above the highest mean measured, so it catches a regression and not the spread.
# Error feedback: at the default block size (2048) the codec is accurate enough that switching feedback off costs
# only ~0.3-1.3% here, within the seed spread. The check therefore also runs the exchange with one scale for all
# parameters (async.block_size = 65536 > the model's size), where the uncorrected codec is badly biased; there the
# loss without feedback must be at least 2% above the loss with it (measured +5.5%) and worse on most seeds.
source "$(dirname "$0")/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
COMMON=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.threads=1 --training.steps=600
        --eval.batches=100000 --eval.every=0 --checkpoint.interval=0)
final_val() {  # final_val LOG: the last validation loss the run printed
  grep "val loss" "$1" | tail -1 | sed 's/.*val loss \([0-9.]*\).*/\1/'
}
: >results.txt
async_run() {  # async_run NAME SEED ARGS...: one async run; its log is NAME.log
  local name=$1 seed=$2
  shift 2
  timeout 600 mpirun -np 3 --oversubscribe "$EMBER" train "${COMMON[@]}" --training.seed=$seed --training.mode=async \
    --async.local_steps=16 "$@" --run.dir="$name" >"$name.log" 2>&1 || { cat "$name.log" >&2; fail "async run $name"; }
}
for seed in $(seq 1 12); do
  timeout 600 mpirun -np 2 --oversubscribe "$EMBER" train "${COMMON[@]}" --training.seed=$seed --run.dir="sync$seed" \
    >"sync$seed.log" 2>&1 || { cat "sync$seed.log" >&2; fail "sync run, seed $seed"; }
  async_run "async$seed" $seed
  async_run "oneblock_ef$seed" $seed --async.block_size=65536
  async_run "oneblock_noef$seed" $seed --async.block_size=65536 --async.error_feedback=false
  echo "$seed $(final_val "sync$seed.log") $(final_val "async$seed.log") $(final_val "oneblock_ef$seed.log")" \
       "$(final_val "oneblock_noef$seed.log")" | tee -a results.txt
done
"$PYTHON" - results.txt <<'PY' || fail "async convergence criteria"
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
sync, ef, one_ef, one_noef = ([r[i] for r in rows] for i in (1, 2, 3, 4))
def show(name, v):
    print(f"{name:38s} mean {st.mean(v):.4f}  sd {st.stdev(v):.4f}  min {min(v):.4f}  max {max(v):.4f}")
show("sync all-reduce (2 ranks)", sync)
show("async 1-bit + error feedback", ef)
show("async, one scale, error feedback", one_ef)
show("async, one scale, no feedback", one_noef)
gap = st.mean(ef) / st.mean(sync) - 1
worse = st.mean(one_noef) / st.mean(one_ef) - 1
wins = sum(n > e for n, e in zip(one_noef, one_ef))
print(f"async vs sync: {gap:+.2%} (target +3%: {'met' if gap <= 0.03 else 'NOT met'}; fails above +6%)")
print(f"one scale, no feedback vs feedback: {worse:+.2%} (must be >= +2%), worse on {wins} of {len(rows)} seeds")
ok = gap <= 0.06 and worse >= 0.02 and wins > len(rows) / 2
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
