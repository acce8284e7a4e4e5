#!/usr/bin/env bash
# Host AdamW throughput (docs/BENCHMARKS.md): one step of the CPU backend's AdamW (tests/bench/bench_adamw), the
# update an offloaded optimizer runs on the host, against PyTorch's torch.optim.AdamW with foreach on and off
# (scripts/bench/adamw_torch.py) on the same GPT-2 parameter shapes, side by side, at one thread and at every core.
# Prints one table row per shape and thread count: parameters per second per thread of each, Ember's ratio to the
# faster PyTorch variant, and Ember's update as an offloaded optimizer with host masters runs it (the weights' bf16
# copy written in the update's pass) beside the same with the copy cast in a pass of its own.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment): timed steps per measurement (the best is kept), the Python with torch; EMBER_BUILD_DIR.
ROUNDS=${BENCH_ROUNDS:-5}
TORCH_PYTHON=${BENCH_PYTHON:-$ROOT/.venv/bin/python}
require_positive ROUNDS
"$TORCH_PYTHON" -c 'import torch' 2>/dev/null ||
  die "$TORCH_PYTHON cannot import torch" "run bash scripts/python_env.sh, or set BENCH_PYTHON to a Python with torch"

build_targets bench_adamw
BENCH=$(built tests/bench/bench_adamw)
per_thread() { sed -n 's/.*, \([0-9.]*\) M per thread$/\1/p'; }  # the last number of a result line

echo "host AdamW, M parameters per second per thread (best of $ROUNDS steps)"
echo "| model | parameters | threads | Ember | torch foreach | torch for-loop | Ember / faster torch |" \
  "Ember + bf16 copy in the update | + bf16 copy after it |"
echo "|---|---|---|---|---|---|---|---|---|"
for shape in "124M 12 768" "350M 24 1024"; do
  read -r name layers width <<<"$shape"
  for threads in 1 "$(nproc)"; do
    args=(--n-layer "$layers" --n-embd "$width" --rounds "$ROUNDS")
    ember=$(OMP_NUM_THREADS=$threads "$BENCH" "${args[@]}") || die "bench_adamw failed" "rerun: $BENCH ${args[*]}"
    on=$("$TORCH_PYTHON" scripts/bench/adamw_torch.py "${args[@]}" --threads "$threads" --foreach on)
    off=$("$TORCH_PYTHON" scripts/bench/adamw_torch.py "${args[@]}" --threads "$threads" --foreach off)
    fused=$(OMP_NUM_THREADS=$threads "$BENCH" "${args[@]}" --variant 2 | per_thread)
    after=$(OMP_NUM_THREADS=$threads "$BENCH" "${args[@]}" --variant 3 | per_thread)
    e=$(per_thread <<<"$ember") a=$(per_thread <<<"$on") b=$(per_thread <<<"$off")
    n=$(sed -n 's/.*: \([0-9]*\) parameters.*/\1/p' <<<"$ember")
    ratio=$(awk -v e="$e" -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", e / (a > b ? a : b) }')
    echo "| GPT-2 $name | $n | $threads | $e | $a | $b | **$ratio** | $fused | $after |"
  done
done
echo "$("$TORCH_PYTHON" -c 'import torch; print("torch", torch.__version__)'); Ember's arena includes the padded vocabulary rows"
