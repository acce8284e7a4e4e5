#!/usr/bin/env bash
# Failed collective checkpoint writes: a write that fails on one rank of a 2- or 4-rank save (a full disk, a vanished
# folder) ends every rank with a non-zero exit within seconds, never a hang, with one error naming the checkpoint file
# and the cause, a hint, no step_*.h5.tmp left behind, and the earlier checkpoint and `latest` byte for byte intact.
# The failures on one rank are injected (EMBER_TEST_FAIL_WRITE, see src/checkpoint/layout.h): that rank leaves the
# HDF5 call early, as it would on a real error, so the other ranks are left inside the collective call.
here=$(cd "$(dirname "$0")" && pwd)
source "$here/support/common.bash"
source "$here/support/bad_input.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 > /dev/null

# train NP DIR [ARGS...]: a run in DIR that saves at steps 10 and 20; the cases resume from step 10 and fail at 20.
train() {
  local np=$1 dir=$2
  shift 2
  mpirun -np "$np" --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir="$WORK/data" \
    --run.dir="$dir" --eval.every=0 --checkpoint.interval=10 --training.steps=20 --resume auto "$@"
}
export -f train
export EMBER SRC WORK
for np in 2 4; do
  train "$np" "run$np" --training.steps=10 > "good$np.log" 2>&1 || { cat "good$np.log" >&2; fail "the good $np-rank run failed"; }
  [ -f "run$np/checkpoints/step_00000010.h5" ] || fail "the good $np-rank run wrote no checkpoint"
done
protect run2/checkpoints run4/checkpoints

# fault NAME NP SPEC: rank and dataset (or flush/close) of EMBER_TEST_FAIL_WRITE; the save of step 20 must fail.
# --timeout 60: the ranks end within the 15 s a failed rank waits for the others, plus start-up and training.
fault() {
  local name=$1 np=$2 spec=$3
  bad_case "$name" nonzero "run$np/checkpoints/step_00000020\.h5\.tmp.*No space left on device" --timeout 60 -- \
    env EMBER_TEST_FAIL_WRITE="$spec" bash -c "train $np run$np"
  [ -z "$(find "run$np/checkpoints" -name '*.tmp')" ] || fail "$name: a temp file was left behind"
}
fault model_rank0_np2 2 0:/model/transformer/wte
fault model_rank1_np2 2 1:/model/
fault optimizer_rank1_np2 2 1:/optimizer/exp_avg_sq
fault flush_rank1_np2 2 1:flush
fault model_last_np4 4 3:/model/transformer/h/1/
fault optimizer_rank0_np4 4 0:/optimizer/
fault optimizer_last_np4 4 3:/optimizer/exp_avg/
fault close_rank1_np4 4 1:close

# A real full file system (tmpfs, mounted by root): the save stops at the free-space check of every rank, before a
# byte is written. Where the mount is refused (not root, or a container without the capability) the case is reported
# as skipped with the reason; the injected cases above cover the failure inside the write.
mkdir -p full
if mount -t tmpfs -o size=2m tmpfs full 2> mount.err; then
  trap 'umount "$WORK/full" 2>/dev/null || true' EXIT
  cp -a run2 full/run2
  bad_case full_disk_np2 nonzero "full/run2/checkpoints/step_00000020\.h5: not enough free disk space" --timeout 60 -- \
    bash -c "train 2 full/run2"
  cmp full/run2/checkpoints/step_00000010.h5 run2/checkpoints/step_00000010.h5 ||
    fail "full_disk_np2: the earlier checkpoint changed"
  cmp full/run2/checkpoints/latest run2/checkpoints/latest || fail "full_disk_np2: latest changed"
  [ -z "$(find full/run2/checkpoints -name '*.tmp')" ] || fail "full_disk_np2: a temp file was left behind"
  umount full
  trap - EXIT
else
  echo "SKIP: full_disk_np2: cannot mount a tmpfs here ($(head -1 mount.err)); the injected cases stand in for it"
fi

bad_case_summary
echo PASS
