# The shared start of the benchmark scripts (scripts/bench/*.sh), sourced after `set -euo pipefail`: moves to the
# repository root (ROOT), remembering the caller's directory for paths given relative to it, and defines die,
# from_caller, require_positive, build_targets, built, work_folder and cpu_model. BUILD_DIR is the Release build the
# scripts use (EMBER_BUILD_DIR, default build).
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
# build_targets TARGET...: builds the cmake targets in BUILD_DIR. Where BUILD_DIR holds no build yet, the Debian
# packages (scripts/setup.sh) and a Release configuration come first; an existing build must be a Release one, as
# timings need. A failed step prints its last lines, an error and a hint (BUILD_HINT, where the caller sets one).
build_targets() {
  local log type
  log=$(mktemp "${TMPDIR:-/tmp}/ember-bench-build.XXXXXX.log")
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    bash scripts/setup.sh
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 >"$log" 2>&1 ||
      { tail -n 30 "$log" >&2; die "configuring $BUILD_DIR failed (last lines above)" "run scripts/setup.sh"; }
  fi
  type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
  [[ "$type" == Release ]] || die "$BUILD_DIR is a '$type' build; timings need Release" \
    "use another folder: EMBER_BUILD_DIR=build-release $0"
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "$@" >>"$log" 2>&1 || {
    tail -n 30 "$log" >&2
    die "building $* in $BUILD_DIR failed (last lines above)" "${BUILD_HINT:-run scripts/setup.sh, then again}"
  }
  rm -f "$log"
}
# The absolute path of a program built in BUILD_DIR (e.g. built ember, built tests/bench/bench_adamw).
built() { [[ "$BUILD_DIR" == /* ]] && echo "$BUILD_DIR/$1" || echo "$ROOT/$BUILD_DIR/$1"; }
# work_folder NAME: a fresh folder for the run's files in WORK, removed when the script succeeds and kept (its path
# printed) when it fails, so the logs behind a failure can be read.
work_folder() {
  WORK=$(mktemp -d "${TMPDIR:-/tmp}/ember-$1.XXXXXX")
  trap 'rc=$?; if ((rc == 0)); then rm -rf "$WORK"; else echo "bench: work folder kept: $WORK" >&2; fi' EXIT
}
# The CPU's model name, for a report's machine line.
cpu_model() {
  local m
  m=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
  [[ -n "$m" ]] || m=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
  echo "${m:-unknown}"
}
