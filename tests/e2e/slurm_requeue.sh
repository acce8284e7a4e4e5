#!/usr/bin/env bash
# A real Slurm job: jobs/slurm-cpu.sbatch, 2 ranks on a private single-node slurmctld + slurmd, gets the pre-time-limit
# USR1, checkpoints, requeues itself, resumes and finishes; a plain scancel also checkpoints but stays cancelled.
source "$(dirname "$0")/support/common.bash"
source "$(dirname "$0")/support/slurm.bash"
trap slurm_stop EXIT
trap 'exit 1' INT TERM

STEPS=1500  # long enough that the first start is still training when the signal comes, short enough to finish fast

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
slurm_start "$WORK/slurm"

# job_fail JOB MESSAGE: fails the test with the job's log and the daemon logs attached.
job_fail() {
  cat "$WORK/job$1.log" >&2 || true
  slurm_fail "job $1: $2"
}

# expect_log JOB PATTERN WHAT: the job's log (appended across its starts) must have a line matching PATTERN.
expect_log() {
  grep -q "$2" "$WORK/job$1.log" || job_fail "$1" "no $3 in its log"
}

# wait_progress JOB RUN_DIR: waits until the job has recorded 5 training steps; fails if it ends first.
wait_progress() {
  local state start=$SECONDS
  while [ "$(lines "$2/metrics.jsonl")" -lt 5 ]; do
    state=$(slurm_job_field "$1" JobState)
    case $state in
      PENDING | CONFIGURING | RUNNING) ;;
      *) job_fail "$1" "state '${state:-unknown}' before 5 steps were recorded" ;;
    esac
    [ $((SECONDS - start)) -lt 120 ] || job_fail "$1" "no training progress 120 s after submission"
    sleep 0.1
  done
  echo "ok: job $1 running ($(lines "$2/metrics.jsonl") steps after $((SECONDS - start)) s)"
}

# submit RUN_DIR STEPS: submits jobs/slurm-cpu.sbatch with 2 ranks of 1 CPU; prints the job id. The job script reads
# its paths from the environment (sbatch passes the submitter's, and a requeued start gets the same); the arguments
# after the script go to `ember train` on every start.
submit() {
  RUN_DIR=$1 sbatch --parsable --ntasks=2 --cpus-per-task=1 --time=10 --output="$WORK/job%j.log" \
    "$SRC/jobs/slurm-cpu.sbatch" --training.steps="$2" --eval.every=0 --checkpoint.interval=0 --run.log_every=250 ||
    slurm_fail "sbatch refused jobs/slurm-cpu.sbatch"
}

# EMBER_HOME: the job script finds its shared end (jobs/common) there, since this test submits from its work directory.
export EMBER CONFIG="$SRC/configs/tiny.ini" DATA_DIR=data EMBER_HOME="$SRC"

# 1. The first start trains; then what --signal=B:USR1@120 does before the time limit: USR1 to the batch shell only,
#    which relays it to srun and so to every rank.
job=$(submit run "$STEPS")
wait_progress "$job" run
scancel --signal=USR1 --batch "$job" || slurm_fail "scancel --signal=USR1 --batch $job failed"
signalled=$SECONDS

# 2. The job checkpoints, requeues itself, starts again (after Slurm's requeue delay) and completes.
while :; do
  state=$(slurm_job_field "$job" JobState)
  restarts=$(slurm_job_field "$job" Restarts)
  case $state in
    COMPLETED) break ;;
    PENDING | CONFIGURING | RUNNING | COMPLETING | REQUEUED) ;;
    *) job_fail "$job" "state '${state:-unknown}' after the signal, expected a requeue and COMPLETED" ;;
  esac
  [ $((SECONDS - signalled)) -lt 180 ] || job_fail "$job" "not completed 180 s after the signal (state $state)"
  sleep 0.2
done
echo "ok: job $job completed $((SECONDS - signalled)) s after the signal, restarts ${restarts:-?}"

# The log tells the story: two starts, a stop with a checkpoint, a requeue, a resume from that checkpoint, the end.
starts=$(grep -c "^ember job $job: start " "job$job.log" || true)
[ "$starts" -eq 2 ] || job_fail "$job" "expected 2 starts in its log, found $starts"
expect_log "$job" "^ember job $job: start 2 " "second start"
N=$(sed -n 's/.*stopping early at step \([0-9]*\).*/\1/p' "job$job.log" | head -n 1)
[ -n "$N" ] || job_fail "$job" "no 'stopping early at step N' line"
[ "$N" -ge 5 ] && [ "$N" -lt "$STEPS" ] || job_fail "$job" "first start stopped at step $N, expected 5 <= N < $STEPS"
checkpoint=$(printf 'step_%08d.h5' "$N")
expect_log "$job" "checkpoint run/checkpoints/$checkpoint" "'checkpoint .../$checkpoint' line"
expect_log "$job" "requeueing to continue" "requeue after exit code 3"
expect_log "$job" "resumed from .*$checkpoint at step $N" "resume from $checkpoint"
expect_log "$job" "ember job: training finished" "'training finished' line"
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

# 3. A plain scancel (SIGTERM to every process of the job) also gets a checkpoint, but must stay cancelled: the job
#    script must not requeue a job that its user is cancelling.
job=$(submit cancelled 100000)
wait_progress "$job" cancelled
scancel "$job" || slurm_fail "scancel $job failed"
for _ in $(seq 300); do
  grep -q "not requeued" "job$job.log" && break
  sleep 0.1
done
expect_log "$job" "not requeued" "'not requeued' line after scancel"
expect_log "$job" "stopping early at step" "'stopping early' line after SIGTERM"
sleep 3  # a requeue would show within this time (it is decided before the script's last line)
state=$(slurm_job_field "$job" JobState)
restarts=$(slurm_job_field "$job" Restarts)
[ "$state" = CANCELLED ] && [ "$restarts" = 0 ] || job_fail "$job" "state $state, restarts $restarts after scancel"
latest=$(cat cancelled/checkpoints/latest) || fail "no checkpoint after scancel"
echo "ok: scancel of job $job -> checkpoint $latest, state $state, not requeued"
echo PASS
