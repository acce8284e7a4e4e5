#!/usr/bin/env bash
# A real Slurm job: jobs/slurm-cpu.sbatch with 2 ranks on a private single-node slurmctld + slurmd gets the
# pre-time-limit USR1, checkpoints, requeues itself, starts again, resumes from the checkpoint and finishes.
source "$(dirname "$0")/common.bash"
source "$(dirname "$0")/slurm_lib.bash"
trap slurm_stop EXIT
trap 'exit 1' INT TERM

STEPS=1500  # long enough that the first start is still training when the signal comes, short enough to finish fast

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
slurm_start "$WORK/slurm"

# The job script reads its paths from the environment (sbatch passes the submitter's environment, and a requeued
# start gets the same one); the arguments after the script go to `ember train` on every start.
export EMBER CONFIG="$SRC/configs/tiny.ini" DATA_DIR=data RUN_DIR=run
job=$(sbatch --parsable --ntasks=2 --cpus-per-task=1 --time=10 --output="$WORK/job.log" \
  "$SRC/jobs/slurm-cpu.sbatch" --training.steps=$STEPS --eval.every=0 --checkpoint.interval=0 --run.log_every=250) ||
  slurm_fail "sbatch refused jobs/slurm-cpu.sbatch"
echo "ok: submitted job $job"

# check_state STATE: fails the test when the job ended other than COMPLETED or vanished (STATE from slurm_job_field).
check_state() {
  case $1 in
    PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED | COMPLETED) ;;
    *)
      cat "$WORK/job.log" >&2 || true
      slurm_fail "job $job is in state '${1:-unknown}' (job log above)"
      ;;
  esac
}

# 1. The first start trains: wait for 5 steps of progress.
lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
start=$SECONDS
while [ "$(lines run/metrics.jsonl)" -lt 5 ]; do
  state=$(slurm_job_field "$job" JobState)
  check_state "$state"
  [ "$state" != COMPLETED ] || { cat job.log >&2; fail "job completed before 5 steps were recorded"; }
  [ $((SECONDS - start)) -lt 120 ] || { cat job.log >&2 || true; slurm_fail "no training progress 120 s after submission"; }
  sleep 0.1
done
echo "ok: job $job running ($(lines run/metrics.jsonl) steps after $((SECONDS - start)) s)"

# 2. What --signal=B:USR1@120 does before the time limit: USR1 to the batch shell only, which relays it to srun.
scancel --signal=USR1 --batch "$job" || slurm_fail "scancel --signal=USR1 --batch $job failed"
signalled=$SECONDS

# 3. The job checkpoints, requeues itself, starts again (after Slurm's requeue delay) and completes.
while :; do
  state=$(slurm_job_field "$job" JobState)
  check_state "$state"
  restarts=$(slurm_job_field "$job" Restarts)
  [ "$state" = COMPLETED ] && break
  [ $((SECONDS - signalled)) -lt 180 ] ||
    { cat job.log >&2; slurm_fail "job $job not completed 180 s after the signal (state $state, restarts $restarts)"; }
  sleep 0.2
done
echo "ok: job $job completed $((SECONDS - signalled)) s after the signal, restarts ${restarts:-?}"

# The log (appended across starts) tells the story: two starts, a stop with a checkpoint, a resume from it, the end.
[ "$(grep -c "^ember job $job: start " job.log)" -eq 2 ] ||
  { cat job.log >&2; fail "expected 2 starts of job $job in its log, found $(grep -c "^ember job $job: start " job.log)"; }
grep -q "^ember job $job: start 2 " job.log || { cat job.log >&2; fail "the second start is not numbered 2"; }
stop_line=$(grep -m1 "stopping early at step" job.log) || { cat job.log >&2; fail "no 'stopping early' line in the log"; }
N=$(sed -n 's/.*stopping early at step \([0-9]*\).*/\1/p' <<<"$stop_line")
[ "$N" -ge 5 ] && [ "$N" -lt "$STEPS" ] || fail "first start stopped at step $N, expected 5 <= step < $STEPS"
checkpoint=$(printf 'step_%08d.h5' "$N")
grep -q "checkpoint run/checkpoints/$checkpoint" job.log || { cat job.log >&2; fail "no checkpoint line for $checkpoint"; }
grep -q "requeueing to continue" job.log || { cat job.log >&2; fail "the job script did not requeue after exit 3"; }
grep -q "resumed from .*$checkpoint at step $N" job.log || { cat job.log >&2; fail "second start did not resume from $checkpoint"; }
grep -q "ember job: training finished" job.log || { cat job.log >&2; fail "no 'training finished' line"; }
echo "ok: first start stopped at step $N with $checkpoint, the second resumed from it"

[ "${restarts:-0}" -eq 1 ] || fail "Slurm counts $restarts restarts of job $job, expected 1"
exit_code=$(slurm_job_field "$job" ExitCode)
[ "$exit_code" = 0:0 ] || fail "job $job exit code $exit_code, expected 0:0"
final=$(printf 'step_%08d.h5' "$STEPS")
[ "$(cat run/checkpoints/latest)" = "$final" ] || fail "latest is $(cat run/checkpoints/latest), expected $final"
"$EMBER" inspect "run/checkpoints/$final" >inspect.txt || fail "ember inspect $final failed"
grep -Eq "^step +$STEPS\$" inspect.txt || { cat inspect.txt >&2; fail "$final does not hold step $STEPS"; }
grep -Eq "^world_size +2\$" inspect.txt || { cat inspect.txt >&2; fail "$final was not written by 2 ranks"; }
echo "ok: final checkpoint $final at step $STEPS, job state COMPLETED, exit code $exit_code"
echo PASS
