# The end every Slurm job script (jobs/slurm-*.sbatch) shares, sourced by them: ember_job_wait waits for the training
# step, relays the stop signals to it, and acts on its exit code: 0 done, 3 stopped after a checkpoint (requeue
# unless the job is ending), anything else a failure that is not requeued.

# ember_job_wait SRUN_PID: waits for the `srun ... ember train` started in the background with that process id; ends
# the job script with the right exit code when it must not go on (3: stopped but not requeued, other: failure).
#
# Slurm signals only the batch shell (#SBATCH --signal=B:USR1@...); srun forwards the signals it receives to every
# task, and ember then agrees across ranks to stop at the next step boundary, writes a checkpoint and exits with code
# 3. SIGTERM (scancel, preemption, the time limit itself) reaches the tasks from Slurm directly and they checkpoint
# within the cluster's KillWait (`scontrol show config | grep KillWait`); it is trapped here so that this shell
# outlives srun and does not requeue a job that is being cancelled.
# Test by hand: scancel --signal=USR1 --batch JOBID.
ember_job_wait() {
  srun_pid=$1
  stop_signal=""
  trap ember_job_on_usr1 USR1
  trap ember_job_on_term TERM
  # A trapped signal interrupts `wait`; polling a short sleep keeps that harmless, and the final wait returns srun's
  # own exit status (the highest of its tasks).
  while kill -0 "$srun_pid" 2>/dev/null; do
    sleep 1 &
    wait $! || true
  done
  local rc=0
  wait "$srun_pid" || rc=$?

  case $rc in
    0)
      echo "ember job: training finished"
      ;;
    3)
      if [ "$stop_signal" = TERM ]; then
        # scancel, the time limit itself or preemption: requeueing here would undo a cancel (Slurm allows it), and a
        # preempted job is requeued by Slurm when its partition says so.
        echo "ember job: stopped after a checkpoint as the job ends; not requeued (submit again to continue)" >&2
        exit 3
      fi
      echo "ember job: stopped early after a checkpoint; requeueing to continue"
      if ! scontrol requeue "${SLURM_JOB_ID}"; then
        echo "ember job: requeue refused; submit this script again to continue from the checkpoint" >&2
        exit 3
      fi
      ;;
    *)
      echo "ember job: ember failed with exit code $rc; not requeued (see the error above)" >&2
      exit "$rc"
      ;;
  esac
}

ember_job_on_usr1() {
  stop_signal=USR1
  echo "ember job: SIGUSR1, asking ember to checkpoint and stop"
  kill -USR1 "$srun_pid" 2>/dev/null || true
}

ember_job_on_term() {
  stop_signal=TERM
  echo "ember job: SIGTERM, the job is ending; ember checkpoints and stops"
}
