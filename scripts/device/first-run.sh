#!/usr/bin/env bash
# Runs on a GPU machine from a bundle made here by scripts/device/pack.sh (binaries built with nvcc for sm_89 and
# sm_90, the Debian packages they load, data and CPU reference numbers), so that no GPU minute goes to compiling.
# Each step has its own time limit and log; see docs/device.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)

usage() {
  cat <<'EOF'
usage: scripts/device/first-run.sh [STEP...]

Steps, in this order (all of them when none is named; name some to rerun only those):
  info         nvidia-smi -q, the driver and CUDA versions, the GPU's UUID
  ctest-gpu    ctest -L gpu: the CUDA op tests and the GPU communicators (not the whole-model tests)
  whole-model  the whole-model GPU tests (CudaOpsWholeModel.*) and gpu_train_cuda
  train        GPT-2 124M bf16 on the bundle's shards: the first 20 losses against the CPU's, recorded when the
               bundle was made; a GPU checkpoint resumed on the CPU and the CPU's checkpoint resumed on the GPU
  bench        scripts/bench/gpu.sh (124M and 350M at T = 1024, bf16, against PyTorch where this machine's Python
               has it with CUDA), the cost ledger beside it
  kernels      the 15 kernels that take most GPU time in one 124M training step (nsys, else ncu)
  memcheck     compute-sanitizer --tool memcheck on a reduced op-test set
  racecheck    compute-sanitizer --tool racecheck on the attention tests

Environment: OUT (results; device-out/ when unset), EMBER_FIRST_RUN_BUNDLE (default .device/first-run),
EMBER_FIRST_RUN_WORK (scratch; default ${TMPDIR:-/tmp}/ember-first-run), FIRST_RUN_LIMIT_<STEP> (a step's time
limit in seconds, the step's name with '-' as '_', e.g. FIRST_RUN_LIMIT_ctest_gpu=300).
Results: $OUT/summary.txt (one line per step), $OUT/report.md (the tables), $OUT/logs.tar.gz (every step's log).
Exits 0 when every step run passed or was skipped for want of a GPU, 1 otherwise, 2 on a bad argument.
EOF
}

ALL_STEPS=(info ctest-gpu whole-model train bench kernels memcheck racecheck)
# Seen on an H200 machine (2026-11-28): ctest-gpu 30 s, whole-model 36 s, memcheck 1 s, racecheck 15 s; train over
# 150 s (two CPU steps of 21 s, and a 124M checkpoint takes 20 s to write); bench over 130 s (PyTorch's compile).
declare -A LIMIT=([info]=60 [ctest-gpu]=180 [whole-model]=240 [train]=300 [bench]=480 [kernels]=180 [memcheck]=150
                  [racecheck]=150)
# The whole-model tests, run in their own step after the op tests.
WHOLE_MODEL_REGEX='CudaOpsWholeModel|gpu_train_cuda'
# memcheck: one test of each op family at its first shape; racecheck: every attention test (the kernels with shared
# memory tiles, cp.async and warp-level handoffs).
MEMCHECK_FILTER='CudaOpsNormGelu.Encoder:CudaOpsNormGelu.GeluAndElementwise:CudaOpsLossOptim.AdamW:'
MEMCHECK_FILTER+='CudaOpsLossOptim.CrossEntropyOverPaddedRows:CudaOpsMatmul.MatmulGeluBackward:'
MEMCHECK_FILTER+='CudaOpsNormGelu.Bf16StorageMatchesTheCpu:CudaOpsNormGelu.ResidualLayerNormFromABf16Branch:'
MEMCHECK_FILTER+='*CudaOpsNormGelu.ForwardBackward/0:*CudaOpsLossOptim.FusedClassifierMatchesTheTwoOps/N37_V101:'
MEMCHECK_FILTER+='*CudaOpsMatmul.ForwardBackward/0:*CudaOpsKvCache.MatchesTheCpu/C48_NH3_maxT300:'
MEMCHECK_FILTER+='*CudaOpsAttentionBf16.*/B2_T150_C48_NH3'
RACECHECK_FILTER='*CudaOpsAttention*'
# train: the 124M model at B 4 x T 1024, 24 steps: 20 compared with the CPU, a checkpoint at 20 and at 22.
TRAIN_STEPS=24
TRAIN_COMPARED=20
# bf16 on both sides: the two backends round the same values, but a different fp32 summation order can move one
# across a bf16 rounding boundary (2^-8 relative), so they agree to bf16 resolution, 1e-2 relative (as
# tests/gpu/train_cuda.sh); a wrong kernel gives 1e-1 or more within a few steps.
TRAIN_TOLERANCE=1e-2

die() { echo "error: first-run: $1" >&2; shift; for line in "$@"; do echo "hint: $line" >&2; done; exit "${DIE_CODE:-1}"; }

STEPS=()
for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    *)
      [[ " ${ALL_STEPS[*]} " == *" $arg "* ]] ||
        DIE_CODE=2 die "unknown step '$arg'" "steps: ${ALL_STEPS[*]} (scripts/device/first-run.sh --help)"
      STEPS+=("$arg") ;;
  esac
done
((${#STEPS[@]})) || STEPS=("${ALL_STEPS[@]}")
for step in "${ALL_STEPS[@]}"; do
  var=FIRST_RUN_LIMIT_${step//-/_}
  if [[ -n "${!var-}" ]]; then
    [[ "${!var}" =~ ^[1-9][0-9]*$ ]] || DIE_CODE=2 die "$var='${!var}' is not a positive number of seconds" \
      "e.g. $var=${LIMIT[$step]}"
    LIMIT[$step]=${!var}
  fi
done

abs() { [[ "$1" == /* ]] && echo "$1" || echo "$ROOT/$1"; }
OUT=$(abs "${OUT:-device-out}")
BUNDLE=$(abs "${EMBER_FIRST_RUN_BUNDLE:-.device/first-run}")
WORK=$(abs "${EMBER_FIRST_RUN_WORK:-${TMPDIR:-/tmp}/ember-first-run}")
[[ -f "$BUNDLE/MANIFEST" ]] || die "no bundle at $BUNDLE (no MANIFEST)" \
  "make it on a Debian 12 machine with the CUDA toolkit: scripts/device/pack.sh, then carry .device"
manifest() { sed -n "s/^$1=//p" "$BUNDLE/MANIFEST" | head -n 1; }

mkdir -p "$OUT" "$WORK/logs"
SUMMARY=$OUT/summary.txt
REPORT=$OUT/report.md
: >"$SUMMARY"
: >"$REPORT"
rm -f "$WORK"/logs/*.log
note() { echo "first-run: $*"; echo "$*" >>"$SUMMARY"; }
# At most a few files come back from a device run: the step logs travel as one archive, rewritten after each step
# so that a run cut short still returns what it logged.
pack_logs() { tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs 2>/dev/null || true; }

note "bundle: $(manifest made), commit $(manifest commit), CUDA $(manifest cuda) for sm $(manifest archs)"
note "host: $(uname -srm); $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2>/dev/null | tr -d '"')"

# --- the Debian packages into a private prefix, the environment pointing at it ---
source "$ROOT/scripts/device/prefix.bash"
prefix_unpack "$BUNDLE/debs" "$WORK/prefix"
prefix_env "$WORK/prefix"

# --- the build tree, with the paths of the machine it was made on replaced by this one's ---
BUILD=$WORK/build
rm -rf "$BUILD"
if command -v xz >/dev/null; then
  tar -xJf "$BUNDLE/build.tar.xz" -C "$WORK"
else
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$BUNDLE/build.tar.xz" "$WORK"
fi
MPIEXEC=$(command -v mpiexec || true)
[[ -x "$MPIEXEC" ]] || die "the unpacked packages hold no mpiexec" "make the bundle again (scripts/device/pack.sh)"
PYTHON=$(command -v python3 || true)
[[ -n "$PYTHON" ]] || die "no python3 on PATH" "the tests and the benchmark need Python 3 with numpy"
# Through placeholders, so that a new path holding an old one (a build folder inside the source tree) is not
# replaced twice; the build root first, since it usually lies inside the source root.
while IFS= read -r -d '' file; do
  sed -i -e "s|$(manifest build_root)|@EMBER_BUILD@|g" -e "s|$(manifest source_root)|@EMBER_SOURCE@|g" \
         -e "s|$(manifest mpiexec)|@EMBER_MPIEXEC@|g" -e "s|$(manifest python)|@EMBER_PYTHON@|g" \
         -e "s|@EMBER_BUILD@|$BUILD|g; s|@EMBER_SOURCE@|$ROOT|g; s|@EMBER_MPIEXEC@|$MPIEXEC|g" \
         -e "s|@EMBER_PYTHON@|$PYTHON|g" "$file"
done < <(find "$BUILD" -name '*.cmake' -type f -print0)
EMBER=$BUILD/ember
OPS_TEST=$BUILD/tests/gpu/test_cuda_ops

# --- the CUDA libraries the binaries load, from this machine: its toolkit, else the pip packages of its Python ---
missing_libs() { ldd "$EMBER" "$OPS_TEST" 2>/dev/null | awk '/not found/ {print $1}' | sort -u; }
cuda_dirs=()
for lib in $(missing_libs); do
  found=""
  for dir in "${CUDA_HOME:-/usr/local/cuda}"/lib64 "${CUDA_HOME:-/usr/local/cuda}"/lib /usr/local/cuda/targets/x86_64-linux/lib \
             /usr/lib/x86_64-linux-gnu; do
    [[ -e "$dir/$lib" ]] && { found=$dir; break; }
  done
  if [[ -z "$found" ]]; then
    found=$(LD_LIBRARY_PATH=$BENCH_PYTHON_LD_LIBRARY_PATH "$PYTHON" - "$lib" 2>/dev/null <<'PY' || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
hits = [h for r in roots for h in glob.glob(os.path.join(r, "nvidia", "*", "lib", sys.argv[1]))]
print(os.path.dirname(hits[0]) if hits else "")
PY
    )
  fi
  [[ -n "$found" && " ${cuda_dirs[*]} " != *" $found "* ]] && cuda_dirs+=("$found")
done
if ((${#cuda_dirs[@]})); then
  LD_LIBRARY_PATH=$(IFS=:; echo "${cuda_dirs[*]}"):$LD_LIBRARY_PATH
  export LD_LIBRARY_PATH
  note "libraries: CUDA's from ${cuda_dirs[*]}"
fi
if [[ -n "$(missing_libs)" ]]; then
  ldd "$EMBER" "$OPS_TEST" >"$WORK/logs/libraries.log" 2>&1 || true
  pack_logs
  die "the binaries cannot load: $(missing_libs | tr '\n' ' ')(ldd in logs.tar.gz, libraries.log)" \
    "put the CUDA toolkit's lib64 on LD_LIBRARY_PATH, or make the bundle on a machine with the same CUDA major"
fi

# --- is there a GPU? Steps that need one report "no GPU" without one ---
GPU=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  GPU=1
fi

status=0
RESULT=""
# run_step NAME FUNCTION: the function under the step's time limit, its output in logs/NAME.log, one summary line.
run_step() {
  local name=$1 fn=$2 log=$WORK/logs/$1.log start rc=0
  start=$(date +%s)
  RESULT=""
  export -f "$fn"
  timeout --kill-after=10 "${LIMIT[$name]}" bash -c "set -euo pipefail; $fn" >"$log" 2>&1 || rc=$?
  local took=$(($(date +%s) - start))
  [[ -f "$WORK/result" ]] && RESULT=$(cat "$WORK/result") && rm -f "$WORK/result"
  if [[ $rc -eq 0 ]]; then
    note "$name: ok (${took}s)${RESULT:+: $RESULT}"
  elif [[ $rc -eq 77 ]]; then
    note "$name: skipped: ${RESULT:-see its log}"
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
    status=1
    note "$name: FAILED: timed out after ${LIMIT[$name]}s (FIRST_RUN_LIMIT_${name//-/_} raises it)"
  else
    status=1
    note "$name: FAILED (exit $rc, ${took}s)${RESULT:+: $RESULT}; log: logs/$name.log"
    tail -n 25 "$log" | sed "s/^/  $name| /"
  fi
  pack_logs
}
# A step says what it found in one line by writing it to $WORK/result.
export WORK BUILD BUNDLE EMBER OPS_TEST ROOT OUT REPORT GPU PYTHON TRAIN_STEPS TRAIN_COMPARED TRAIN_TOLERANCE
export MEMCHECK_FILTER RACECHECK_FILTER WHOLE_MODEL_REGEX
need_gpu() { if [[ "$GPU" != 1 ]]; then echo "no GPU" >"$WORK/result"; echo "no GPU: step skipped"; exit 77; fi; }
export -f need_gpu

step_info() {
  need_gpu
  nvidia-smi -q >"$OUT/nvidia-smi.txt" 2>&1
  nvidia-smi
  local row cuda
  row=$(nvidia-smi --query-gpu=name,uuid,driver_version,memory.total --format=csv,noheader | head -n 1)
  cuda=$(nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
  # The processor too: the CPU backend's bf16 reference moves between processors (test_cuda_ops_whole_model.cpp).
  local cpu
  cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores"
  grep -qw avx512f /proc/cpuinfo && cpu+=", AVX-512"
  echo "$row; driver's CUDA $cuda; nvcc here: $(nvcc --version 2>/dev/null | tail -n 1 || echo none); CPU: $cpu" \
    >"$WORK/result"
  { echo "## GPU"; echo; echo "$row (driver's CUDA $cuda); CPU: $cpu"; echo; } >>"$REPORT"
}
# The ctest steps run in the rewritten build tree; their tests skip (exit 77 / "no CUDA device") without a GPU.
ctest_step() {  # ctest_step TIMEOUT JOBS SELECTION...
  local timeout=$1 jobs=$2 rc=0
  shift 2
  ctest --test-dir "$BUILD" -L '^gpu$' "$@" --output-on-failure -j"$jobs" --timeout "$timeout" |
    tee "$WORK/ctest.txt" || rc=$?
  { grep -E 'tests passed' "$WORK/ctest.txt" || echo "ctest exit $rc"; } | tail -n 1 | tr -d '\n' >"$WORK/result"
  echo ", $(grep -c '(Skipped)$' "$WORK/ctest.txt" || true) skipped" >>"$WORK/result"
  return "$rc"
}
export -f ctest_step
step_ctest_gpu() { ctest_step 170 4 -E "$WHOLE_MODEL_REGEX"; }
step_whole_model() { ctest_step 230 2 -R "$WHOLE_MODEL_REGEX"; }
sanitize() {  # sanitize TOOL FILTER
  command -v compute-sanitizer >/dev/null || PATH=$PATH:${CUDA_HOME:-/usr/local/cuda}/bin
  command -v compute-sanitizer >/dev/null ||
    { echo "compute-sanitizer not found" >"$WORK/result"; echo "no compute-sanitizer on PATH"; exit 1; }
  local rc=0
  compute-sanitizer --tool "$1" --error-exitcode 9 --print-limit 20 "$OPS_TEST" --gtest_filter="$2" \
    --gtest_brief=1 | tee "$WORK/sanitizer.txt" || rc=$?
  sed -n 's/^========= ERROR SUMMARY: /errors: /p; s/^\[  PASSED  \] /passed: /p; s/^\[  FAILED  \] \([0-9]\)/failed: \1/p' \
    "$WORK/sanitizer.txt" | tr '\n' ' ' >"$WORK/result"
  return "$rc"
}
export -f sanitize
step_memcheck() { need_gpu; sanitize memcheck "$MEMCHECK_FILTER"; }
step_racecheck() { need_gpu; sanitize racecheck "$RACECHECK_FILTER"; }
step_train() {
  need_gpu
  # Each run's output goes to the step logs' folder, so that a run cut short by the step's limit still returns it.
  local t=$WORK/train l=$WORK/logs
  rm -rf "$t"
  mkdir -p "$t"
  read -r -a args <<<"$(sed -n 's/^train_args=//p' "$BUNDLE/MANIFEST")"
  args+=(--data.dir="$BUNDLE/data")
  # GPU 1-24 with checkpoints at 20 and 22; a copy stopped at 20 goes on for 2 steps on the CPU (22), and that CPU
  # checkpoint goes on for 2 on the GPU (24).
  "$EMBER" train "${args[@]}" --training.device=cuda --run.dir="$t/gpu" --training.steps="$TRAIN_STEPS" \
    --stop-after "$TRAIN_COMPARED" >"$l/train-gpu1.log" 2>&1 || { cat "$l/train-gpu1.log"; exit 1; }
  cp -R "$t/gpu" "$t/swap"
  "$EMBER" train "${args[@]}" --training.device=cuda --run.dir="$t/gpu" --training.steps="$TRAIN_STEPS" \
    --resume auto >"$l/train-gpu2.log" 2>&1 || { cat "$l/train-gpu2.log"; exit 1; }
  OMP_NUM_THREADS=$(nproc) "$EMBER" train "${args[@]}" --training.device=cpu --run.dir="$t/swap" \
    --training.steps="$TRAIN_STEPS" --resume auto --stop-after 2 >"$l/train-cpu.log" 2>&1 ||
    { cat "$l/train-cpu.log"; exit 1; }
  "$EMBER" train "${args[@]}" --training.device=cuda --run.dir="$t/swap" --training.steps="$TRAIN_STEPS" \
    --resume auto >"$l/train-gpu3.log" 2>&1 || { cat "$l/train-gpu3.log"; exit 1; }
  cat "$l/train-gpu1.log"
  grep -h 'resumed from' "$l/train-cpu.log" "$l/train-gpu3.log"
  "$PYTHON" "$ROOT/scripts/device/first_run_report.py" train "$BUNDLE/reference/cpu_losses.txt" "$t/gpu/metrics.jsonl" \
    "$t/swap/metrics.jsonl" "$TRAIN_COMPARED" "$TRAIN_STEPS" "$TRAIN_TOLERANCE" "$REPORT" "$WORK/result"
}
step_bench() {
  need_gpu
  # PyTorch beside Ember where this machine's Python has a CUDA build of it; its wheels are too large to carry.
  local torch=1
  LD_LIBRARY_PATH=${BENCH_PYTHON_LD_LIBRARY_PATH-$LD_LIBRARY_PATH} "$PYTHON" -c \
    'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1 || torch=0
  [[ $torch == 1 ]] || echo "bench: no PyTorch with CUDA here: Ember alone (BENCH_TORCH=0)"
  EMBER_BUILD_DIR=$BUILD BENCH_PREBUILT=1 BENCH_PROFILE=0 BENCH_TORCH=$torch bash "$ROOT/scripts/bench/gpu.sh" |
    tee "$WORK/bench.txt"
  {
    echo "## Benchmark (scripts/bench/gpu.sh)"
    sed -n '/^date: /,$p' "$WORK/bench.txt"
    echo
    echo "Modelled by the cost ledger when the bundle was made (scripts/bench/cost.sh):"
    echo
    grep -E '^(=== |step|modelled|H100|RTX)' "$BUNDLE/ledger.txt" || tail -n 20 "$BUNDLE/ledger.txt"
    echo
  } >>"$REPORT"
  grep -E '^\| gpt2' "$WORK/bench.txt" | awk -F'|' '{printf "%s: %s tok/s, MFU %s; ", $2, $4, $5}' >"$WORK/result"
}
step_kernels() {
  need_gpu
  local k=$WORK/kernels args
  rm -rf "$k"
  mkdir -p "$k"
  read -r -a args <<<"$(sed -n 's/^train_args=//p' "$BUNDLE/MANIFEST")"
  # One step: ncu replays every kernel (about 380 a step) and took over a minute on two (H200, 2026-11-28).
  args+=(--data.dir="$BUNDLE/data" --training.device=cuda --training.steps=1 --run.dir="$k/run")
  local tool="" log=$WORK/logs/kernels-nsys.log
  if command -v nsys >/dev/null && nsys profile --force-overwrite true --trace cuda -o "$k/profile" \
       "$EMBER" train "${args[@]}" >"$log" 2>&1 &&
     nsys stats --report cuda_gpu_kern_sum --format csv --output - "$k/profile.nsys-rep" >"$k/kernels.csv" 2>>"$log" &&
     [[ -s "$k/kernels.csv" ]]; then
    tool=nsys
  else
    [[ -f "$log" ]] && cat "$log"
    rm -rf "$k/run"
    command -v ncu >/dev/null || PATH=$PATH:${CUDA_HOME:-/usr/local/cuda}/bin
    command -v ncu >/dev/null || { echo "neither nsys nor ncu works here" >"$WORK/result"; exit 1; }
    # One metric, the kernel's duration: one replay pass per kernel; clocks and caches left as they run.
    ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw \
      --log-file "$WORK/logs/kernels-ncu.log" "$EMBER" train "${args[@]}" >"$k/kernels.csv"
    tool=ncu
  fi
  "$PYTHON" "$ROOT/scripts/device/first_run_report.py" kernels "$tool" "$k/kernels.csv" 1 "$BUNDLE/ledger.txt" \
    "$REPORT" "$WORK/result"
}
export -f step_info step_ctest_gpu step_whole_model step_memcheck step_racecheck step_train step_bench step_kernels
export LD_LIBRARY_PATH

[[ "$GPU" == 1 ]] || note "gpu: none visible (no nvidia-smi, or it lists no GPU): the GPU steps report 'no GPU'"
for step in "${ALL_STEPS[@]}"; do
  [[ " ${STEPS[*]} " == *" $step "* ]] || continue
  run_step "$step" "step_${step//-/_}"
done

echo "--- summary ($SUMMARY)"
cat "$SUMMARY"
if [[ $status -ne 0 ]]; then
  echo "error: first-run: a step failed; its log is in $OUT/logs.tar.gz" >&2
  echo "hint: rerun only what failed: scripts/device/first-run.sh STEP..." >&2
fi
exit "$status"
