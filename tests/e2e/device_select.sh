#!/usr/bin/env bash
# Device selection without a GPU: training.device = cuda stops at once with one error line, a hint and a non-zero
# exit, writing nothing (a CPU-only build: "built without the CUDA backend"; a CUDA build on a GPU-less machine:
# "no CUDA device is visible"); device = auto trains on the CPU and logs why (a warning in a CUDA build), at 1 and 2
# ranks; bad values of training.device and training.comm, and comm = nccl on the CPU, are refused. On a machine with
# a GPU, the cases that need its absence are skipped (tests/gpu/train_cuda.sh covers that side).
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --training.steps=3 --eval.every=0
       --checkpoint.interval=0 --run.log_every=1)

# auto: the log says which device and why; without a GPU it trains on the CPU.
"${train[@]}" --run.dir=auto --training.device=auto >auto.log 2>&1 || { cat auto.log >&2; fail "device = auto failed"; }
# A CUDA build that falls back to the CPU says so as a warning ("warning: device: cpu (...)").
choice=$(grep -m1 -E '^(warning: )?device: ' auto.log) || { cat auto.log >&2; fail "device = auto logged no 'device:' line"; }
echo "ok: auto -> $choice"
case $choice in
  "device: cpu (training.device = auto: this ember was built without the CUDA backend)") build=cpu ;;
  "warning: device: cpu (training.device = auto: no CUDA device is visible on "*) build=cuda ;;
  "device: cuda "*) build=gpu ;;
  *) fail "unexpected device line: $choice" ;;
esac
# The binary's own link line says whether the CUDA backend is in it: the log must agree.
# (grep reads all of ldd's output: with pipefail, grep -q could quit at the match and fail the pipe by SIGPIPE.)
if ldd "$EMBER" 2>/dev/null | grep libcudart >/dev/null; then linked=cuda; else linked=cpu; fi
[ "$build" = gpu ] || [ "$build" = "$linked" ] || fail "auto reports a $build build, but the binary links ${linked}"
[ "$(grep -c '"step"' auto/metrics.jsonl)" -eq 3 ] || fail "device = auto did not train 3 steps"
grep -q '^communicator: mpi' auto.log || [ "$build" = gpu ] || { cat auto.log >&2; fail "no 'communicator: mpi' line"; }

# cuda where it cannot run: one error, a hint, a non-zero exit and no run directory.
if [ "$build" = cpu ]; then
  expect_error cuda_cpu_build "training.device = cuda: this ember was built without the CUDA backend" \
    "${train[@]}" --run.dir=cuda_run --training.device=cuda
  grep -q '^hint: .*CUDA toolkit.*training.device = cpu' "$WORK/cuda_cpu_build.err" ||
    fail "hint: $(cat cuda_cpu_build.err)"
elif [ "$build" = cuda ]; then
  expect_error cuda_no_gpu "training.device = cuda: no CUDA device is visible to rank 0 on " \
    "${train[@]}" --run.dir=cuda_run --training.device=cuda
  grep -q '^hint: .*nvidia-smi.*CUDA_VISIBLE_DEVICES.*training.device = cpu' "$WORK/cuda_no_gpu.err" ||
    fail "hint: $(cat cuda_no_gpu.err)"
fi
if [ "$build" != cpu ]; then
  # CUDA_VISIBLE_DEVICES hiding every GPU reads the same (and makes the case reachable on a GPU machine).
  CUDA_VISIBLE_DEVICES= expect_error cuda_hidden "training.device = cuda: no CUDA device is visible" \
    "${train[@]}" --run.dir=cuda_run --training.device=cuda
fi
[ ! -e cuda_run ] || fail "a refused device = cuda run wrote $(find cuda_run | head -3)"

# Two ranks agree on one choice (a job never mixes backends); cuda without a GPU stops both, quickly.
timeout 120 mpirun -np 2 --oversubscribe "${train[@]}" --run.dir=auto2 --training.device=auto >auto2.log 2>&1 ||
  { cat auto2.log >&2; fail "device = auto at 2 ranks failed"; }
grep -Eq '^(warning: )?device: ' auto2.log || fail "no device line at 2 ranks"
[ "$(grep -c '"step"' auto2/metrics.jsonl)" -eq 3 ] || fail "device = auto at 2 ranks did not train 3 steps"
if [ "$build" != gpu ]; then
  rc=0
  timeout 120 mpirun -np 2 --oversubscribe "${train[@]}" --run.dir=cuda2 --training.device=cuda >cuda2.out \
    2>cuda2.err || rc=$?
  [ "$rc" -ne 124 ] || fail "device = cuda at 2 ranks hung"
  [ "$rc" -ne 0 ] || fail "device = cuda at 2 ranks exited 0 without a GPU"
  grep -Eq '^\[rank [01]\] error: training.device = cuda: ' cuda2.err ||
    { cat cuda2.err >&2; fail "no error line at 2 ranks"; }
  grep -Eq '^(\[rank [01]\] )?hint: ' cuda2.err || { cat cuda2.err >&2; fail "no hint at 2 ranks"; }
  [ ! -e cuda2 ] || fail "a refused 2-rank device = cuda run wrote its run directory"
  echo "ok: 2 ranks, device = cuda -> exit $rc: $(grep -m1 'error: ' cuda2.err)"
fi

# Values outside the schema, and NCCL without a GPU.
expect_error bad_device "training.device.*must be one of: cpu, cuda, auto" "${train[@]}" --run.dir=bad \
  --training.device=gpu
expect_error bad_comm "training.comm.*must be one of: auto, nccl, mpi" "${train[@]}" --run.dir=bad --training.comm=gloo
expect_error nccl_on_cpu "training.comm = nccl: NCCL needs the CUDA backend" "${train[@]}" --run.dir=bad \
  --training.device=cpu --training.comm=nccl
[ ! -e bad ] || fail "a refused configuration wrote its run directory"

# The resolved config (printed at start, stored in checkpoints) carries both keys.
grep -q '^device = auto$' auto.log || fail "resolved config lacks 'device = auto'"
grep -q '^comm = auto$' auto.log || fail "resolved config lacks 'comm = auto'"
echo PASS
