#!/usr/bin/env bash
# A sync job whose link goes down mid-run: every rank exits non-zero within dist.timeout + 5 s with one error line
# naming the operation and the step (each rank's stderr is written to a file on its own host, since the link that
# would carry it to mpirun is down), mpirun ends within dist.timeout + 60 s (Linux gives up on the dead TCP
# connection after the cluster's 6 retransmissions, about 25 s), the checkpoints written before stay intact, and
# once the link is back, --resume auto goes on from the last of them.
source "$2/tests/cluster/common.bash"
TIMEOUT=10

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
common=(train --config "$SRC/configs/tiny.ini" --data.dir="$WORK/data" --training.steps=1000000 --eval.every=0
        --checkpoint.interval=200 --run.log_every=50 --dist.timeout=$TIMEOUT --run.dir="$WORK/run")
cluster_up 2
start_job_with_rank_files "${common[@]}"
# Past the second checkpoint (its save complete, so that the listing below never catches a pointer in flight), then
# the link goes down.
wait_for_checkpoint run/checkpoints step_00000400.h5 120
# The folder's lock (ember.lock) is held while the job runs and goes with it: not an output.
ls run/checkpoints | grep -v '^ember\.lock$' >before.txt
"${CLUSTER[@]}" link 1 down
down=$(date +%s.%N)
echo "link of host 1 down at $down"

# Every rank exits within dist.timeout + 5 s of the link going down; mpirun itself ends too, non-zero.
for r in 0 1; do
  expect_rank_error $r "$down" $((TIMEOUT + 5)) \
    "MPI [a-z-]+ did not complete within dist.timeout = $TIMEOUT s \(step [0-9]+\): a peer rank died, froze or lost its network link\$"
done
expect_mpirun_end "$down" $((TIMEOUT + 60))

# The checkpoints written before the failure are all there and read back whole.
ls run/checkpoints | grep -v '^ember\.lock$' >after.txt
diff before.txt after.txt || fail "the checkpoint folder changed after the link went down"
last=$(cat run/checkpoints/latest)
"$EMBER" inspect "run/checkpoints/$last" >inspect.log 2>&1 || { cat inspect.log >&2; fail "$last does not read back"; }

# The link returns; the job resumes from the last checkpoint and runs on.
"${CLUSTER[@]}" link 1 up
expect_resume 2 "${common[@]}" --stop-after 100
finish_cluster_test
