#!/usr/bin/env bash
# training.offload = optimizer on the CPU backend: the master weights and AdamW's moments in host memory, updated
# there chunk by chunk (train/adamw.h). On the CPU the host's update is the backend's own, so in fp32 every loss is
# bitwise that of the same run without offload: at 1 rank, with gradient accumulation and full recompute, and at 2
# ranks with and without ZeRO-1 (each rank offloading its shard); the final checkpoints' weights and moments are
# equal too (h5py). A checkpoint is the same with or without offload: a run resumed across the switch, either way,
# equals the straight run bitwise. Async mode refuses the option with a hint.
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
run() {  # run NAME NP [extra args]
  local name=$1 np=$2
  shift 2
  mpirun -np "$np" --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir="$name" \
    --training.steps=8 --training.precision=fp32 --eval.every=4 --checkpoint.interval=0 --run.log_every=4 "$@" \
    > "$name.log" 2>&1 || { cat "$name.log" >&2; fail "$name failed"; }
}
same() {  # same A B: equal losses (every one, as printed) and equal final weights and moments
  losses "$1/metrics.jsonl" > "$1.losses"
  losses "$2/metrics.jsonl" > "$2.losses"
  [ "$(wc -l < "$1.losses")" -eq 8 ] || fail "$1: $(wc -l < "$1.losses") records, not 8"
  diff "$1.losses" "$2.losses" || fail "$2's losses differ from $1's"
  "$PYTHON" - "$1/checkpoints/step_00000008.h5" "$2/checkpoints/step_00000008.h5" <<'PY' || fail "$2's final checkpoint differs from $1's"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []  # the tensors (the run's config text differs: its run.dir and training.offload)
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.dtype.kind == "f" else None)
moments = [n for n in names if "exp_avg" in n]
assert moments, "no moments in the checkpoint"
for n in names:
    if not np.array_equal(a[n][()], b[n][()]):
        sys.exit(f"{n} differs")
print(f"{len(names)} datasets equal ({len(moments)} of moments)")
PY
}

run plain 1
run offload 1 --training.offload=optimizer
grep -q "AdamW on the host (training.offload = optimizer" offload.log || { cat offload.log; fail "no offload in the log"; }
same plain offload
run plain_accum 1 --training.grad_accum_steps=2 --training.recompute=full
run offload_accum 1 --training.grad_accum_steps=2 --training.recompute=full --training.offload=optimizer
same plain_accum offload_accum
run plain_dp2 2
run offload_dp2 2 --training.offload=optimizer
same plain_dp2 offload_dp2
run plain_zero2 2 --training.zero=1
run offload_zero2 2 --training.zero=1 --training.offload=optimizer
same plain_zero2 offload_zero2

# Across the switch: 4 steps one way, a stop with a checkpoint, 4 more the other way, equal to the straight run.
for first in none optimizer; do
  second=$([ $first = none ] && echo optimizer || echo none)
  run switch_$first 1 --training.offload=$first --stop-after 4
  run switch_$first 1 --training.offload=$second --resume auto
  same plain switch_$first
done

# Async keeps its workers' optimizer on the device in this version: one error line and a hint, before any work.
if mpirun -np 2 --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=async \
  --training.mode=async --training.offload=optimizer > async.log 2>&1; then
  fail "async with training.offload = optimizer was not refused"
fi
grep -Eq "^(\[rank [0-9]+\] )?error: config: training.offload = optimizer applies to sync mode only" async.log || { cat async.log; fail "async: no error line"; }
grep -q "^hint: set training.offload = none with training.mode = async" async.log || { cat async.log; fail "async: no hint"; }
echo PASS
