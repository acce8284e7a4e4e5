#!/usr/bin/env bash
# Training on the GPU (label gpu): the CUDA backend follows the CPU backend's loss trajectory; two ranks (NCCL where
# there are two GPUs, else MPI staged through host memory on one shared GPU) match one rank with gradient
# accumulation, with and without ZeRO-1; deterministic mode repeats bitwise; a stop and resume is bitwise, and
# checkpoints move between GPU and CPU both ways; matmul precision bf16 follows the CPU's emulation of it and is what
# training.precision = auto picks on a GPU. Exits 77 (skipped) where no GPU is visible.
# Called as: train_cuda.sh EMBER_BINARY SOURCE_DIR WORK_DIR
source "$2/tests/e2e/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=2

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
# fp32 unless a run says otherwise: training.precision = auto would train at bf16 on the GPU.
common=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.steps=12 --eval.every=6 --checkpoint.interval=0
        --run.log_every=4 --training.precision=fp32)

# Without a GPU, device = cuda stops at once with one of these two errors (tests/e2e/device_select.sh checks them).
rc=0
"$EMBER" train "${common[@]}" --run.dir=probe --training.steps=1 --training.device=cuda >probe.log 2>&1 || rc=$?
if grep -Eq "no CUDA device is visible|built without the CUDA backend" probe.log; then
  echo "SKIP: no CUDA device ($(grep -m1 '^error: ' probe.log))"
  exit 77
fi
[ "$rc" -eq 0 ] || { cat probe.log >&2; fail "a one-step GPU run failed"; }
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || gpus=1
echo "GPUs visible: $gpus"

train() {  # train NAME NP [args]: one run, its log in NAME.log
  local name=$1 np=$2
  shift 2
  mpirun -np "$np" --oversubscribe "$EMBER" train "${common[@]}" --run.dir="$name" "$@" >"$name.log" 2>&1 ||
    { cat "$name.log" >&2; fail "$name failed"; }
}

train cpu 1 --training.device=cpu
train gpu 1 --training.device=cuda
grep -q '^device: cuda' gpu.log || { cat gpu.log >&2; fail "gpu run did not log 'device: cuda'"; }
train gpu_accum2 1 --training.device=cuda --training.grad_accum_steps=2
# training.comm = auto takes NCCL on a GPU whenever the build has it.
if grep -q '^communicator: nccl' gpu.log; then nccl=1; else nccl=0; fi
echo "NCCL in this build: $nccl"
if [ "$gpus" -ge 2 ] && [ "$nccl" -eq 1 ]; then
  comm=nccl
  train dp2 2 --training.device=cuda --training.comm=nccl
  train dp2_zero 2 --training.device=cuda --training.comm=nccl --training.zero=1
elif [ "$gpus" -ge 2 ]; then
  comm=mpi
  train dp2 2 --training.device=cuda
  train dp2_zero 2 --training.device=cuda --training.zero=1
else
  comm=mpi
  EMBER_SHARE_GPU=1 train dp2 2 --training.device=cuda
  EMBER_SHARE_GPU=1 train dp2_zero 2 --training.device=cuda --training.zero=1
  # NCCL refuses two ranks on one GPU: ember says so before NCCL is asked.
  rc=0
  EMBER_SHARE_GPU=1 timeout 120 mpirun -np 2 --oversubscribe "$EMBER" train "${common[@]}" --run.dir=nccl_shared \
    --training.device=cuda --training.comm=nccl >nccl_shared.log 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat nccl_shared.log >&2; fail "nccl on a shared GPU: exit $rc"; }
  grep -Eq "NCCL needs one GPU per rank|built without NCCL" nccl_shared.log ||
    { cat nccl_shared.log >&2; fail "no 'NCCL needs one GPU per rank' error"; }
  rc=0
  timeout 120 mpirun -np 2 --oversubscribe "$EMBER" train "${common[@]}" --run.dir=too_many \
    --training.device=cuda >too_many.log 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] ||
    { cat too_many.log >&2; fail "2 ranks on 1 GPU without EMBER_SHARE_GPU: exit $rc"; }
  grep -q "would share one GPU" too_many.log || { cat too_many.log >&2; fail "no 'would share one GPU'"; }
  grep -q "EMBER_SHARE_GPU=1" too_many.log || { cat too_many.log >&2; fail "the hint does not name EMBER_SHARE_GPU"; }
fi
grep -q "^communicator: $comm" dp2.log || { cat dp2.log >&2; fail "dp2 did not use the $comm communicator"; }

# Tolerances. GPU vs CPU: fp32 in a different summation order (op tests: within 8 sqrt(K) eps), carried through 12
# AdamW steps; 2e-3 relative is far below what a wrong op gives (1e-1 or more) but still has to be confirmed on a
# GPU. Data parallel vs accumulation on the same backend: as tests/e2e/sync_equivalence.sh, 1e-5 relative.
"$PYTHON" - <<'PY'
import json
def losses(d):
    recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
    return [r["loss"] for r in recs] + [r["val_loss"] for r in recs if "val_loss" in r]
bad = 0
for ref, other, tol in [("cpu", "gpu", 2e-3), ("gpu_accum2", "dp2", 1e-5), ("gpu_accum2", "dp2_zero", 1e-5)]:
    a, b = losses(ref), losses(other)
    assert len(a) == len(b) == 14, (ref, other, len(a), len(b))
    worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    print(f"{ref:10s} vs {other:9s}: max relative difference {worst:.2e} (tolerance {tol:.0e})")
    bad += not worst <= tol
assert bad == 0, "GPU training does not match its reference"
PY

# Deterministic mode (training.deterministic = true, the default): a second identical GPU run repeats every loss
# bitwise. With it off cuBLAS may accumulate with atomics: the run must still track the CPU within the tolerance above.
train gpu_again 1 --training.device=cuda
losses gpu/metrics.jsonl >gpu.txt
losses gpu_again/metrics.jsonl >gpu_again.txt
diff gpu.txt gpu_again.txt || fail "two deterministic GPU runs gave different losses"
train gpu_nondet 1 --training.device=cuda --training.deterministic=false
grep -q "training.deterministic = false" gpu_nondet.log || { cat gpu_nondet.log >&2; fail "no non-deterministic notice"; }

# Golden resume on the GPU: 6 steps, a stop with a checkpoint, --resume auto, 6 more, bitwise equal to the straight
# run (the CUDA kernels are deterministic). A copy of the stopped run resumes on the CPU instead, and a CPU run
# stopped at 6 resumes on the GPU: checkpoints hold host fp32 values whatever device wrote them.
"$EMBER" train "${common[@]}" --run.dir=split --training.device=cuda --stop-after 6 >split1.log 2>&1 ||
  { cat split1.log >&2; fail "split run, first half"; }
cp -R split gpu_to_cpu
"$EMBER" train "${common[@]}" --run.dir=split --training.device=cuda --resume auto >split2.log 2>&1 ||
  { cat split2.log >&2; fail "split run, second half"; }
losses gpu/metrics.jsonl >straight.txt
losses split/metrics.jsonl >split.txt
diff straight.txt split.txt || fail "GPU losses after a resume differ from the straight run"

"$EMBER" train "${common[@]}" --run.dir=gpu_to_cpu --training.device=cpu --resume auto >gpu_to_cpu.log 2>&1 ||
  { cat gpu_to_cpu.log >&2; fail "a GPU checkpoint did not resume on the CPU"; }
"$EMBER" train "${common[@]}" --run.dir=cpu_to_gpu --training.device=cpu --stop-after 6 >cpu_to_gpu1.log 2>&1 ||
  { cat cpu_to_gpu1.log >&2; fail "CPU run, first half"; }
"$EMBER" train "${common[@]}" --run.dir=cpu_to_gpu --training.device=cuda --resume auto >cpu_to_gpu2.log 2>&1 ||
  { cat cpu_to_gpu2.log >&2; fail "a CPU checkpoint did not resume on the GPU"; }
for log in gpu_to_cpu.log cpu_to_gpu2.log; do
  grep -q "resumed from .* at step 6 " "$log" || { cat "$log" >&2; fail "$log: no resume at step 6"; }
done
grep -q '^device: cpu' gpu_to_cpu.log || { cat gpu_to_cpu.log >&2; fail "gpu_to_cpu did not run on the CPU"; }
grep -q '^device: cuda' cpu_to_gpu2.log || { cat cpu_to_gpu2.log >&2; fail "cpu_to_gpu did not run on the GPU"; }
# After the switch, steps 7-12 follow the straight run of the device that wrote steps 1-6 within the GPU-vs-CPU
# tolerance (2e-3): both halves are the same computation up to fp32 summation order.
"$PYTHON" - <<'PY'
import json
def after6(d):
    return {r["step"]: r["loss"] for r in map(json.loads, open(f"{d}/metrics.jsonl")) if r["step"] > 6}
bad = 0
for ref, other in [("gpu", "gpu_to_cpu"), ("cpu", "cpu_to_gpu"), ("cpu", "gpu_nondet")]:
    a, b = after6(ref), after6(other)
    assert sorted(a) == sorted(b) == list(range(7, 13)), (ref, other, sorted(a), sorted(b))
    worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a)
    print(f"{ref:4s} vs {other:10s} (steps 7-12): max relative difference {worst:.2e} (tolerance 2e-03)")
    bad += not worst <= 2e-3
assert bad == 0, "training after a change of device (or without determinism) left its reference"
PY

# follows REF RUN TOL WHAT: the 12 training and 2 validation losses of RUN within TOL (relative) of REF's, else fail.
follows() {
  "$PYTHON" - "$1" "$2" "$3" <<'PY' || fail "$4"
import json, sys
ref, run, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
def losses(d):
    recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
    return [r["loss"] for r in recs] + [r["val_loss"] for r in recs if "val_loss" in r]
a, b = losses(ref), losses(run)
assert len(a) == len(b) == 14, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"{ref:10s} vs {run:10s}: max relative difference {worst:.2e} (tolerance {tol:.0e})")
sys.exit(0 if worst <= tol else 1)
PY
}

# Matmul precision bf16. The tiny config's head size is 16, so attention takes the tensor-core kernels. The GPU run
# follows the CPU's emulation of the same roundings, and a second GPU run repeats it bitwise. The two backends round
# the same kinds of inputs, but a difference in fp32 summation order can move a value across a bf16 rounding boundary
# (2^-8 relative), so they agree only to bf16 resolution: 1e-2 relative over 12 steps (a wrong kernel gives 1e-1 or
# more; the fp32 comparison above allows 2e-3).
train cpu_bf16 1 --training.device=cpu --training.precision=bf16
train gpu_bf16 1 --training.device=cuda --training.precision=bf16
train gpu_bf16_again 1 --training.device=cuda --training.precision=bf16
grep -q "matmul precision bf16" gpu_bf16.log || { cat gpu_bf16.log >&2; fail "gpu_bf16 did not log matmul precision bf16"; }
# training.precision = auto (the default) is bf16 on the GPU: the same losses as the bf16 run, bitwise.
train gpu_auto 1 --training.device=cuda --training.precision=auto
grep -q "^matmul precision: bf16 (training.precision = auto" gpu_auto.log ||
  { cat gpu_auto.log >&2; fail "gpu_auto did not log the auto choice of bf16"; }
losses gpu_bf16/metrics.jsonl >gpu_bf16.txt
losses gpu_auto/metrics.jsonl >gpu_auto.txt
diff gpu_bf16.txt gpu_auto.txt || fail "training.precision = auto on the GPU did not train as bf16"
losses gpu_bf16_again/metrics.jsonl >gpu_bf16_again.txt
diff gpu_bf16.txt gpu_bf16_again.txt || fail "two deterministic bf16 GPU runs gave different losses"
follows cpu_bf16 gpu_bf16 1e-2 "bf16 GPU training does not follow the CPU's bf16 emulation"

# Matmul precision int8 (the weight gradients in int8 too, the default): the dense layers' products are the CPU's bit
# for bit on the same inputs, the rest is bf16, so the runs part where a last-bit difference of the bf16 attention or
# the GELU moves a value across an int8 rounding boundary (1/127 of its row's largest value): 2e-2 relative over 12
# steps (a wrong scale or layout gives 1e-1 or more).
train cpu_int8 1 --training.device=cpu --training.precision=int8
train gpu_int8 1 --training.device=cuda --training.precision=int8
grep -q "matmul precision int8: .* on Ember's mma.sync int8 kernels" gpu_int8.log ||
  { cat gpu_int8.log >&2; fail "gpu_int8 did not log its int8 products on the mma.sync kernels (sm_80 or newer)"; }
follows cpu_int8 gpu_int8 2e-2 "int8 GPU training does not follow the CPU's int8 products"
echo PASS
