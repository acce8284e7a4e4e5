# Shared by the cluster tests: arguments as the e2e scripts take them, a skip (exit 77) where namespaces cannot be
# made, and a cluster of this test's own (name and subnet) that is removed on every exit, a failed one too.
# Each script is called as: script.sh EMBER_BINARY SOURCE_DIR WORK_DIR CLUSTER_NAME SUBNET
source "$2/tests/e2e/common.bash"
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
