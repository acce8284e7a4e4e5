#!/usr/bin/env bash
# Every pattern of scripts/device/first-run.sh's MEMCHECK_FILTER and RACECHECK_FILTER names at least one CUDA op test,
# so that a renamed test or shape cannot silently drop out of the sanitizer steps. The test list comes from the
# kernel-model build of the same sources (test_cuda_ops_model), which has every test test_cuda_ops has but the two that
# only a device can run.
# Usage: first_run_filters.sh TEST_CUDA_OPS_MODEL SOURCE_DIR
set -euo pipefail
BIN=$1
SRC=$2
eval "$(sed -n '/^MEMCHECK_FILTER=/,/^RACECHECK_FILTER=/p' "$SRC/scripts/device/first-run.sh")"
: "${MEMCHECK_FILTER:?first-run.sh sets no MEMCHECK_FILTER}" "${RACECHECK_FILTER:?first-run.sh sets no RACECHECK_FILTER}"
bad=0
for filter in MEMCHECK_FILTER RACECHECK_FILTER; do
  IFS=: read -ra patterns <<<"${!filter}"
  for p in "${patterns[@]}"; do
    n=$("$BIN" --gtest_list_tests --gtest_filter="$p" | grep -c '^  ' || true)
    if ((n == 0)); then
      echo "error: $filter pattern '$p' names no test of $(basename "$BIN")" >&2
      bad=1
    else
      echo "$filter: $p ($n)"
    fi
  done
done
((bad == 0)) || { echo "hint: rename the pattern in scripts/device/first-run.sh after the test it meant" >&2; exit 1; }
