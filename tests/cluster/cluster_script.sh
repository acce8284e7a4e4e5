#!/usr/bin/env bash
# scripts/cluster/ itself: bad input gets one error line with a hint and changes nothing; a job killed mid-run
# (mpirun and the wrapper gone with SIGKILL, daemons and ranks left behind) is cleaned up whole by `down`, which is
# also harmless when there is nothing to remove.
source "$2/tests/cluster/common.bash"
C=("${CLUSTER[@]}")
M=("$SRC/scripts/cluster/mpirun.sh" --name "$CLUSTER_NAME")

expect_error up_zero "up needs a host count from 1 to 64, not '0'" "${C[@]}" up 0
expect_error up_many "not '65'" "${C[@]}" up 65
expect_error bad_rate "--rate 'fast' is not a rate" "${C[@]}" up 2 --rate fast
expect_error bad_subnet "--subnet '10.77' is not A.B.C" "${C[@]}" up 2 --subnet 10.77
expect_error bad_name "--name 'Big_Name' must be" "$SRC/scripts/cluster/cluster.sh" --name Big_Name up 2
expect_error no_cluster_link "no cluster '$CLUSTER_NAME' is up" "${C[@]}" link 1 down
expect_error no_cluster_run "no cluster '$CLUSTER_NAME' is up" "${M[@]}" --ranks-per-host 1 -- true
expect_error bad_command "unknown command 'start'" "${C[@]}" start
if id nobody >/dev/null 2>&1 && command -v runuser >/dev/null; then
  expect_error not_root "needs root" runuser -u nobody -- bash "$SRC/scripts/cluster/cluster.sh" --name "$CLUSTER_NAME" up 2
fi
cluster_gone

cluster_up 2 100mbit
expect_error bad_host "host '2' is not in cluster '$CLUSTER_NAME' (hosts 0..1)" "${C[@]}" link 2 down
expect_error bad_state "link needs up or down, not 'sideways'" "${C[@]}" link 1 sideways
expect_error bad_per_host "--ranks-per-host '0' must be a positive number" "${M[@]}" --ranks-per-host 0 -- true
expect_error bad_hosts "--hosts '3' must be from 1 to 2" "${M[@]}" --hosts 3 --ranks-per-host 1 -- true
expect_error no_program "no program given" "${M[@]}" --ranks-per-host 1
# The shaping is there, both ways, at the rate asked for.
tc qdisc show dev "$CLUSTER_NAME-v1" | grep -q 'tbf .*rate 100Mbit' || fail "host 1's bridge side is not shaped"
ip netns exec "$CLUSTER_NAME-h1" tc qdisc show dev eth0 | grep -q 'tbf .*rate 100Mbit' || fail "host 1 is not shaped"
[[ $("${C[@]}" exec 1 hostname) == "$CLUSTER_NAME-h1" ]] || fail "host 1 does not have its own hostname"

# A job across both hosts, killed the hard way: its daemons and ranks stay behind until `down`.
"${M[@]}" --ranks-per-host 1 -- sleep 600 >job.log 2>&1 &
job=$!
for _ in $(seq 1 100); do [[ -n "$(ip netns pids "$CLUSTER_NAME-h1")" ]] && break; sleep 0.2; done
[[ -n "$(ip netns pids "$CLUSTER_NAME-h1")" ]] || { cat job.log >&2; fail "the job did not reach host 1"; }
pkill -KILL -f "ember-cluster-hosts" || true
kill -KILL "$job" 2>/dev/null || true
wait "$job" 2>/dev/null || true
left=$(ip netns pids "$CLUSTER_NAME-h1" | wc -l)
echo "after SIGKILL to mpirun: $left processes left on host 1"
"${C[@]}" down
"${C[@]}" down  # nothing left to remove: still fine
trap - EXIT
cluster_gone
if pgrep -f "sleep 600" >/dev/null; then fail "the job's ranks survived 'down'"; fi
echo PASS
