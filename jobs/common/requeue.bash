# The end every Slurm job script (jobs/slurm-*.sbatch) shares, sourced by them: ember_job_wait waits for the training
# step, relays the stop signals to it, and decides from the run-state file ember writes into the run folder
# (<run.dir>/run_state.json: done, stopped after a checkpoint, failed), falling back to the exit code only when this
# start left no such file: 0 done, 3 stopped (requeue unless the job is ending), anything else a failure that is not
# requeued.

# ember_job_outcome STATE_FILE SINCE RC: prints "done", "stopped" or "failed" for a training step that exited with RC,
# and on stderr what the decision came from. The run-state file counts when it was written at or after SINCE (epoch
# seconds, taken before the step started; an older one is from an earlier start): "done" and "stopped" are taken as
# they are, "failed" and "running" (the step ended without recording an outcome: killed, crashed) are failures.
# Without it, the exit code decides: 0 done, 3 stopped, anything else failed. The launcher's code alone can mislead:
# mpirun exits 1 on SIGTERM although every rank stopped cleanly after its checkpoint.
ember_job_outcome() {
  local file=$1 since=$2 rc=$3 state=""
  if [ -n "$file" ] && [ -f "$file" ] && [ "$(stat -c %Y "$file")" -ge "$since" ]; then
    state=$(sed -n 's/.*"state": *"\([a-z]*\)".*/\1/p' "$file" | head -n 1)
  fi
  if [ -n "$state" ]; then
    echo "ember job: decided by the run state '$state' in $file (launcher exit code $rc)" >&2
    case $state in
      done | stopped) echo "$state" ;;
      *) echo failed ;;
    esac
    return 0
  fi
  echo "ember job: no run state from this start${file:+ in $file}; decided by the exit code $rc" >&2
  case $rc in
    0) echo done ;;
    3) echo stopped ;;
    *) echo failed ;;
  esac
}

# ember_job_wait SRUN_PID [STATE_FILE]: waits for the `srun ... ember train` started in the background with that
# process id; ends the job script with the right exit code when it must not go on (3: stopped but not requeued,
# other: failure). STATE_FILE is the run's <run.dir>/run_state.json.
#
# Slurm signals only the batch shell (#SBATCH --signal=B:USR1@...); srun forwards the signals it receives to every
# task, and ember then agrees across ranks to stop at the next step boundary, writes a checkpoint, records "stopped"
# in the run-state file and exits with code 3. SIGTERM (scancel, preemption, the time limit itself) reaches the tasks
# from Slurm directly and they checkpoint within the cluster's KillWait (`scontrol show config | grep KillWait`); it
# is trapped here so that this shell outlives srun and does not requeue a job that is being cancelled.
# Test by hand: scancel --signal=USR1 --batch JOBID.
ember_job_wait() {
  srun_pid=$1
  local state_file=${2:-} since
  # One second earlier: the file's mtime has whole seconds, and the step may have started in the previous one.
  since=$(($(date +%s) - 1))
  stop_signal=""
  trap ember_job_on_usr1 USR1
  trap ember_job_on_term TERM
  # The loop polls with a sleep in the foreground: bash runs a trap only once the foreground command ends (so the
  # signals are relayed within a second) and meanwhile reaps srun the moment it exits. A trapped signal that arrives
  # inside the `wait` builtin instead interrupts it, and one that lands as bash reaps srun loses srun's exit status
  # (`wait` then returns -1). Once srun is reaped (kill -0 fails), the final wait returns its recorded status (the
  # highest of its tasks) at once.
  while kill -0 "$srun_pid" 2>/dev/null; do
    sleep 1 || true
  done
  local rc=0
  wait "$srun_pid" || rc=$?

  local outcome
  outcome=$(ember_job_outcome "$state_file" "$since" "$rc")
  case $outcome in
    done)
      echo "ember job: training finished"
      ;;
    stopped)
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
      [ "$rc" -ne 0 ] || rc=1
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
