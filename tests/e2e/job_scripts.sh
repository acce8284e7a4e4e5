#!/usr/bin/env bash
# Every job script under jobs/ is parsed and dry-run: bash -n; for each Slurm script, sbatch --test-only on a private
# single-node Slurm accepts its #SBATCH header; then each script runs with its launcher (srun, mpirun) and scontrol
# replaced by stubs on PATH that record their command lines. The launcher must be asked to start `ember train` with a
# config file under configs/, and the Slurm scripts' shared end (jobs/common/requeue.bash) must act on the run-state file
# of this start (stopped: requeue, done: finish, failed: fail, whatever the exit code) and without one on the exit
# code: 0 done, 3 requeue (3 after SIGTERM: no requeue), anything else a failure; the exit code survives SIGTERM
# reaching the batch shell as the step exits.
source "$(dirname "$0")/support/common.bash"
source "$(dirname "$0")/support/slurm.bash"
trap slurm_stop EXIT
trap 'exit 1' INT TERM

JOB_ID=4242
STUBS=$WORK/stubs
mkdir -p "$STUBS" spool

# The launcher stub (srun and mpirun): its command line, one argument a line, goes to <name>.calls and its process id
# to launcher.pid; with STUB_STATE it writes that state into $RUN_DIR/run_state.json as ember does (STUB_STATE=old:
# "stopped", dated an hour back as an earlier start's file is); it exits with STUB_RC, or with STUB_RC=wait runs until
# SIGUSR1 or SIGTERM and then exits 3, as ember does after its checkpoint.
cat >"$STUBS/launcher" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$@" >>"$STUB_DIR/$(basename "$0").calls"
echo $$ >"$STUB_DIR/launcher.pid"
if [ -n "${STUB_STATE:-}" ]; then
  mkdir -p "$RUN_DIR"
  printf '{"format":"ember-run-state","version":1,"state":"%s","step":7}\n' "${STUB_STATE/old/stopped}" \
    >"$RUN_DIR/run_state.json"
  [ "$STUB_STATE" != old ] || touch -d '1 hour ago' "$RUN_DIR/run_state.json"
fi
if [ "$STUB_RC" = wait ]; then
  trap 'exit 3' USR1 TERM
  while :; do
    sleep 0.1 &
    wait $! || true
  done
fi
exit "$STUB_RC"
EOF
cat >"$STUBS/scontrol" <<'EOF'
#!/usr/bin/env bash
echo "$*" >>"$STUB_DIR/scontrol.calls"
exit "$STUB_SCONTROL_RC"
EOF
chmod +x "$STUBS/launcher" "$STUBS/scontrol"
ln -s launcher "$STUBS/srun"
ln -s launcher "$STUBS/mpirun"

# dry_run SCRIPT LAUNCHER_RC [SCONTROL_RC] [SUBMIT_DIR]: runs a copy of SCRIPT (sbatch, too, runs a copy from its
# spool folder) in the background with the stubs first on PATH, as a Slurm batch shell of job $JOB_ID submitted from
# SUBMIT_DIR (the repository by default) would; its pid is in $job_pid, its output in $WORK/job.out and job.err.
# With $stub_state set, the run folder is $WORK/run and the launcher writes that run state (see the stub).
dry_run() {
  rm -f "$STUBS"/*.calls "$STUBS/launcher.pid"
  rm -rf "$WORK/run"
  cp "$1" "spool/$(basename "$1")"
  env -u EMBER -u CONFIG -u DATA_DIR -u RUN_DIR -u EMBER_HOME PATH="$STUBS:$PATH" STUB_DIR="$STUBS" STUB_RC="$2" \
    STUB_SCONTROL_RC="${3:-0}" STUB_STATE="${stub_state:-}" ${stub_state:+RUN_DIR="$WORK/run"} SLURM_SUBMIT_DIR="${4:-$SRC}" SLURM_JOB_ID=$JOB_ID SLURM_CPUS_PER_TASK=2 \
    bash "spool/$(basename "$1")" >job.out 2>job.err &
  job_pid=$!
}

# finish: waits for the dry run; its exit code in $rc.
finish() {
  rc=0
  wait "$job_pid" || rc=$?
}

# job_fail NAME MESSAGE: fails with the dry run's output attached.
job_fail() {
  echo "---- stdout" >&2 && cat job.out >&2
  echo "---- stderr" >&2 && cat job.err >&2
  fail "$1: $2"
}

# check_launch NAME LAUNCHER: LAUNCHER was called, and every `ember train` in its command line has a --config that
# names an existing file under configs/ (relative paths are taken from the repository, where the scripts run).
check_launch() {
  local name=$1 calls=$STUBS/$2.calls
  [ -s "$calls" ] || job_fail "$name" "$2 was not called"
  local args i j n=0 config path
  mapfile -t args <"$calls"
  for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    [ "$(basename -- "${args[i]}")" = ember ] && [ "${args[i + 1]}" = train ] || continue
    n=$((n + 1))
    config=""
    for ((j = i + 2; j < ${#args[@]}; j++)); do
      [ "${args[j]}" = : ] && break  # the next component or app context
      case ${args[j]} in
        --config) config=${args[j + 1]:-} ;;
        --config=*) config=${args[j]#--config=} ;;
      esac
    done
    [ -n "$config" ] || job_fail "$name" "ember train without --config: ${args[*]}"
    path=$config
    [[ "$path" = /* ]] || path=$SRC/$path
    [ -f "$path" ] || job_fail "$name" "ember train --config $config: no such file"
    [[ "$(realpath "$path")" = "$(realpath "$SRC/configs")"/* ]] ||
      job_fail "$name" "ember train --config $config: not a file under configs/"
  done
  [ "$n" -gt 0 ] || job_fail "$name" "$2 was not asked to start ember train: ${args[*]}"
  echo "ok: $name: $2 starts ember train $n time(s), config $config"
}

# expect NAME RC REQUEUED PATTERN: the dry run ended with exit code RC, called `scontrol requeue $JOB_ID` or not
# (REQUEUED yes/no), and printed a line matching PATTERN.
expect() {
  local name=$1
  [ "$rc" -eq "$2" ] || job_fail "$name" "exit code $rc, expected $2"
  if [ "$3" = yes ]; then
    [ "$(cat "$STUBS/scontrol.calls" 2>/dev/null)" = "requeue $JOB_ID" ] ||
      job_fail "$name" "no scontrol requeue $JOB_ID"
  else
    [ ! -e "$STUBS/scontrol.calls" ] || job_fail "$name" "unexpected scontrol $(cat "$STUBS/scontrol.calls")"
  fi
  grep -q -- "$4" job.out job.err || job_fail "$name" "no line matching '$4'"
  echo "ok: $name -> exit $rc, requeued: $3"
}

# signal_run NAME SCRIPT SIGNAL: a dry run whose launcher runs until stopped; SIGNAL goes to the batch shell as Slurm
# sends it (USR1 before the time limit, TERM on scancel), and for TERM also to the launcher, which Slurm signals too.
signal_run() {
  dry_run "$2" wait
  local waited=0
  until [ -s "$STUBS/launcher.pid" ]; do
    kill -0 "$job_pid" 2>/dev/null || { finish && job_fail "$1" "ended (exit $rc) before its launcher started"; }
    [ "$waited" -lt 100 ] || job_fail "$1" "launcher not started after 10 s"
    sleep 0.1
    waited=$((waited + 1))
  done
  sleep 0.5  # the shell sets its traps right after starting the launcher
  kill "-$3" "$job_pid"
  [ "$3" = TERM ] && kill -TERM "$(cat "$STUBS/launcher.pid")"
  finish
}

shopt -s nullglob
scripts=("$SRC"/jobs/*.sbatch "$SRC"/jobs/*.sh)
[ ${#scripts[@]} -gt 0 ] || fail "no job scripts under $SRC/jobs"

# 1. Every script parses.
for script in "${scripts[@]}"; do
  bash -n "$script" || fail "jobs/$(basename "$script"): bash -n failed"
done
echo "ok: bash -n accepts ${#scripts[@]} job scripts"

# 2. Slurm accepts every #SBATCH header. The test node has 2 CPUs and no GPUs, so the sizes are given on the command
#    line (which overrides the header, once per component of a heterogeneous job); everything else is the header's.
slurm_start "$WORK/slurm"
fit=(--nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0)
for script in "$SRC"/jobs/*.sbatch; do
  name=jobs/$(basename "$script")
  sizes=("${fit[@]}")
  for ((k = 0; k < $(grep -c '^#SBATCH hetjob' "$script" || true); k++)); do sizes+=(: "${fit[@]}"); done
  sbatch --test-only "${sizes[@]}" "$script" >sbatch.out 2>&1 ||
    { cat sbatch.out >&2 && fail "$name: sbatch --test-only refused it"; }
  grep -q "to start at" sbatch.out || { cat sbatch.out >&2 && fail "$name: sbatch --test-only gave no start estimate"; }
  echo "ok: $name: sbatch --test-only accepts the header"
done
slurm_stop

# 3. Dry runs. Slurm scripts: srun and the exit codes of the shared end; the others: mpirun.
for script in "$SRC"/jobs/*.sbatch; do
  name=jobs/$(basename "$script")
  dry_run "$script" 0 && finish
  check_launch "$name" srun
  expect "$name, ember exit 0" 0 no "training finished"
  dry_run "$script" 3 && finish
  expect "$name, ember exit 3" 0 yes "requeueing to continue"
  dry_run "$script" 3 1 && finish
  expect "$name, ember exit 3, requeue refused" 3 yes "requeue refused"
  dry_run "$script" 7 && finish
  expect "$name, ember exit 7" 7 no "exit code 7; not requeued"
  signal_run "$name, SIGUSR1" "$script" USR1
  expect "$name, SIGUSR1" 0 yes "SIGUSR1, asking ember to checkpoint"
  signal_run "$name, SIGTERM" "$script" TERM
  expect "$name, SIGTERM" 3 no "not requeued (submit again"
  # The run-state file of this start decides over the exit code; an earlier start's file does not.
  stub_state=stopped && dry_run "$script" 1 && finish
  expect "$name, state stopped, exit 1" 0 yes "decided by the run state 'stopped'"
  stub_state=done && dry_run "$script" 1 && finish
  expect "$name, state done, exit 1" 0 no "training finished"
  stub_state=failed && dry_run "$script" 0 && finish
  expect "$name, state failed, exit 0" 1 no "decided by the run state 'failed'"
  stub_state=running && dry_run "$script" 3 && finish
  expect "$name, state running, exit 3" 3 no "decided by the run state 'running'"
  stub_state=old && dry_run "$script" 7 && finish
  expect "$name, earlier start's state, exit 7" 7 no "no run state from this start.*decided by the exit code 7"
  stub_state=""
  # Submitted from a folder without the job library: a clear error before anything starts.
  dry_run "$script" 0 0 "$WORK" && finish
  [ ! -e "$STUBS/srun.calls" ] || job_fail "$name, no library" "srun was called"
  expect "$name, no library" 1 no "^hint: "
done

for script in "$SRC"/jobs/*.sh; do
  name=jobs/$(basename "$script")
  # These run from the repository root, without Slurm.
  (cd "$SRC" && env -u EMBER -u CONFIG -u DATA_DIR -u RUN_DIR PATH="$STUBS:$PATH" STUB_DIR="$STUBS" STUB_RC=0 \
    bash "$script" >"$WORK/job.out" 2>"$WORK/job.err") || job_fail "$name" "exit code $?"
  check_launch "$name" mpirun
  rm -f "$STUBS"/*.calls
done

# 4. The race of scancel: SIGTERM reaches the batch shell and the training step at the same moment, and the step exits 3
#    as bash reaps it. A shell that waits in the `wait` builtin while its traps fire loses the step's exit status in
#    about 1 race in 20 (bash's wait then returns -1, and the job exits 255); 40 races catch that 7 times in 8.
cat >race.bash <<EOF
set -euo pipefail
source "$SRC/jobs/common/requeue.bash"
"$STUBS/launcher" &
ember_job_wait "\$!"
EOF
races=40 lost=0
for ((k = 0; k < races; k++)); do
  rm -f "$STUBS/launcher.pid"
  env STUB_DIR="$STUBS" STUB_RC=wait bash race.bash >race.out 2>race.err &
  job_pid=$!
  until [ -s "$STUBS/launcher.pid" ]; do sleep 0.01; done
  sleep 0.05
  kill -TERM "$(cat "$STUBS/launcher.pid")" && kill -TERM "$job_pid"
  finish
  [ "$rc" -eq 3 ] || { lost=$((lost + 1)) && cat race.err >&2; }
done
rm -f "$STUBS"/*.calls
[ "$lost" -eq 0 ] || fail "SIGTERM race: $lost of $races jobs did not exit 3"
echo "ok: SIGTERM to the step and the batch shell at once: $races of $races jobs exit 3"

echo PASS
