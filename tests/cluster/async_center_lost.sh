#!/usr/bin/env bash
# An async job (center on host 0, workers on hosts 1 and 2) whose center's host is cut off mid-run: each worker
# ends within async.center_timeout + 5 s with one error line naming the center (its one-sided calls to the center
# are bounded, parallel/stall_watchdog.h), mpirun within async.center_timeout + 60 s, and once the link is back,
# --resume auto continues from the last checkpoint.
source "$2/tests/cluster/common.bash"
TIMEOUT=10

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
common=(train --config "$SRC/configs/tiny.ini" --data.dir="$WORK/data" --training.mode=async --training.steps=1000000
        --eval.every=0 --checkpoint.interval=100 --run.log_every=50 --async.local_steps=5
        --async.center_timeout=$TIMEOUT --run.dir="$WORK/run")
cluster_up 3
start_job_with_rank_files "${common[@]}"
wait_for_file run/checkpoints/step_00000200.h5 120
"${CLUSTER[@]}" link 0 down
down=$(date +%s.%N)
echo "link of host 0 (the center) down at $down"

for r in 1 2; do
  expect_rank_error $r "$down" $((TIMEOUT + 5)) \
    "async worker rank $r: the center \(rank 0\) (did not answer MPI_Win_[a-z]+ within async.center_timeout = $TIMEOUT s|has not taken)"
done
expect_mpirun_end "$down" $((TIMEOUT + 60))

"${CLUSTER[@]}" link 0 up
expect_resume 3 "${common[@]}" --stop-after 50
finish_cluster_test
