#!/usr/bin/env bash
# Builds Ember and its tests with AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/, GCC, no CUDA) and
# runs them: the unit tests, then the e2e tests given by a ctest regex (default: those labelled `sanitize`, the ones
# that exercise readers, writers and the server; each may take an hour, and all of them about 45 minutes under ASan on
# 2 cores). Any report fails the test that triggered it: UBSan findings stop the program, ASan's always do,
# LeakSanitizer's at exit (the libraries' own lifetime allocations are suppressed by tests/sanitizer/lsan.supp).
#   scripts/sanitize.sh [--no-e2e] [CTEST_REGEX]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BUILD=${EMBER_ASAN_BUILD:-$ROOT/build-asan}
e2e=true
if [ "${1:-}" = "--no-e2e" ]; then e2e=false; shift; fi
E2E=${1:-}

bash scripts/setup.sh
bash scripts/python_env.sh
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEMBER_SANITIZE=ON -DEMBER_CUDA=OFF \
    -DPython3_EXECUTABLE=/usr/bin/python3 > "$BUILD.configure.log" 2>&1 || {
    echo "error: sanitize: cmake failed (see $BUILD.configure.log)" >&2
    exit 2
  }
fi
cmake --build "$BUILD" -j"$(nproc)" > "$BUILD/build.log" 2>&1 || {
  echo "error: sanitize: the build failed (see $BUILD/build.log)" >&2
  exit 2
}

# The slow unwinder for allocation stacks: the libraries are built without frame pointers, so the fast one stops
# after a frame or two and the suppressions, which match the library a frame is in, never see Open MPI's frames.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:fast_unwind_on_malloc=0
export LSAN_OPTIONS=suppressions=$ROOT/tests/sanitizer/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Python loads no sanitized library, but the e2e scripts' children of the ember binary inherit these; the
# interpreter is never sanitized itself.
status=0
ctest --test-dir "$BUILD" -L unit -j"$(nproc)" --timeout 1200 --output-on-failure > "$BUILD/unit.log" 2>&1 || status=1
tail -4 "$BUILD/unit.log"
if $e2e; then
  if [ -n "$E2E" ]; then select=(-R "$E2E"); else select=(-L sanitize); fi
  ctest --test-dir "$BUILD" "${select[@]}" --timeout 1800 --output-on-failure > "$BUILD/e2e.log" 2>&1 || status=1
  tail -4 "$BUILD/e2e.log"
fi
grep -l -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error: " "$BUILD"/Testing/Temporary/LastTest*.log \
  "$BUILD/unit.log" "$BUILD/e2e.log" 2>/dev/null && status=1
exit $status
