# Shared by the cluster tests: arguments as the e2e scripts take them, a skip (exit 77) where namespaces cannot be
# made, and a cluster of this test's own (name and subnet) that is removed on every exit, a failed one too.
# Each script is called as: script.sh EMBER_BINARY SOURCE_DIR WORK_DIR CLUSTER_NAME SUBNET
source "$2/tests/e2e/support/common.bash"
CLUSTER_NAME=$4
CLUSTER_SUBNET=$5
CLUSTER=("$SRC/scripts/cluster/cluster.sh" --name "$CLUSTER_NAME")
export EMBER_CLUSTER=$CLUSTER_NAME OMP_NUM_THREADS=1

skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "the emulated cluster needs root (network namespaces, veth links, tc)"
for tool in ip tc unshare ping; do command -v "$tool" >/dev/null || skip "'$tool' is not installed (scripts/setup.sh)"; done
if ! ip netns add "$CLUSTER_NAME-probe" 2>/dev/null; then skip "this machine does not allow network namespaces"; fi
ip netns delete "$CLUSTER_NAME-probe"

cluster_down() {
  kill_background_job
  "${CLUSTER[@]}" down || true
}
trap cluster_down EXIT

# cluster_up N [RATE]
cluster_up() { "${CLUSTER[@]}" up "$1" --subnet "$CLUSTER_SUBNET" --rate "${2:-1gbit}"; }
# on_cluster HOSTS RANKS_PER_HOST ARGS...: ember ARGS on the cluster
on_cluster() {
  local hosts=$1 per=$2
  shift 2
  "$SRC/scripts/cluster/mpirun.sh" --name "$CLUSTER_NAME" --hosts "$hosts" --ranks-per-host "$per" -- "$EMBER" "$@"
}
# link_bytes I: bytes host I's link has carried, both ways (the bridge side's counters)
link_bytes() {
  ip -s -j link show "$CLUSTER_NAME-v$1" | "$PYTHON" -c 'import json, sys
s = json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["bytes"] + s["tx"]["bytes"])'
}
# cluster_gone: no namespace, link or process of the cluster is left
cluster_gone() {
  if ip netns list | grep -q "^$CLUSTER_NAME-"; then fail "namespaces of $CLUSTER_NAME are left"; fi
  if ip -o link show | grep -q " $CLUSTER_NAME-"; then fail "links of $CLUSTER_NAME are left"; fi
}

# For jobs whose links are cut: each rank's stderr, exit code and exit time go to files under $WORK/ranks on the
# rank's own host (a cut link would never carry them to mpirun), and its process id to rank<r>.pid.
# start_job_with_rank_files ARGS...: ember ARGS on every host, one rank each, in the background ($mpirun_pid), with
# the mpirun options in the array MPIRUN_OPTIONS, if set.
start_job_with_rank_files() {
  write_rank_wrapper "$WORK/rank.sh"
  export RANK_DIR=$WORK/ranks
  mkdir -p "$RANK_DIR"
  "$SRC/scripts/cluster/mpirun.sh" --name "$CLUSTER_NAME" --ranks-per-host 1 -x RANK_DIR \
    ${MPIRUN_OPTIONS[@]+"${MPIRUN_OPTIONS[@]}"} -- "$WORK/rank.sh" "$EMBER" "$@" >"$WORK/job.log" 2>&1 &
  mpirun_pid=$!
}
# wait_for_file FILE SECONDS: until FILE exists while the job runs; fails if the job ends first or time runs out.
wait_for_file() {
  for _ in $(seq 1 $(($2 * 5))); do
    [[ -f "$1" ]] && return 0
    kill -0 "$mpirun_pid" 2>/dev/null || { cat "$WORK/job.log" "$WORK"/ranks/*.err >&2; fail "the job ended before $1 appeared"; }
    sleep 0.2
  done
  cat "$WORK/job.log" >&2
  fail "no $1 within $2 s"
}
# wait_for_checkpoint FOLDER NAME SECONDS: the job's save of NAME is complete (the file is in place and FOLDER/latest
# names it: the pointer is written to latest.tmp and renamed last), within SECONDS.
wait_for_checkpoint() {
  wait_for_file "$1/$2" "$3"
  for _ in $(seq 1 $(($3 * 5))); do
    [[ "$(cat "$1/latest" 2>/dev/null)" == "$2" && ! -e "$1/latest.tmp" ]] && return 0
    sleep 0.2
  done
  fail "$1/latest did not name $2 within $3 s"
}
# expect_rank_error R SINCE BOUND PATTERN: rank R exited non-zero within BOUND seconds of SINCE (date +%s.%N), with
# exactly one error line, which matches PATTERN (an extended regex, after the "[rank R] " prefix), and a hint.
expect_rank_error() {
  local r=$1 since=$2 bound=$3 pattern=$4 f=$WORK/ranks/rank$1
  for _ in $(seq 1 $((bound * 10))); do [[ -f $f.exit ]] && break; sleep 0.1; done
  [[ -f $f.exit ]] || { cat "$WORK"/ranks/*.err >&2; fail "rank $r had not exited $bound s after the failure"; }
  local rc at
  read -r rc at <"$f.exit"
  [[ $rc -ne 0 ]] || fail "rank $r exited 0"
  grep -Eq "^\[rank $r\] error: $pattern" "$f.err" || { cat "$f.err" >&2; fail "rank $r: no error line matching '$pattern'"; }
  [[ $(grep -Ec '^(\[rank [0-9]+\] )?error: ' "$f.err") -eq 1 ]] || { cat "$f.err" >&2; fail "rank $r: more than one error line"; }
  grep -q '^hint: ' "$f.err" || fail "rank $r: no hint line"
  echo "ok: rank $r exited $rc after $("$PYTHON" -c "print(round($at - $since, 1))") s: $(grep 'error: ' "$f.err" | cut -c1-110)"
}
# expect_mpirun_end SINCE BOUND: the background mpirun ends non-zero within BOUND seconds of SINCE.
expect_mpirun_end() {
  local since=$1 bound=$2 rc=0
  for _ in $(seq 1 $((bound * 10))); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$mpirun_pid" 2>/dev/null; then fail "mpirun still runs $bound s after the failure"; fi
  wait "$mpirun_pid" || rc=$?
  mpirun_pid=""
  [[ $rc -ne 0 ]] || fail "mpirun exited 0"
  echo "ok: mpirun exited $rc after $("$PYTHON" -c "import time; print(round(time.time() - $since, 1))") s"
}
# expect_resume HOSTS ARGS...: once the link is back, `--resume auto` with ARGS on HOSTS hosts (one rank each)
# resumes from the checkpoint `latest` names and ends cleanly.
expect_resume() {
  local hosts=$1 step
  shift
  step=$(sed -E 's/step_0*([0-9]+)\.h5/\1/' "$WORK/run/checkpoints/latest")
  on_cluster "$hosts" 1 "$@" --resume auto >"$WORK/resume.log" 2>&1 ||
    { cat "$WORK/resume.log" >&2; fail "--resume auto after the link came back"; }
  grep -q "resumed from .* at step $step " "$WORK/resume.log" ||
    { cat "$WORK/resume.log" >&2; fail "did not resume at step $step"; }
  echo "ok: resumed at step $step"
}
# finish_cluster_test: the cluster is removed and nothing of it is left.
finish_cluster_test() {
  cluster_down
  trap - EXIT
  cluster_gone
  echo PASS
}
