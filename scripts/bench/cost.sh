#!/usr/bin/env bash
# The cost ledger: one training step of the CUDA backend as it would run, counted without a GPU by the kernel model in
# count-only mode (tests/kernel_model/cost_ledger.cpp): every kernel and GEMM in launch order with the bytes it moves
# and the FLOPs it does, sums by phase and by kernel, and the roofline step time and MFU bound on an H100 SXM and an
# RTX 4090. Prints the ledger for GPT-2 124M (B 16, T 1024) and 350M (B 8, T 1024), the shipped configs, at bf16.
# Arguments are passed to every ledger run (e.g. --training.precision=fp32, --training.recompute=full, --launches).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)

# Knobs (environment): build directory, the configs to count.
BUILD_DIR=${EMBER_BUILD_DIR:-build}
CONFIGS=${BENCH_CONFIGS:-"configs/gpt2-124m.ini configs/gpt2-350m.ini"}

die() { echo "error: $1" >&2; shift; for line in "$@"; do echo "hint: $line" >&2; done; exit 1; }

for config in $CONFIGS; do [[ -f "$config" ]] || die "$config: no such config" "BENCH_CONFIGS lists INI files"; done

# --- build (an existing build directory is reused; otherwise a Release one is configured) ---
BUILD_LOG=$(mktemp "${TMPDIR:-/tmp}/ember-cost-build.XXXXXX.log")
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >"$BUILD_LOG" 2>&1 ||
    { tail -n 30 "$BUILD_LOG" >&2; die "configuring $BUILD_DIR failed (last lines above)" "run scripts/setup.sh"; }
fi
cmake --build "$BUILD_DIR" -j"$(nproc)" --target ember_cost_ledger >>"$BUILD_LOG" 2>&1 || {
  tail -n 30 "$BUILD_LOG" >&2
  die "building ember_cost_ledger in $BUILD_DIR failed (last lines above)" \
      "the ledger needs the CUDA headers (the CUDA toolkit; nvcc on PATH or in /usr/local/cuda/bin) but no GPU"
}
rm -f "$BUILD_LOG"
LEDGER="$ROOT/$BUILD_DIR/tests/kernel_model/ember_cost_ledger"
[[ "$BUILD_DIR" == /* ]] && LEDGER="$BUILD_DIR/tests/kernel_model/ember_cost_ledger"

echo "cost ledger, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
for config in $CONFIGS; do
  echo
  echo "=== $config $*"
  "$LEDGER" --config "$config" "$@"
done
