#!/usr/bin/env bash
# The cost ledger: one training step of the CUDA backend as it would run, counted without a GPU by the kernel model in
# count-only mode (tests/kernel_model/cost_ledger.cpp): every kernel and GEMM in launch order with the bytes it moves
# and the FLOPs it does, sums by phase and by kernel, and the roofline step time and MFU bound on an H100 SXM and an
# RTX 4090. Prints the ledger for GPT-2 124M (B 16, T 1024) and 350M (B 8, T 1024), the shipped configs, at bf16.
# Arguments are passed to every ledger run (e.g. --training.precision=fp32, --training.recompute=full, --launches).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment): the configs to count; EMBER_BUILD_DIR.
CONFIGS=${BENCH_CONFIGS:-"configs/gpt2-124m.ini configs/gpt2-350m.ini"}
for config in $CONFIGS; do [[ -f "$config" ]] || die "$config: no such config" "BENCH_CONFIGS lists INI files"; done

BUILD_HINT="the ledger needs the CUDA headers (the CUDA toolkit; nvcc on PATH or in /usr/local/cuda/bin) but no GPU" \
  build_targets ember_cost_ledger
LEDGER=$(built tests/kernel_model/ember_cost_ledger)

echo "cost ledger, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
for config in $CONFIGS; do
  echo
  echo "=== $config $*"
  "$LEDGER" --config "$config" "$@"
done
