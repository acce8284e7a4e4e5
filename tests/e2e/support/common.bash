# Shared helpers for the e2e scripts: arguments, a fresh work directory, failure reporting and error checks.
# Each script is called as: script.sh EMBER_BINARY SOURCE_DIR WORK_DIR
set -euo pipefail
EMBER=$1
SRC=$2
WORK=$3
PYTHON=${EMBER_PYTHON:-python3}
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect_error NAME PATTERN CMD...: CMD must exit non-zero, print "error: ..." naming PATTERN and a "hint:" line.
expect_error() {
  local name=$1 pattern=$2
  shift 2
  local rc=0
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  [ "$rc" -ne 0 ] || fail "$name: exit 0, expected an error"
  grep -q "^error: .*$pattern" "$WORK/$name.err" || { cat "$WORK/$name.err" >&2; fail "$name: no 'error: ...$pattern' line"; }
  grep -q "^hint: " "$WORK/$name.err" || { cat "$WORK/$name.err" >&2; fail "$name: no hint line"; }
  [ "$(grep -c '^error: ' "$WORK/$name.err")" -eq 1 ] || { cat "$WORK/$name.err" >&2; fail "$name: more than one error line"; }
  echo "ok: $name -> $(grep '^error: ' "$WORK/$name.err")"
}

# prep_demo_corpus DIR: the demo's corpus (this checkout's text and the system's licence texts, staged as
# scripts/run.sh stages them) prepared byte-level into DIR, 5% of it for validation.
prep_demo_corpus() {
  mkdir -p corpus/project corpus/licenses
  local item
  for item in README.md docs src configs scripts; do cp -R "$SRC/$item" corpus/project/; done
  cp -RL /usr/share/common-licenses/. corpus/licenses/ 2>/dev/null || true
  "$EMBER" prep --input corpus --output "$1" --tokenizer bytes --val-fraction 0.05 >/dev/null
}

# mpi_train NP LOG ARGS...: `ember train ARGS` on NP ranks under mpirun, its output in LOG, bounded by
# $TRAIN_TIMEOUT seconds (default 300: a hang fails instead of blocking); returns the run's status (124 at the bound).
mpi_train() {
  local np=$1 log=$2
  shift 2
  timeout "${TRAIN_TIMEOUT:-300}" mpirun -np "$np" --oversubscribe "$EMBER" train "$@" >"$log" 2>&1
}

# must_train NP LOG ARGS...: mpi_train, failing the script, with LOG shown, where the run does not succeed.
must_train() {
  mpi_train "$@" || { cat "$2" >&2; fail "ember train on $1 rank(s) failed (log: $2)"; }
}

# losses FILE: the "loss" of every record in a metrics.jsonl, one per line, as printed (exact).
losses() {
  "$PYTHON" -c 'import json,sys
for line in open(sys.argv[1]):
    r = json.loads(line); print(r["step"], repr(r["loss"]))' "$1"
}

# rank_pid RANK: the process id of that rank among the children of the mpirun whose pid is in $mpirun_pid
# (found by OMPI_COMM_WORLD_RANK in each child's environment).
rank_pid() {
  local pid
  for pid in $(pgrep -P "$mpirun_pid" || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -x "OMPI_COMM_WORLD_RANK=$1" >/dev/null; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# lines FILE: its line count, 0 while it does not exist.
lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }

# kill_background_job: kills the mpirun whose pid is in $mpirun_pid, and its ranks, if it still runs (for
# `trap kill_background_job EXIT` in scripts that start a job in the background).
mpirun_pid=""
kill_background_job() {
  if [ -n "$mpirun_pid" ] && kill -0 "$mpirun_pid" 2>/dev/null; then
    local pid
    for pid in $(pgrep -P "$mpirun_pid" || true); do kill -KILL "$pid" 2>/dev/null || true; done
    kill -KILL "$mpirun_pid" 2>/dev/null || true
  fi
}

# write_rank_wrapper FILE: a script that runs its arguments as one MPI rank, with that rank's stderr, process id and
# exit code (then the time, date +%s.%N) in $RANK_DIR/rank<r>.err, .pid and .exit: where a rank is killed or cut
# off, these say what became of it.
write_rank_wrapper() {
  cat >"$1" <<'SH'
#!/bin/sh
f=$RANK_DIR/rank$OMPI_COMM_WORLD_RANK
"$@" 2>"$f.err" &
echo $! >"$f.pid"
wait $!
rc=$?
echo "$rc $(date +%s.%N)" >"$f.exit"
exit $rc
SH
  chmod +x "$1"
}
