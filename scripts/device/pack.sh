#!/usr/bin/env bash
# Makes the bundle scripts/device/first-run.sh runs on a GPU machine: the CUDA binaries built here (sm_89 and sm_90,
# stripped) with their ctest files, the Debian packages they load, token shards, the CPU's losses for the same 124M
# run, and the cost ledger. Everything lands in .device/first-run/ (git-ignored), to be carried with the tree.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)

usage() {
  cat <<'EOF'
usage: scripts/device/pack.sh [--build-dir DIR] [--dest DIR] [--debs DIR] [--no-build] [--no-reference]

  --build-dir DIR  the CUDA build to take the binaries from (default build; configured here if absent)
  --dest DIR       where the bundle goes (default .device/first-run; replaced whole)
  --debs DIR       copy the runtime packages from DIR (a --runtime-for fetch) instead of fetching them
  --no-build       take the binaries as they are in the build folder
  --no-reference   leave out the CPU reference run (minutes here): first-run.sh's train step then fails

Needs the CUDA toolkit (nvcc), Debian's apt for the packages, and scripts/setup.sh's packages.
EOF
}

BUILD_DIR=build
DEST=.device/first-run
DEBS_FROM=""
BUILD=1
REFERENCE=1
die() { echo "error: pack: $1" >&2; shift; for line in "$@"; do echo "hint: $line" >&2; done; exit 1; }
while (($#)); do
  case "$1" in
    --build-dir|--dest|--debs)
      [[ $# -ge 2 && -n "$2" ]] || { echo "error: pack: $1 needs a value" >&2; echo "hint: $0 --help lists the options" >&2; exit 2; }
      case "$1" in --build-dir) BUILD_DIR=$2 ;; --dest) DEST=$2 ;; --debs) DEBS_FROM=$2 ;; esac
      shift ;;
    --no-build) BUILD=0 ;;
    --no-reference) REFERENCE=0 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "error: pack: unknown argument '$1'" >&2; echo "hint: $0 --help lists the options" >&2; exit 2 ;;
  esac
  shift
done
abs() { [[ "$1" == /* ]] && echo "$1" || echo "$ROOT/$1"; }
BUILD_DIR=$(abs "$BUILD_DIR")
DEST=$(abs "$DEST")
# What travels must leave room for the working tree within the device tool's 64 MiB.
LIMIT_MIB=48

# The binaries first-run.sh runs, relative to the build folder.
BINARIES=(ember tests/gpu/test_cuda_ops tests/gpu/test_gpu_communicators tests/bench/gpu_gemm_peak)
# The 124M run of first-run.sh's train and kernels steps: steps 1-20 on the CPU here, 1-24 on the GPU there. Warm-up
# over 2 steps, so that the loss falls well within 20 steps and a wrong gradient shows in it.
TRAIN_ARGS=(--config configs/gpt2-124m.ini --training.precision=bf16 --training.batch_size=4
            --training.seq_len=1024 --training.grad_accum_steps=1 --optimizer.warmup_steps=2 --eval.every=0
            --checkpoint.interval=0 --run.log_every=1)

command -v nvcc >/dev/null || die "nvcc is not on PATH" "install the CUDA toolkit, or put its bin/ on PATH"

# --- build: the shipped CMake defaults give sm_89 and sm_90 ---
if [[ $BUILD -eq 1 ]]; then
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    bash scripts/setup.sh
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
  fi
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target ember test_cuda_ops test_gpu_communicators gpu_gemm_peak \
    ember_cost_ledger >/dev/null || die "building the CUDA targets in $BUILD_DIR failed" \
    "run: cmake --build $BUILD_DIR --target test_cuda_ops (a CUDA build needs nvcc at configure time)"
fi
for bin in "${BINARIES[@]}" tests/kernel_model/ember_cost_ledger; do
  [[ -x "$BUILD_DIR/$bin" ]] || die "$BUILD_DIR/$bin is missing" \
    "a CUDA build has it: configure with nvcc on PATH and build (or drop --no-build)"
done
[[ -f "$BUILD_DIR/tests/gpu/CTestTestfile.cmake" ]] || die "$BUILD_DIR has no tests/gpu/CTestTestfile.cmake" \
  "configure the build with EMBER_BUILD_TESTS=ON"
compgen -G "$BUILD_DIR/tests/gpu/test_cuda_ops*_tests.cmake" >/dev/null ||
  die "$BUILD_DIR lists no CUDA op tests (test_cuda_ops[1]_tests.cmake, written when test_cuda_ops is built)" \
      "rebuild test_cuda_ops: cmake --build $BUILD_DIR --target test_cuda_ops"
# The architectures the CUDA code was compiled for: cuobjdump's list where the toolkit has it, else the flags CMake
# gave nvcc.
if command -v cuobjdump >/dev/null; then
  archs=$(cuobjdump --list-elf "$BUILD_DIR/ember" 2>/dev/null | grep -o 'sm_[0-9]*' | sort -u | xargs)
else
  archs=$(grep -ho 'code=\[[^]]*\]' "$BUILD_DIR"/cuda/CMakeFiles/ember_cuda.dir/flags.make 2>/dev/null |
    grep -o 'sm_[0-9]*' | sort -u | xargs)
fi
for arch in sm_89 sm_90; do
  [[ " $archs " == *" $arch "* ]] || die "$BUILD_DIR/ember holds code for ${archs:-no GPU} but not $arch" \
    "configure with -DCMAKE_CUDA_ARCHITECTURES=\"89;90\" (the default when unset)"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ember-pack.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/bundle
mkdir -p "$stage/build" "$stage/reference"

# --- binaries, stripped, and the gpu label's ctest files (a root CTestTestfile that reaches tests/gpu alone), as
# one archive ---
for bin in "${BINARIES[@]}"; do
  mkdir -p "$stage/build/$(dirname "$bin")"
  strip --strip-unneeded -o "$stage/build/$bin" "$BUILD_DIR/$bin"
done
cp "$BUILD_DIR"/tests/gpu/CTestTestfile.cmake "$BUILD_DIR"/tests/gpu/test_cuda_ops*.cmake "$stage/build/tests/gpu/"
echo 'subdirs("tests/gpu")' >"$stage/build/CTestTestfile.cmake"
# Most of each binary is its CUDA code for two architectures, which xz shrinks about six times.
tar -cJf "$stage/build.tar.xz" -C "$stage" build
rm -rf "$stage/build"

# --- token shards (bytes tokenizer: ids below 256 are valid rows of GPT-2's 50257-token embedding) ---
corpus=$work/corpus
mkdir -p "$corpus"
cp -R README.md docs src "$corpus/"
"$BUILD_DIR/ember" prep --input "$corpus" --output "$stage/data" --tokenizer bytes --val-fraction 0.05 \
  >"$work/prep.log" 2>&1 || { cat "$work/prep.log" >&2; die "ember prep failed (log above)" "check the build"; }

# --- the CPU's losses for steps 1-20 of first-run.sh's 24-step run (the schedule spans 24 steps on both) ---
if [[ $REFERENCE -eq 1 ]]; then
  echo "pack: the CPU reference, 20 steps of GPT-2 124M at B 4 x T 1024 (bf16 emulated): several minutes"
  "$BUILD_DIR/ember" train "${TRAIN_ARGS[@]}" --data.dir="$stage/data" --training.device=cpu --training.steps=24 \
    --stop-after 20 --run.dir="$work/reference" >"$stage/reference/cpu.log" 2>&1 ||
    { tail -n 30 "$stage/reference/cpu.log" >&2; die "the CPU reference run failed (last lines above)" \
      "run it by hand: build/ember train ${TRAIN_ARGS[*]} --training.device=cpu --training.steps=24 --stop-after 20"; }
  python3 - "$work/reference/metrics.jsonl" "$stage/reference/cpu_losses.txt" <<'PY'
import json, sys
losses = {}
for line in open(sys.argv[1]):
    rec = json.loads(line)
    if "loss" in rec:
        losses[int(rec["step"])] = rec["loss"]
assert sorted(losses) == list(range(1, 21)), sorted(losses)
# A comparison is only as strong as the change it follows: the loss must fall well within the 20 steps.
assert losses[1] - losses[20] >= 1.0, f"the loss fell only {losses[1] - losses[20]:.3f} in 20 steps"
with open(sys.argv[2], "w") as f:
    f.write("# step loss: GPT-2 124M, bf16 (emulated) on the CPU, scripts/device/pack.sh\n")
    for step in sorted(losses):
        f.write(f"{step} {losses[step]:.8f}\n")
print(f"pack: CPU reference losses {losses[1]:.4f} -> {losses[20]:.4f}")
PY
fi

# --- the cost ledger: the benchmark's configs, and the train step's (for the kernel table) ---
ledger=$BUILD_DIR/tests/kernel_model/ember_cost_ledger
{
  for config in configs/gpt2-124m.ini configs/gpt2-350m.ini; do
    echo "=== $config"
    "$ledger" --config "$config"
    echo
  done
} >"$stage/ledger.txt"
"$ledger" "${TRAIN_ARGS[@]}" >"$stage/ledger_train.txt"

# --- the Debian packages the binaries load (CUDA's own libraries are the GPU machine's) ---
if [[ -n "$DEBS_FROM" ]]; then
  [[ -f "$DEBS_FROM/MANIFEST" ]] || die "--debs $DEBS_FROM holds no MANIFEST" "give a folder fetch-packages.sh wrote"
  cp -R "$DEBS_FROM" "$stage/debs"
else
  runtime=()
  for bin in "${BINARIES[@]}"; do runtime+=(--runtime-for "$BUILD_DIR/$bin"); done
  bash scripts/device/fetch-packages.sh "${runtime[@]}" --dest "$stage/debs"
fi

cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt" | head -n 1; }
{
  echo "# scripts/device/pack.sh: what first-run.sh needs to know about the machine this bundle was made on"
  echo "made=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo none)$(git diff --quiet HEAD 2>/dev/null || echo '+changes')"
  echo "cuda=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  echo "archs=$archs"
  echo "source_root=$ROOT"
  echo "build_root=$BUILD_DIR"
  echo "mpiexec=$(cache MPIEXEC_EXECUTABLE)"
  echo "python=$(cache Python3_EXECUTABLE)"
  echo "train_args=${TRAIN_ARGS[*]}"
} >"$stage/MANIFEST"

size=$(du -sb "$stage" | cut -f1)
size_mib=$(awk -v b="$size" 'BEGIN {printf "%.1f", b / 1048576}')
if ((size > LIMIT_MIB * 1048576)); then
  du -sh "$stage"/* "$stage"/build/* "$stage"/build/tests/* >&2
  die "the bundle is $size_mib MiB, over $LIMIT_MIB MiB" \
      "the device tool carries 64 MiB with the tree; build fewer CUDA architectures or split the test binary"
fi
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$stage" "$DEST"
echo "pack: $size_mib MiB in $DEST (binaries for $archs; run there: bash scripts/device/first-run.sh)"
