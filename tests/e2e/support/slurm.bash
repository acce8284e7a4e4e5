# Helpers for e2e tests that need a real Slurm: a private single-node slurmctld + slurmd run as root from a generated
# slurm.conf, with state, spool, logs and ports of their own so that two test runs never meet. Needs common.bash.

# slurm_free_port: a TCP port that nothing listens on right now (the kernel picks it from the ephemeral range).
slurm_free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1]); s.close()'
}

# slurm_dump_logs: the daemon logs, for a failure report.
slurm_dump_logs() {
  local f
  for f in "$SLURM_DIR"/slurmctld.log "$SLURM_DIR"/slurmd.log "$SLURM_DIR"/slurmctld.out "$SLURM_DIR"/slurmd.out; do
    [ -s "$f" ] || continue
    echo "---- last lines of $f" >&2
    tail -n 25 "$f" >&2
  done
}

# slurm_fail MESSAGE: fails the test with the daemon logs attached.
slurm_fail() {
  slurm_dump_logs
  fail "$*"
}

# slurm_start DIR: writes DIR/slurm.conf, starts slurmctld and slurmd from it, exports SLURM_CONF for the clients
# (sbatch, squeue, scontrol, scancel; jobs inherit it), and waits until the node is idle. Fails, never skips, when
# Slurm is missing or cannot run here.
slurm_start() {
  SLURM_DIR=$1
  PATH=$PATH:/usr/sbin:/sbin  # the daemons live in sbin, which a non-login root shell may lack
  local tool
  for tool in slurmctld slurmd sbatch srun squeue sinfo scontrol scancel; do
    command -v "$tool" >/dev/null ||
      fail "Slurm tool '$tool' not found (this test runs a real single-node Slurm); run scripts/setup.sh as root"
  done
  [ "$(id -u)" -eq 0 ] || fail "this test starts slurmctld and slurmd itself and must run as root"
  local plugin_dir
  plugin_dir=$(dirname "$(find /usr/lib /usr/lib64 /usr/local/lib -name mpi_pmix.so -print -quit 2>/dev/null)")
  [ "$plugin_dir" != "." ] || fail "Slurm's PMIx plugin (mpi_pmix.so) not found; run scripts/setup.sh as root"

  mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/spool" "$SLURM_DIR/tmp"
  SLURM_HOST=$(hostname -s)
  # The node's CPU count as slurmd itself detects it (falls back to nproc); memory is kept small on purpose.
  local cpus
  cpus=$(slurmd -C 2>/dev/null | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -n 1)
  cpus=${cpus:-$(nproc)}
  local ctld_port slurmd_port
  ctld_port=$(slurm_free_port)
  slurmd_port=$(slurm_free_port)
  while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(slurm_free_port); done

  cat >"$SLURM_DIR/slurm.conf" <<EOF
# Private single-node cluster of an Ember e2e test (generated; see tests/e2e/support/slurm.bash).
ClusterName=embertest
SlurmctldHost=$SLURM_HOST(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
# A requeued job may start again only after the credential lifetime (default 120 s); the main scheduling loop runs
# every sched_interval seconds (default 60). Both are shortened so that a requeue restarts within seconds.
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=2
PluginDir=$plugin_dir
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
TmpFS=$SLURM_DIR/tmp
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
JobRequeue=1
# Job ids of their own: two test clusters on one host must not both run a job 1, since Open MPI names its
# shared-memory segments after the job (PMIx namespace) and ranks of the two jobs would then share them.
FirstJobId=$((ctld_port * 1000))
ReturnToService=2
MinJobAge=600
KillWait=10
InactiveLimit=0
SlurmctldTimeout=60
SlurmdTimeout=60
NodeName=$SLURM_HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1000 State=UNKNOWN
PartitionName=test Nodes=$SLURM_HOST Default=YES MaxTime=INFINITE State=UP
EOF
  # No variable of a surrounding Slurm (a test run inside a job, a user's SBATCH_* defaults) may reach these clients.
  local var
  for var in $(compgen -e | grep -E '^(SLURM|SBATCH|SRUN|SALLOC)_' || true); do unset "$var"; done
  export SLURM_CONF=$SLURM_DIR/slurm.conf

  # In the foreground (-D) as children of the test, so slurm_stop (and a kill of the test's process group) ends them;
  # -c: a clean start, no state from an earlier run.
  slurmctld -D -c >"$SLURM_DIR/slurmctld.out" 2>&1 &
  SLURMCTLD_PID=$!
  slurmd -D >"$SLURM_DIR/slurmd.out" 2>&1 &
  SLURMD_PID=$!

  local waited=0 state=""
  while :; do
    kill -0 "$SLURMCTLD_PID" 2>/dev/null || slurm_fail "slurmctld exited at start (log above; config $SLURM_CONF)"
    kill -0 "$SLURMD_PID" 2>/dev/null || slurm_fail "slurmd exited at start (log above; config $SLURM_CONF)"
    state=$(sinfo -h -N -n "$SLURM_HOST" -o '%T' 2>/dev/null || true)
    [ "$state" = idle ] && break
    [ "$waited" -lt 600 ] || slurm_fail "node $SLURM_HOST is not idle after 60 s (state '${state:-no answer}')"
    sleep 0.1
    waited=$((waited + 1))
  done
  echo "ok: Slurm up: node $SLURM_HOST idle with $cpus CPUs, slurmctld port $ctld_port, slurmd port $slurmd_port"
}

# slurm_job_field JOBID FIELD: one field of `scontrol show job` (e.g. JobState, Restarts, ExitCode), empty if unknown.
slurm_job_field() {
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# slurm_stop: cancels every job of the private cluster, waits for them to end, then stops the two daemons it started
# (by process id). Safe to call twice and from an EXIT trap.
slurm_stop() {
  if [ -n "${SLURMCTLD_PID:-}" ] && kill -0 "$SLURMCTLD_PID" 2>/dev/null; then
    local jobs
    jobs=$(squeue -h -o '%i' 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      local waited=0
      while [ -n "$(squeue -h -o '%i' 2>/dev/null || true)" ] && [ "$waited" -lt 300 ]; do
        sleep 0.1
        waited=$((waited + 1))
      done
    fi
  fi
  local pid
  for pid in ${SLURMD_PID:-} ${SLURMCTLD_PID:-}; do
    kill -TERM "$pid" 2>/dev/null || continue
    local waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 100 ]; do
      sleep 0.1
      waited=$((waited + 1))
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  SLURMD_PID="" SLURMCTLD_PID=""
}
