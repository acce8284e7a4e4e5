#!/usr/bin/env bash
# Attention schedules (docs/attention.md): what they cost and what they learn.
#  1. tests/bench/bench_attention: the CPU attention forward and backward per training step, every layer, for full
#     attention and the tscale and sssl presets (12 layers of the demo's width at T = 1024 by default).
#  2. Validation loss against tokens and wall-clock at T = 512 on a byte-level corpus of this repository's sources:
#     full attention with learned positions, full with rope, tscale and sssl (with rope), each over several seeds,
#     two runs at a time on one thread each. Prints each variant's final loss (mean and per seed), the tokens and
#     seconds each takes to first reach full attention's final mean loss (learned, then rope), and writes the curves
#     as a PNG (scripts/bench/attention_summary.py).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment): loss runs' steps, seeds, sequence length, batch, evaluation interval, plot; EMBER_BUILD_DIR.
STEPS=${BENCH_STEPS:-600}
SEEDS=${BENCH_SEEDS:-3}
SEQ_LEN=${BENCH_SEQ_LEN:-512}
BATCH_SIZE=${BENCH_BATCH_SIZE:-4}
EVAL_EVERY=${BENCH_EVAL_EVERY:-50}
PLOT=$([[ -n "${BENCH_PLOT:-}" ]] && from_caller "$BENCH_PLOT" || echo "$ROOT/docs/attention_loss_vs_tokens.png")
PYTHON=${PYTHON:-$([[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3)}
require_positive STEPS SEEDS SEQ_LEN BATCH_SIZE EVAL_EVERY
"$PYTHON" -c 'import matplotlib' 2>/dev/null ||
  die "$PYTHON cannot import matplotlib" "as root: apt-get install -y --no-install-recommends python3-matplotlib"

build_targets ember bench_attention
EMBER=$(built ember)

echo "== attention time per training step (tests/bench/bench_attention) =="
OMP_NUM_THREADS=$(nproc) "$(built tests/bench/bench_attention)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ember-bench-attention.XXXXXX")
echo "== loss against tokens: work in $WORK =="
mkdir -p "$WORK/corpus"
cp -r src docs configs "$WORK/corpus/"
"$EMBER" prep --input "$WORK/corpus" --output "$WORK/data" --tokenizer bytes --val-fraction 0.05 >"$WORK/prep.log" 2>&1 ||
  die "ember prep failed (see $WORK/prep.log)" "check the build"
run() {  # name seed extra-options...
  local name=$1 seed=$2
  shift 2
  OMP_NUM_THREADS=1 "$EMBER" train --config configs/demo.ini --data.dir="$WORK/data" --run.dir="$WORK/$name-s$seed" \
    --model.block_size="$SEQ_LEN" --training.seq_len="$SEQ_LEN" --training.batch_size="$BATCH_SIZE" \
    --training.steps="$STEPS" --optimizer.warmup_steps=30 --eval.every="$EVAL_EVERY" --eval.batches=8 \
    --checkpoint.interval=0 --training.threads=1 --training.seed="$seed" "$@" >"$WORK/$name-s$seed.log" 2>&1 ||
    die "training $name seed $seed failed (see $WORK/$name-s$seed.log)" "rerun that command by hand"
}
for seed in $(seq 1 "$SEEDS"); do
  run full-learned "$seed" &
  run full-rope "$seed" --model.position=rope &
  wait
  run tscale "$seed" --model.position=rope --model.attention_windows=tscale &
  run sssl "$seed" --model.position=rope --model.attention_windows=sssl &
  wait
done
"$PYTHON" scripts/bench/attention_summary.py "$WORK" "$SEEDS" "$PLOT"
echo "runs kept in $WORK"
