#!/usr/bin/env bash
# Async convergence, in two parts.
# Quality: the demo model (configs/demo.ini, 0.84 M parameters, batch 16 per worker) on the demo's corpus (this
# checkout's text and the system's licence texts, staged as scripts/run.sh stages it), 300 sync-equivalent steps.
# The async run (center + 2 workers, the [async] defaults) is compared with sync all-reduce over 2 ranks on the same
# data and total tokens, in final validation loss. Async runs are not bitwise reproducible (message order depends on
# timing); the gap of the means over seeds 1..3 must be at most +7%. This is a guard against a breakdown, not the
# target for async mode (+2%, which no method measured so far reaches: docs/architecture.md, "How the async defaults
# were chosen"). The gap depends on the corpus, which is the checkout's own text and moves as it changes: measured
# with the defaults (each delta weighted 1 / sqrt(N), outer lr 1.4), +4.26% on the corpus of 2026-11-24, +3.6% on the
# demo corpus staged a day earlier, and on the corpus of 2026-11-26 (sync 2.3696, 2.4103, 2.3658, deterministic)
# +5.64%, +5.84% and +5.57% in three runs (async means 2.5163, 2.5211, 2.5147: timing moves a 3-seed mean by about
# 0.3%). On that corpus a plain average of the deltas (outer lr 1 / sqrt(2), no momentum) gave +6.6% over seeds 1-2
# and dropping error feedback +17%; the finer comparisons of methods are scripts/bench/async.sh's.
# Error feedback: on the tiny model (configs/tiny.ini, batch 4, 600 steps, this checkout's src/ as corpus), with one
# scale for all parameters (async.block_size = 65536 > the model's size) the uncorrected codec is badly biased;
# there the loss without feedback (async.error_feedback = false drops what the messages lost both ways: the
# workers' residuals and the difference a download left behind) must be at least 2% above the loss with it and worse
# on most of seeds 1..24 (measured +13.1%, worse on 24 of 24).
source "$(dirname "$0")/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
SEEDS=3 FEEDBACK_SEEDS=24

mkdir -p corpus/project corpus/licenses
for item in README.md docs src configs scripts; do cp -R "$SRC/$item" corpus/project/; done
cp -RL /usr/share/common-licenses/. corpus/licenses/ 2>/dev/null || true
"$EMBER" prep --input corpus --output demo_data --tokenizer bytes --val-fraction 0.05 >/dev/null
"$EMBER" prep --input "$SRC/src" --output tiny_data --val-fraction 0.1 >/dev/null
DEMO=(--config "$SRC/configs/demo.ini" --data.dir=demo_data --training.threads=1 --training.steps=300
      --eval.every=0 --checkpoint.interval=0)
TINY=(--config "$SRC/configs/tiny.ini" --data.dir=tiny_data --training.threads=1 --training.steps=600
      --eval.batches=100000 --eval.every=0 --checkpoint.interval=0)
final_val() {  # final_val LOG: the last validation loss the run printed
  grep "val loss" "$1" | tail -1 | sed 's/.*val loss \([0-9.]*\).*/\1/'
}
run() {  # run NAME NP SEED ARGS...: one run; its log is NAME.log
  local name=$1 np=$2 seed=$3
  shift 3
  timeout 600 mpirun -np "$np" --oversubscribe "$EMBER" train "$@" --training.seed="$seed" --run.dir="$name" \
    >"$name.log" 2>&1 || { cat "$name.log" >&2; fail "run $name"; }
  rm -rf "$name"
}
: >results.txt
for seed in $(seq 1 $SEEDS); do
  run "sync$seed" 2 "$seed" "${DEMO[@]}"
  run "async$seed" 3 "$seed" "${DEMO[@]}" --training.mode=async
  echo "$seed $(final_val "sync$seed.log") $(final_val "async$seed.log")" | tee -a results.txt
done
: >feedback.txt
for seed in $(seq 1 $FEEDBACK_SEEDS); do
  run "oneblock_ef$seed" 3 "$seed" "${TINY[@]}" --training.mode=async --async.block_size=65536
  run "oneblock_noef$seed" 3 "$seed" "${TINY[@]}" --training.mode=async --async.block_size=65536 \
    --async.error_feedback=false
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
show("demo: sync all-reduce (2 ranks)", sync)
show("demo: async, the defaults", ef)
show("tiny: async, one scale, feedback", one_ef)
show("tiny: async, one scale, no feedback", one_noef)
gaps = [a / s - 1 for s, a in zip(sync, ef)]
gap = st.mean(ef) / st.mean(sync) - 1
worse = st.mean(one_noef) / st.mean(one_ef) - 1
wins = sum(n > e for n, e in zip(one_noef, one_ef))
print(f"demo, async vs sync over {len(rows)} seeds: {gap:+.2%} (must be <= +7%); per seed {min(gaps):+.1%} to "
      f"{max(gaps):+.1%}")
print(f"one scale, no feedback vs feedback: {worse:+.2%} (must be >= +2%), worse on {wins} of {len(fb)} seeds")
ok = gap <= 0.07 and worse >= 0.02 and wins > len(fb) / 2
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
