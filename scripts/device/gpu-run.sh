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
MULTIARCH=x86_64-linux-gnu  # the packages are amd64 (fetch-packages.sh checks)

die() { echo "error: gpu-run: $1" >&2; shift; for line in "$@"; do echo "hint: $line" >&2; done; exit 1; }
abs() { [[ "$1" == /* ]] && echo "$1" || echo "$ROOT/$1"; }
os_name() { sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null | tr -d '"'; }
# dpkg -x, or by hand where the image has no dpkg: a .deb is an ar archive holding data.tar.{xz,zst,gz}.
extract_deb() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$PREFIX"
    return
  fi
  local member
  member=$(ar t "$1" | grep '^data\.tar')
  case "$member" in
    *.xz) ar p "$1" "$member" | tar -x -J -C "$PREFIX" ;;
    *.zst) ar p "$1" "$member" | tar -x --zstd -C "$PREFIX" ;;
    *.gz) ar p "$1" "$member" | tar -x -z -C "$PREFIX" ;;
    *) die "$(basename "$1"): no data.tar member found" "fetch the packages again (scripts/device/fetch-packages.sh)" ;;
  esac
}
OUT=$(abs "$OUT")
BUILD_DIR=$(abs "$BUILD_DIR")
PREFIX=$BUILD_DIR/prefix
P=$PREFIX/usr
LIBDIR=$P/lib/$MULTIARCH

# --- preconditions ---
if ! compgen -G "$DEBS/*.deb" >/dev/null || [[ ! -f "$DEBS/MANIFEST" ]]; then
  die "no packages in .device/debs" \
      "run scripts/device/fetch-packages.sh on a machine with Debian's apt first, and carry .device" \
      "(device tool: command 'bash scripts/device/gpu-run.sh', carry [\".device\"])"
fi
[[ "$(uname -m)" == x86_64 ]] || die "this machine is $(uname -m); the packages are x86-64" "run it on the GPU machine"
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
printf '%s\n' 2.36 "$glibc" | sort -V -C ||
  die "glibc $glibc is older than Debian 12's 2.36, which the carried packages were built against" \
      "fetch the packages on an older Debian instead (see docs/device.md)"

# --- unpack into the private prefix (kept while MANIFEST is unchanged, so a warm machine rebuilds incrementally) ---
unpacked=0
if ! cmp -s "$DEBS/MANIFEST" "$PREFIX/MANIFEST"; then
  unpacked=1
  rm -rf "$PREFIX"
  mkdir -p "$PREFIX"
  for deb in "$DEBS"/*.deb; do
    extract_deb "$deb"
  done
  # Absolute links point into / (libz.so -> /lib/.../libz.so.1.2.13): aim them into the prefix; a library link whose
  # target is absent here too (zlib1g is not carried) goes to this machine's library of the same soname.
  while IFS= read -r link; do
    target=$(readlink "$link")
    if [[ -e "$PREFIX$target" ]]; then
      ln -sfn "$PREFIX$target" "$link"
    elif [[ ! -e "$target" && "$(basename "$link")" == lib*.so ]]; then
      soname=$(basename "$target" | sed -E 's/^(lib.*\.so\.[0-9]+).*/\1/')
      system=$(ldconfig -p | awk -v s="$soname" '$1 == s && !found {found = $NF} END {print found}')
      if [[ -n "$system" ]]; then
        ln -sfn "$system" "$link"
      fi
    fi
  done < <(find "$PREFIX" -type l -lname '/*')
  # The links Debian's postinst scripts make with update-alternatives (mpicc, mpiexec, h5pcc, libopenblas.so, ...).
  while read -r link target; do
    mkdir -p "$(dirname "$PREFIX$link")"
    ln -sfn "$PREFIX$target" "$PREFIX$link"
  done < <(grep -v '^#' "$DEBS/ALTERNATIVES" 2>/dev/null || true)
  # Text files with the install prefix written in: HDF5's compiler wrapper, pkg-config files.
  sed -i "s|^prefix=\"/usr\"|prefix=\"$P\"|" "$P/bin/h5pcc.openmpi"
  find "$P" -name '*.pc' -type f -exec sed -i -E "s#(^|[=[:space:]]|-[IL])/usr([/[:space:]]|\$)#\1$P\2#g" {} +
  cp "$DEBS/MANIFEST" "$PREFIX/MANIFEST"
  note "prefix: unpacked $(find "$DEBS" -name '*.deb' | wc -l) packages into $PREFIX"
else
  note "prefix: reusing $PREFIX (same MANIFEST)"
fi

# --- environment: the prefix first, for the build and for every process the tests start ---
# The machine's own library path, kept for its Python and PyTorch (scripts/bench/gpu.sh runs them with it).
export BENCH_PYTHON_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}
export PATH=$P/bin:$PATH
# Library folders: a few packages (libnl, keyutils) still install into /lib rather than /usr/lib.
PREFIX_LIBS=$PREFIX/lib/$MULTIARCH:$LIBDIR
export LD_LIBRARY_PATH=$PREFIX_LIBS:$LIBDIR/openmpi/lib:$LIBDIR/hdf5/openmpi:$LIBDIR/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# gcc's search path for -l: HDF5's wrapper links -lcrypto -lcurl -lsz -lz, which a system keeps in the default one.
export LIBRARY_PATH=$PREFIX_LIBS${LIBRARY_PATH:+:$LIBRARY_PATH}
export CMAKE_PREFIX_PATH=$P${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig:$P/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
# A relocated Open MPI finds its components and help files through OPAL_PREFIX, and Debian's MCA defaults (the same
# as on a machine with the package installed) through OPAL_SYSCONFDIR. PMIx has its own prefix, and Debian built it
# with absolute lib and share folders, which OPAL_PREFIX does not move: each is named.
export OPAL_PREFIX=$P
export OPAL_SYSCONFDIR=$PREFIX/etc/openmpi
pmix=$LIBDIR/pmix2
export PMIX_PREFIX=$pmix PMIX_LIBDIR=$pmix/lib PMIX_PKGLIBDIR=$pmix/lib/pmix PMIX_INCLUDEDIR=$pmix/include \
       PMIX_DATADIR=$pmix/share PMIX_PKGDATADIR=$pmix/share/pmix
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Without ssh (the device image has none), Open MPI launches local ranks itself instead of looking for an rsh agent.
if ! command -v ssh >/dev/null && ! command -v rsh >/dev/null; then
  export OMPI_MCA_plm=isolated
fi
# Each test program's MPI_Init starts a singleton that makes, and at exit removes when empty, the session folder
# $TMPDIR/ompi.<host>.<uid>; Open MPI 4.1.4 fails with "mkdir ... File exists" when two tests race on it (seen in a
# ctest -j2 run). A subfolder of ours keeps it from ever being empty, so it is made once, here.
host=$(uname -n)
session_top=${TMPDIR:-/tmp}/ompi.${host%%.*}.$(id -u)
[[ -d "$session_top" ]] || mkdir -m 700 "$session_top"
mkdir -p "$session_top/ember-keep"

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
