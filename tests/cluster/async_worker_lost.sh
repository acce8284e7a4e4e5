#!/usr/bin/env bash
# An async job (center on host 0, workers on hosts 1 and 2) that loses the worker on host 2 after the checkpoint at
# step 400, in three ways: killed (SIGKILL), frozen (SIGSTOP), and cut off (its host's link down). Each time the
# center drops it after async.worker_timeout with one warning line naming it, the center and the other worker go on,
# and the run ends at its target step with a final checkpoint written without it.
# The frozen worker, woken after the run, and the cut-off one end with one error line, the latter after
# async.center_timeout (10 s: before Open MPI's own keepalive, about 25 s here, has its host's daemon end it
# silently). mpirun runs with the options that keep a job going when one of its processes ends (docs/cluster.md).
# (A frozen worker woken while the run goes on
# leaves at once, saying it was dropped; with osc/pt2pt that wake-up once left the other worker's MPI_Win_unlock
# waiting for ever, 1 run in 6, so it is not part of this test: docs/cluster.md.)
source "$2/tests/cluster/common.bash"
TIMEOUT=5

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
common=(train --config "$SRC/configs/tiny.ini" --data.dir="$WORK/data" --training.mode=async
        --eval.every=0 --checkpoint.interval=400 --run.log_every=100 --async.local_steps=5
        --async.worker_timeout=$TIMEOUT --async.center_timeout=10 --run.dir="$WORK/run")
MPIRUN_OPTIONS=(--enable-recovery --mca orte_abort_on_non_zero_status 0)
cluster_up 3

# wait_for_exit R SECONDS: rank R's exit file appears within SECONDS; prints its exit code.
wait_for_exit() {
  for _ in $(seq 1 $(($2 * 10))); do [[ -f ranks/rank$1.exit ]] && break; sleep 0.1; done
  [[ -f ranks/rank$1.exit ]] || { cat job.log ranks/*.err >&2; fail "$how: rank $1 had not exited after $2 s"; }
  cut -d' ' -f1 ranks/rank$1.exit
}

# drop_lines: the center's warnings that it dropped worker rank 2 (stderr goes to the rank file, or through mpirun).
drop_lines() {
  cat job.log ranks/rank0.err 2>/dev/null |
    grep -c "async center: worker rank 2 on $CLUSTER_NAME-h2 gave no sign of life for [0-9]* s (async.worker_timeout = $TIMEOUT s): dropped"
}

for how in kill stop link; do
  rm -rf run ranks
  # The tiny model trains about 250 steps/s here: the loss comes seconds before the next checkpoint (a worker lost
  # between its acknowledgement of a checkpoint and the write ends the job after dist.timeout instead).
  STEPS=800
  start_job_with_rank_files "${common[@]}" --training.steps=$STEPS
  wait_for_file run/checkpoints/step_00000400.h5 120
  # The file appears when the center has written it; the loss comes once worker 2 has gone on training (two more
  # rounds in its metrics), not while it may still be inside the save, which dist.timeout would bound instead.
  rounds=$(lines run/metrics_rank2.jsonl)
  for _ in $(seq 1 300); do (($(lines run/metrics_rank2.jsonl) >= rounds + 2)) && break; sleep 0.1; done
  victim=$(cat ranks/rank2.pid)
  case $how in
    kill) kill -KILL "$victim" ;;
    stop) kill -STOP "$victim" ;;
    link) "${CLUSTER[@]}" link 2 down ;;
  esac
  lost=$(date +%s.%N)
  echo "$how: worker rank 2 lost at $lost"
  # The center and worker 1 finish the run without it.
  rc0=$(wait_for_exit 0 180)
  rc1=$(wait_for_exit 1 30)
  [[ $rc0 -eq 0 && $rc1 -eq 0 ]] || { cat job.log ranks/*.err >&2; fail "$how: center exited $rc0, worker 1 $rc1"; }
  read -r _ done_at <ranks/rank0.exit
  echo "ok: $how: the center and worker 1 finished $("$PYTHON" -c "print(round($done_at - $lost, 1))") s after the loss"
  drops=$(drop_lines)
  [[ $drops -eq 1 ]] || { cat job.log ranks/rank0.err >&2; fail "$how: $drops drop lines for worker rank 2, not 1"; }
  grep -q "step *$STEPS/$STEPS\|done at step $STEPS " job.log ranks/rank0.err ||
    { cat job.log >&2; fail "$how: the run did not end at step $STEPS"; }
  # The last checkpoint is at the target step: also when the lost worker had a round in flight and was dropped while
  # the run was finishing (the samples it had reserved are skipped, and count as done only up to the target; once,
  # before that cap, a run ended at step_00000802.h5 after a SIGSTOP).
  final=$(cat run/checkpoints/latest)
  [[ $final == $(printf 'step_%08d.h5' "$STEPS") ]] || fail "$how: latest is $final, not at step $STEPS"
  [[ -f run/checkpoints/$final ]] || fail "$how: latest names $final, which does not exist"
  # The final checkpoint was written by the center and worker 1 alone.
  "$PYTHON" - "run/checkpoints/$final" <<'PY' || fail "$how: the final checkpoint"
import h5py, sys
with h5py.File(sys.argv[1], "r") as f:
    assert sorted(f["ranks"].keys()) == ["0", "1"], list(f["ranks"].keys())
PY
  case $how in
    kill) [[ ! -f ranks/rank2.exit ]] || [[ $(cut -d' ' -f1 ranks/rank2.exit) -ne 0 ]] || fail "kill: rank 2 exited 0" ;;
    stop)
      kill -CONT "$victim"
      expect_rank_error 2 "$(date +%s.%N)" 20 \
        "async worker rank 2( on $CLUSTER_NAME-h2: the center dropped this worker|: the center \(rank 0\) (did not answer|has not taken))" ;;
    link)
      expect_rank_error 2 "$lost" 20 "async worker rank 2: the center \(rank 0\) (did not answer|has not taken)"
      "${CLUSTER[@]}" link 2 up ;;
  esac
  for _ in $(seq 1 600); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$mpirun_pid" 2>/dev/null && { cat job.log >&2; fail "$how: mpirun still runs 60 s after every rank ended"; }
  wait "$mpirun_pid" || true
  mpirun_pid=""
  echo "ok: $how: the run ended at step $STEPS without worker rank 2"
done
finish_cluster_test
