#!/usr/bin/env bash
# Async convergence: on the same data and the same total tokens (600 sync-equivalent steps of 2 x 4 x 32 tokens),
# the async 1-bit run (center + 2 workers, async.local_steps = 16) is compared with the sync all-reduce run over
# 2 ranks in final validation loss, averaged over seeds 1..6. The target is +3%; measured means so far lie between
# +1.2% and +3.1%, so the check fails only above +5% (a regression) and prints the gap against the target. With error
# feedback switched off it is measurably worse (mean at least 1% above the error-feedback mean, worse on most seeds). Every seed's numbers and the spread are
# printed; validation uses the whole val split. Async runs are not bitwise reproducible (message order depends on
# timing), hence means over seeds.
source "$(dirname "$0")/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
COMMON=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.threads=1 --training.steps=600
        --eval.batches=100000 --eval.every=0 --checkpoint.interval=0)
final_val() {  # final_val LOG: the last validation loss the run printed
  grep "val loss" "$1" | tail -1 | sed 's/.*val loss \([0-9.]*\).*/\1/'
}
: >results.txt
for seed in 1 2 3 4 5 6; do
  timeout 600 mpirun -np 2 --oversubscribe "$EMBER" train "${COMMON[@]}" --training.seed=$seed --run.dir="sync$seed" \
    >"sync$seed.log" 2>&1 || { cat "sync$seed.log" >&2; fail "sync run, seed $seed"; }
  for ef in true false; do
    timeout 600 mpirun -np 3 --oversubscribe "$EMBER" train "${COMMON[@]}" --training.seed=$seed --training.mode=async \
      --async.local_steps=16 --async.error_feedback=$ef --run.dir="async_${ef}_$seed" >"async_${ef}_$seed.log" 2>&1 ||
      { cat "async_${ef}_$seed.log" >&2; fail "async run (error_feedback = $ef), seed $seed"; }
  done
  echo "$seed $(final_val "sync$seed.log") $(final_val "async_true_$seed.log") $(final_val "async_false_$seed.log")" |
    tee -a results.txt
done
"$PYTHON" - results.txt <<'PY' || fail "async convergence criteria"
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
sync, ef, noef = ([r[i] for r in rows] for i in (1, 2, 3))
def show(name, v):
    print(f"{name:28s} mean {st.mean(v):.4f}  sd {st.stdev(v):.4f}  min {min(v):.4f}  max {max(v):.4f}")
show("sync all-reduce (2 ranks)", sync)
show("async 1-bit + error feedback", ef)
show("async 1-bit, no feedback", noef)
gap = st.mean(ef) / st.mean(sync) - 1
worse = st.mean(noef) / st.mean(ef) - 1
wins = sum(n > e for n, e in zip(noef, ef))
print(f"async vs sync: {gap:+.2%} (target +3%: {'met' if gap <= 0.03 else 'NOT met'}; fails above +5%); no feedback vs feedback: {worse:+.2%}, worse on {wins} of {len(rows)} seeds")
ok = gap <= 0.05 and worse >= 0.01 and wins > len(rows) / 2
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
