#!/usr/bin/env bash
# GPU training throughput: Ember against PyTorch (bf16 autocast, torch.compile, its fused attention) on one GPU, same
# model, batch and sequence length, in one run: tokens/s, MFU against the device's measured bf16 GEMM peak
# (tests/bench/gpu_gemm_peak.cpp), peak memory, and the ratio. Defaults: GPT-2 124M and 350M at T = 1024.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment): the model configs measured (their model shapes and batch_size), the sequence length, a batch
# size for every config, steps and warm-up steps left out of the mean (torch.compile compiles during warm-up), the
# matmul precision, the Python with a CUDA build of PyTorch (BENCH_TORCH=0 leaves PyTorch out), EMBER_BUILD_DIR
# (BENCH_PREBUILT=1: use its binaries without building).
# BENCH_DEVICE=cpu runs the whole script on the CPU, fp32, without MFU: a check of the script itself, not a benchmark.
# BENCH_PROFILE=1 (the default where Nsight Systems' nsys is on PATH) adds, after each config's timed run, a short
# run of Ember under nsys and prints its kernels by total GPU time; that run's timings are not used.
CONFIGS=${BENCH_CONFIGS:-configs/gpt2-124m.ini configs/gpt2-350m.ini}
SEQ_LEN=${BENCH_SEQ_LEN:-1024}
BATCH=${BENCH_BATCH:-}
STEPS=${BENCH_STEPS:-30}
WARMUP=${BENCH_WARMUP:-10}
PRECISION=${BENCH_PRECISION:-bf16}
DEVICE=${BENCH_DEVICE:-cuda}
PYTHON=${BENCH_PYTHON:-python3}
WITH_TORCH=${BENCH_TORCH:-1}
PROFILE=${BENCH_PROFILE:-$(command -v nsys >/dev/null && echo 1 || echo 0)}

# Python, with the machine's own library path where the caller saved one in BENCH_PYTHON_LD_LIBRARY_PATH:
# scripts/device/gpu-run.sh puts its private prefix of Debian libraries first on LD_LIBRARY_PATH for Ember, and the
# machine's own Python and PyTorch must not load those in place of their own.
py() {
  if [[ -n "${BENCH_PYTHON_LD_LIBRARY_PATH+set}" ]]; then
    LD_LIBRARY_PATH=$BENCH_PYTHON_LD_LIBRARY_PATH "$PYTHON" "$@"
  else
    "$PYTHON" "$@"
  fi
}

[[ "$STEPS" =~ ^[0-9]+$ && "$WARMUP" =~ ^[0-9]+$ && "$SEQ_LEN" =~ ^[0-9]+$ ]] ||
  die "BENCH_STEPS, BENCH_WARMUP and BENCH_SEQ_LEN must be non-negative integers" "e.g. BENCH_STEPS=30 BENCH_WARMUP=10"
[[ -z "$BATCH" || "$BATCH" =~ ^[1-9][0-9]*$ ]] || die "BENCH_BATCH='$BATCH' is not a positive integer" \
  "leave it unset to take each config's batch_size"
(( STEPS > WARMUP )) || die "BENCH_STEPS=$STEPS leaves no step after BENCH_WARMUP=$WARMUP" "raise BENCH_STEPS"
[[ "$PRECISION" == fp32 || "$PRECISION" == bf16 ]] || die "BENCH_PRECISION='$PRECISION' must be fp32 or bf16" \
  "bf16 is what the targets are stated for"
[[ "$DEVICE" == cuda || "$DEVICE" == cpu ]] || die "BENCH_DEVICE='$DEVICE' must be cuda or cpu" \
  "cpu only checks this script on a machine without a GPU"
for config in $CONFIGS; do
  [[ -f "$config" ]] || die "config '$config' not found" "set BENCH_CONFIGS to INI files under configs/"
done
if [[ "$DEVICE" == cpu ]]; then
  PRECISION=fp32  # PyTorch's CPU side of this comparison runs fp32; Ember's bf16 on the CPU is an emulation
  echo "bench: BENCH_DEVICE=cpu: checking the script on the CPU (fp32, no MFU); these are not GPU numbers" >&2
fi
if [[ "$WITH_TORCH" == 1 ]] && ! py -c "import torch" >/dev/null 2>&1; then
  die "PyTorch is not importable by '$PYTHON'" \
      "set BENCH_PYTHON to a Python with a CUDA build of PyTorch (pip install torch), or BENCH_TORCH=0 to measure Ember alone"
fi
if [[ "$DEVICE" == cuda && "$WITH_TORCH" == 1 ]] && ! py -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  die "PyTorch ($(py -c 'import torch; print(torch.__version__)')) sees no CUDA device" \
      "run this on a GPU machine with a CUDA build of PyTorch, or BENCH_DEVICE=cpu to check the script"
fi

# --- Ember (Release; an existing build folder is reused, as on the GPU machine after scripts/device/gpu-run.sh;
# BENCH_PREBUILT=1 takes the binaries as they are, as scripts/device/first-run.sh does with a bundle built elsewhere) ---
targets=(ember)
[[ "$DEVICE" == cuda ]] && targets+=(tests/bench/gpu_gemm_peak)
if [[ "${BENCH_PREBUILT:-0}" == 1 ]]; then
  for target in "${targets[@]}"; do
    [[ -x "$BUILD_DIR/$target" ]] || die "BENCH_PREBUILT=1 but $BUILD_DIR/$target is missing" \
      "build it (cmake --build $BUILD_DIR --target $(basename "$target")) or leave BENCH_PREBUILT unset"
  done
else
  names=()
  for target in "${targets[@]}"; do names+=("$(basename "$target")"); done
  BUILD_HINT="gpu_gemm_peak exists only in a CUDA build (nvcc found at configure time)" build_targets "${names[@]}"
fi
[[ "$BUILD_DIR" == /* ]] || BUILD_DIR=$ROOT/$BUILD_DIR
EMBER=$BUILD_DIR/ember

work_folder gpu-bench

# --- the device's bf16 GEMM peak, the MFU denominator ---
PEAK_TFLOPS=""
GPU_NAME="none (BENCH_DEVICE=cpu)"
if [[ "$DEVICE" == cuda ]]; then
  "$BUILD_DIR/tests/bench/gpu_gemm_peak" >"$WORK/gemm.log" 2>&1 || { cat "$WORK/gemm.log" >&2;
    die "gpu_gemm_peak failed (output above)" "check nvidia-smi; without a GPU use BENCH_DEVICE=cpu to check the script"; }
  PEAK_TFLOPS=$(sed -n 's/^bf16_gemm_tflops //p' "$WORK/gemm.log")
  GPU_NAME=$(sed -n 's/^device //p' "$WORK/gemm.log")
  echo "bench: measured bf16 GEMM peak $PEAK_TFLOPS TFLOP/s on $GPU_NAME"
  sed 's/^/  /' "$WORK/gemm.log"
fi

# Real text through the real data path (bytes: token ids < 256 are valid rows of a 50257-token embedding); the loader
# wraps around, so the corpus size does not matter.
mkdir -p "$WORK/corpus"
for item in README.md docs src configs scripts; do [[ -e "$item" ]] && cp -R "$item" "$WORK/corpus/"; done
"$EMBER" prep --input "$WORK/corpus" --output "$WORK/data" --tokenizer bytes --val-fraction 0.05 >"$WORK/prep.log" 2>&1 ||
  { cat "$WORK/prep.log" >&2; die "ember prep failed (log above)" "check that $EMBER is up to date"; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Where the GPU time of a training step goes: EMBER_CMD again for 6 steps under nsys, then the kernel summary (total
# time per kernel, largest first). Diagnostics only: a failure here is reported and the benchmark goes on.
profile() {
  local name=$1 run=$2
  local cmd=("${EMBER_CMD[@]}" --training.steps=6 --run.dir="$run/profile")
  echo "bench: $name: ember under nsys, 6 steps (not timed)"
  if ! nsys profile --force-overwrite true --trace cuda -o "$run/ember-profile" "${cmd[@]}" >"$run.nsys.log" 2>&1; then
    echo "warning: nsys profile failed on $name; see $run.nsys.log" >&2
    return 0
  fi
  local report
  for report in cuda_gpu_kern_sum gpukernsum; do  # the report's name in newer and older Nsight Systems
    if nsys stats --report "$report" --format csv --output - "$run/ember-profile.nsys-rep" >"$run.kernels.csv" \
        2>>"$run.nsys.log" && [[ -s "$run.kernels.csv" ]]; then
      echo "kernels ($name, 6 steps; columns as nsys names them, the largest 25):"
      { grep -m 26 ',' "$run.kernels.csv" || true; } | cut -c1-240
      return 0
    fi
  done
  echo "warning: nsys stats gave no kernel summary for $name; see $run.nsys.log" >&2
}

ROWS=()
COMMANDS=()
TORCH_INFO=()
for config in $CONFIGS; do
  name=$(basename "$config" .ini)
  # Shapes from the config (missing keys take Ember's defaults), batch from BENCH_BATCH or the config.
  read -r L NH C BLOCK V B < <(py - "$config" "$BATCH" <<'PY'
import configparser, sys
ini = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
ini.read(sys.argv[1])
get = lambda s, k, d: int(ini.get(s, k, fallback=str(d)))
batch = int(sys.argv[2]) if sys.argv[2] else get("training", "batch_size", 8)
print(get("model", "n_layer", 2), get("model", "n_head", 2), get("model", "n_embd", 32),
      get("model", "block_size", 64), get("model", "vocab_size", 256), batch)
PY
  )
  (( SEQ_LEN <= BLOCK )) || die "BENCH_SEQ_LEN=$SEQ_LEN exceeds $config's block_size $BLOCK" "lower BENCH_SEQ_LEN"
  run=$WORK/$name
  EMBER_CMD=("$EMBER" train --config "$config" --training.device="$DEVICE" --training.precision="$PRECISION"
    --training.steps="$STEPS" --training.batch_size="$B" --training.seq_len="$SEQ_LEN" --training.grad_accum_steps=1
    --eval.every=0 --eval.batches=1 --checkpoint.interval=0 --run.dir="$run/ember" --data.dir="$WORK/data")
  echo "bench: $name: ember, $STEPS steps of B $B x T $SEQ_LEN"
  if ! "${EMBER_CMD[@]}" >"$run.ember.log" 2>&1; then
    tail -n 40 "$run.ember.log" >&2
    die "ember train failed on $name (last lines above)" "rerun by hand: ${EMBER_CMD[*]}"
  fi
  ember_tps=$(py scripts/bench/mean_tokens_per_s.py "$run/ember/metrics.jsonl" "$WARMUP")
  # Now, not only in the table: a run cut short during PyTorch's compile still leaves Ember's number.
  echo "bench: $name: ember $ember_tps tokens/s"
  if [[ "$PROFILE" == 1 ]]; then
    profile "$name" "$run"
  fi
  # "memory measured after the first step on ...: peak X MiB allocated (...)[; the device reports U of T MiB ...]"
  ember_peak=$(sed -n 's/.*memory measured after the first step.*: peak \([0-9.]*\) MiB allocated.*/\1/p' "$run.ember.log")
  ember_device=$(sed -n 's/.*the device reports \([0-9.]*\) of.*/\1/p' "$run.ember.log")

  torch_tps="" torch_peak=""
  if [[ "$WITH_TORCH" == 1 ]]; then
    TORCH_CMD=(scripts/bench/torch_gpt2.py --device "$DEVICE" --dtype "$PRECISION" --n-layer "$L"
      --n-head "$NH" --n-embd "$C" --block-size "$BLOCK" --vocab-size "$V" --batch-size "$B" --seq-len "$SEQ_LEN"
      --steps "$STEPS" --warmup "$WARMUP")
    [[ "$DEVICE" == cuda ]] && TORCH_CMD+=(--compile)
    echo "bench: $name: torch, $STEPS steps"
    if ! py "${TORCH_CMD[@]}" >"$run.torch.log" 2>&1; then
      tail -n 40 "$run.torch.log" >&2
      die "torch_gpt2.py failed on $name (last lines above)" "rerun by hand: $PYTHON ${TORCH_CMD[*]}"
    fi
    torch_tps=$(sed -n 's/^tokens_per_s //p' "$run.torch.log" | tail -n 1)
    torch_peak=$(sed -n 's/^peak_memory_mib //p' "$run.torch.log" | tail -n 1)
    TORCH_INFO+=("torch ($name): $(head -n 1 "$run.torch.log")")
    COMMANDS+=("torch ($name): ${TORCH_CMD[*]}")
  fi
  COMMANDS+=("ember ($name): ${EMBER_CMD[*]//$WORK/\$WORK}")

  # Training FLOPs per token: 6 N for the parameter GEMMs (forward 2, backward 4) plus causal attention's QK^T and
  # AV, 6 L C T (half of the full T x T products); the same formula for both, so the ratio does not depend on it.
  ROWS+=("$(py - "$L" "$C" "$BLOCK" "$V" "$SEQ_LEN" "$B" "$ember_tps" "${torch_tps:-0}" "${PEAK_TFLOPS:-0}" \
    "${ember_peak:-?}" "${ember_device:-}" "${torch_peak:-}" "$name" <<'PY'
import sys
L, C, block, V, T, B = map(int, sys.argv[1:7])
ember, torch, peak = map(float, sys.argv[7:10])
ember_peak, ember_device, torch_peak, name = sys.argv[10:14]
n_params = V * C + block * C + L * (12 * C * C + 13 * C) + 2 * C
flops_per_token = 6 * n_params + 6 * L * C * T
mfu = lambda tps: f"{100 * tps * flops_per_token / (peak * 1e12):.1f}%" if peak > 0 and tps > 0 else "n/a"
ratio = f"{ember / torch:.2f}" if torch > 0 else "n/a"
mem = ember_peak + (f" ({ember_device} on the device)" if ember_device else "")
print(f"| {name} ({n_params / 1e6:.1f}M) | {B} x {T} | {ember:.0f} | {mfu(ember)} | {mem} | "
      f"{f'{torch:.0f}' if torch > 0 else 'n/a'} | {mfu(torch)} | {torch_peak or 'n/a'} | {ratio} |")
PY
  )")
done

DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)
cat <<TABLE

date: $(date -u +%Y-%m-%dT%H:%M:%SZ)
gpu: $GPU_NAME${DRIVER:+, driver $DRIVER}; bf16 GEMM peak measured ${PEAK_TFLOPS:-n/a} TFLOP/s (gpu_gemm_peak)
precision: Ember training.precision = $PRECISION; PyTorch $( [[ "$DEVICE" == cuda && "$PRECISION" == bf16 ]] && echo "bf16 autocast" || echo "$PRECISION")
steps: $STEPS per run, the first $WARMUP left out of the means
$( ((${#TORCH_INFO[@]})) && printf '%s\n' "${TORCH_INFO[@]}" || echo "torch: not run (BENCH_TORCH=0)")

| model | B x T | ember tokens/s | ember MFU | ember peak MiB | torch tokens/s | torch MFU | torch peak MiB | ember/torch |
|-------|-------|----------------|-----------|----------------|----------------|-----------|----------------|-------------|
$(printf '%s\n' "${ROWS[@]}")

command: BENCH_CONFIGS="$CONFIGS" BENCH_SEQ_LEN=$SEQ_LEN BENCH_STEPS=$STEPS BENCH_WARMUP=$WARMUP BENCH_PRECISION=$PRECISION${BATCH:+ BENCH_BATCH=$BATCH} scripts/bench/gpu.sh
$(printf '%s\n' "${COMMANDS[@]//$ROOT\//}")
TABLE
