#!/usr/bin/env bash
# Runs on a GPU machine (no internet, no MPI/HDF5/Boost/OpenBLAS/GoogleTest): unpacks the carried .device/debs
# into a private prefix, builds Ember with nvcc, runs the gpu (and unit) tests and the GPU benchmark; logs go to $OUT.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)

# Knobs (environment): where logs go, the build folder (the prefix lives inside it), CUDA targets, ctest labels run
# in order (a label with no tests is noted and skipped), parallel jobs.
OUT=${OUT:-$ROOT/device-out}
BUILD_DIR=${EMBER_DEVICE_BUILD:-$ROOT/build-device}
CUDA_ARCHS=${EMBER_CUDA_ARCHITECTURES:-90}
LABELS=${EMBER_DEVICE_LABELS:-gpu unit}
JOBS=${EMBER_DEVICE_JOBS:-$(nproc)}
DEBS=$ROOT/.device/debs
die() { echo "error: gpu-run: $1" >&2; shift; for line in "$@"; do echo "hint: $line" >&2; done; exit 1; }
abs() { [[ "$1" == /* ]] && echo "$1" || echo "$ROOT/$1"; }
os_name() { sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null | tr -d '"'; }
source "$ROOT/scripts/device/prefix.bash"
OUT=$(abs "$OUT")
BUILD_DIR=$(abs "$BUILD_DIR")
PREFIX=$BUILD_DIR/prefix
P=$PREFIX/usr

# --- preconditions ---
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
note() { echo "gpu-run: $*"; echo "$*" >>"$SUMMARY"; }

if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
command -v nvcc >/dev/null || die "nvcc is not on PATH (nor in /usr/local/cuda/bin)" \
  "this script builds the CUDA backend; run it on the GPU machine, or put the CUDA toolkit's bin/ on PATH"
command -v g++ >/dev/null || die "g++ is not on PATH" "nvcc and the build need a host C++ compiler"
command -v cmake >/dev/null || die "cmake is not on PATH" "Ember needs CMake 3.25 or newer"
cmake_version=$(cmake --version | awk 'NR == 1 {print $3}')
printf '%s\n' 3.25 "$cmake_version" | sort -V -C ||
  die "cmake $cmake_version is older than 3.25" "put a newer cmake first on PATH (pip's 'cmake' package has one)"
glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')

# --- unpack into the private prefix (kept while MANIFEST is unchanged, so a warm machine rebuilds incrementally),
# then the prefix first in the environment, for the build and for every process the tests start ---
prefix_unpack "$DEBS" "$PREFIX"
unpacked=$PREFIX_UNPACKED
prefix_env "$PREFIX"

{
  echo "host: $(uname -srm); $(os_name); glibc $glibc"
  echo "tools: cmake $cmake_version; $(g++ --version | head -1); $(nvcc --version | tail -1)"
  echo "packages: $(sed -n 2p "$DEBS/MANIFEST" | sed 's/^# //')"
  echo "build: $BUILD_DIR (CUDA architectures $CUDA_ARCHS, -j$JOBS)"
} >>"$SUMMARY"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -q >"$OUT/nvidia-smi.txt" 2>&1 || true
  note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
else
  note "gpu: none (no nvidia-smi); gpu tests will skip"
fi

status=0
failed_step=""
fail() { status=1; failed_step=${failed_step:-$1}; note "$1: FAILED (log: $2)"; tail -n 40 "$2" >&2 || true; }

# --- configure: dependencies from the prefix (CMAKE_PREFIX_PATH is searched before the system), the MPI and HDF5
# compiler wrappers named outright, since CMake would otherwise take the first one on PATH. The cache is started
# afresh (--fresh, which rebuilds everything) after a new unpack or a configure that did not succeed, whose cached
# results could be stale; otherwise it is kept, so a warm machine rebuilds only what changed ---
configure_log=$OUT/configure.log
configured_stamp=$BUILD_DIR/.gpu-run-configured
fresh=()
if [[ $unpacked -eq 1 || ! -f "$configured_stamp" ]]; then
  fresh=(--fresh)
fi
rm -f "$configured_stamp"
if cmake "${fresh[@]}" -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCHS" \
     -DCMAKE_PREFIX_PATH="$P" \
     -DMPI_C_COMPILER="$P/bin/mpicc.openmpi" -DMPI_CXX_COMPILER="$P/bin/mpicxx.openmpi" \
     -DMPIEXEC_EXECUTABLE="$P/bin/mpiexec.openmpi" \
     -DHDF5_C_COMPILER_EXECUTABLE="$P/bin/h5pcc.openmpi" \
     >"$configure_log" 2>&1; then
  {
    echo "resolved (CMakeCache.txt):"
    grep -E '^(MPI_CXX_COMPILER|MPIEXEC_EXECUTABLE|MPI_mpi_LIBRARY|HDF5_C_COMPILER_EXECUTABLE|HDF5_C_LIBRARY_hdf5|Boost_DIR|boost_program_options_DIR|BLAS_openblas_LIBRARY|CBLAS_INCLUDE_DIR|GTest_DIR|nlohmann_json_DIR|CMAKE_CUDA_COMPILER|CMAKE_CUDA_ARCHITECTURES)[:=]' \
      "$BUILD_DIR/CMakeCache.txt" | sed 's/^/  /'
    grep -E '^ \* (CUDA|ParallelHDF5)' "$configure_log" | sed 's/^/  /'
  } >>"$SUMMARY"
  touch "$configured_stamp"
  note "configure: ok${fresh:+ (fresh cache)}"
else
  fail configure "$configure_log"
fi

# --- build ---
if [[ $status -eq 0 ]]; then
  build_log=$OUT/build.log
  if cmake --build "$BUILD_DIR" -j"$JOBS" >"$build_log" 2>&1; then
    note "build: ok"
  else
    fail build "$build_log"
  fi
fi

# --- tests: each label in turn; ctest finds no tests for a label that has none yet ---
if [[ $status -eq 0 ]]; then
  ctest_log=$OUT/ctest.log
  : >"$ctest_log"
  label_log=$(mktemp)
  for label in $LABELS; do
    # Listing first (PRE_TEST discovery runs the test programs here): a label with no tests is noted, not run.
    if ! ctest --test-dir "$BUILD_DIR" -N -L "^$label\$" >"$label_log" 2>&1; then
      { echo "=== ctest -N -L $label"; cat "$label_log"; } >>"$ctest_log"
      fail "ctest -L $label (listing the tests)" "$ctest_log"
      continue
    fi
    count=$(awk '/^Total Tests:/ {print $3}' "$label_log")
    if [[ "${count:-0}" -eq 0 ]]; then
      note "ctest -L $label: no tests with this label"
      continue
    fi
    ok=1
    ctest --test-dir "$BUILD_DIR" -L "^$label\$" --output-on-failure -j"$JOBS" --timeout 300 >"$label_log" 2>&1 || ok=0
    { echo "=== ctest -L $label ($count tests)"; cat "$label_log"; } >>"$ctest_log"
    skipped=$(grep -c '(Skipped)$' "$label_log" || true)
    if [[ $ok -eq 1 ]]; then
      note "ctest -L $label: $(grep -E 'tests passed' "$label_log" | tail -1) ($skipped skipped)"
    else
      fail "ctest -L $label" "$ctest_log"
    fi
  done
  rm -f "$label_log"
fi

# --- benchmark (when the project has one for the GPU), once the build is there: failed tests are already reported
# and fail the run, but the time on a lent GPU is short, so the numbers are taken anyway and marked as such ---
if [[ -f "$BUILD_DIR/ember" && -f "$ROOT/scripts/bench/gpu.sh" && ( -z "$failed_step" || "$failed_step" == ctest* ) ]]; then
  bench_log=$OUT/bench.log
  after=""
  [[ -n "$failed_step" ]] && after=" (after test failures: check them before trusting these numbers)"
  if EMBER_BUILD_DIR="$BUILD_DIR" bash "$ROOT/scripts/bench/gpu.sh" >"$bench_log" 2>&1; then
    note "bench: ok (scripts/bench/gpu.sh)$after"
    tail -n 20 "$bench_log"
  else
    fail bench "$bench_log"
  fi
elif [[ ! -f "$ROOT/scripts/bench/gpu.sh" ]]; then
  note "bench: scripts/bench/gpu.sh not present, skipped"
fi

echo "--- summary ($SUMMARY)"
cat "$SUMMARY"
if [[ $status -ne 0 ]]; then
  echo "error: gpu-run: $failed_step failed; its log and the others are in $OUT" >&2
  echo "hint: the device tool returns \$OUT's files; read the failing log there" >&2
fi
exit "$status"
