# The shared start of the benchmark scripts (scripts/bench/*.sh), sourced after `set -euo pipefail`: moves to the
# repository root (ROOT), remembering the caller's directory for paths given relative to it, and defines die,
# from_caller, require_positive, build_targets and built. BUILD_DIR is the Release build the scripts use
# (EMBER_BUILD_DIR, default build).
CALLER_DIR=$(pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
BUILD_DIR=${EMBER_BUILD_DIR:-build}

# die MESSAGE [HINT...]: one error line, a hint line for each HINT, exit 1.
die() {
  echo "error: $1" >&2
  shift
  for line in "$@"; do echo "hint: $line" >&2; done
  exit 1
}
# A path the caller gave, made absolute against the caller's directory.
from_caller() { [[ "$1" == /* ]] && echo "$1" || echo "$CALLER_DIR/$1"; }
# require_positive NAME...: each variable holds a positive integer (set by the knob BENCH_NAME).
require_positive() {
  local v
  for v in "$@"; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "BENCH_$v = '${!v}' is not a positive integer" "e.g. BENCH_$v=2"
  done
}
# build_targets TARGET...: the Debian packages, a Release build configured in BUILD_DIR where it is not, the targets.
build_targets() {
  bash scripts/setup.sh
  [[ -f "$BUILD_DIR/CMakeCache.txt" ]] ||
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "$@" >/dev/null
}
# The absolute path of a program built in BUILD_DIR (e.g. built ember, built tests/bench/bench_adamw).
built() { [[ "$BUILD_DIR" == /* ]] && echo "$BUILD_DIR/$1" || echo "$ROOT/$BUILD_DIR/$1"; }
