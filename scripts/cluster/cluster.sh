#!/usr/bin/env bash
# An emulated cluster on one machine: N hosts as network namespaces joined to one bridge by veth links whose rate is
# shaped in both directions, so that ranks on different hosts talk over real TCP through those links. Needs root.
set -euo pipefail

usage() {
  cat <<'EOF_USAGE'
usage: scripts/cluster/cluster.sh COMMAND [--name NAME]

  up N [--rate RATE] [--subnet A.B.C]  make hosts 0..N-1 (N 1-64): namespace NAME-hI with address A.B.C.(I+1)/24
                                       on a veth link to the bridge NAME-br, shaped to RATE each way (tc tbf; e.g.
                                       1gbit, 100mbit; default 1gbit; "none" leaves it unshaped)
  down                                 remove every namespace, link and process of the cluster (also after a
                                       run that was interrupted); a cluster that is not there is not an error
  link I up|down                       take host I's link down or bring it back (a cable pulled, a switch port lost)
  exec I COMMAND...                    run COMMAND on host I (its namespace, with hostname NAME-hI)
  status                               the hosts, their addresses and the links' state and rate

--name defaults to $EMBER_CLUSTER or "ember"; the subnet to 10.77.0. No delay is added: this kernel has tbf and
htb but no netem, so links are slow, not far. See docs/cluster.md.
EOF_USAGE
}

die() { echo "error: cluster: $1" >&2; shift; for line in "$@"; do echo "hint: $line" >&2; done; exit 1; }

NAME=${EMBER_CLUSTER:-ember}
RATE=1gbit
SUBNET=10.77.0
ARGS=()
while (($#)); do
  case "$1" in
    --name|--rate|--subnet)
      [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value" "scripts/cluster/cluster.sh --help"
      case "$1" in --name) NAME=$2 ;; --rate) RATE=$2 ;; --subnet) SUBNET=$2 ;; esac
      shift ;;
    -h|--help) usage; exit 0 ;;
    *) ARGS+=("$1") ;;
  esac
  shift
done
set -- "${ARGS[@]+"${ARGS[@]}"}"
(($#)) || { usage >&2; exit 2; }
COMMAND=$1
shift

[[ "$NAME" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name '$NAME' must be 1-8 lower-case letters and digits" \
  "interface names (NAME-br, NAME-v12) must stay within Linux's 15 characters"
STATE=/run/ember-cluster/$NAME

need_root() {
  [[ $(id -u) -eq 0 ]] || die "the cluster needs root (network namespaces, links, tc)" "run it as root or with sudo"
  command -v ip >/dev/null || die "'ip' (iproute2) is not installed" "apt-get install iproute2"
}
host_count() { [[ -f "$STATE/hosts" ]] && wc -l <"$STATE/hosts" || echo 0; }
check_host() {
  [[ -f "$STATE/hosts" ]] || die "no cluster '$NAME' is up" "scripts/cluster/cluster.sh up N --name $NAME"
  [[ "$1" =~ ^[0-9]+$ && "$1" -lt $(host_count) ]] ||
    die "host '$1' is not in cluster '$NAME' (hosts 0..$(($(host_count) - 1)))" "scripts/cluster/cluster.sh status"
}

cmd_down() {
  need_root
  # Processes first: anything running in one of the cluster's namespaces (ranks, Open MPI daemons, the agent).
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk -v p="$NAME-h" 'index($1, p) == 1 {print $1}'); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns delete "$ns" 2>/dev/null || true
  done
  # The root-side ends of the veth pairs go with their peers; the bridge and any leftover end are removed here.
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^$NAME-(br|v[0-9]+)\$" || true); do
    ip link delete "$link" 2>/dev/null || true
  done
  rm -rf "$STATE"
}

# shape DEV RATE [NETNS]: a token bucket on DEV's egress (burst 1 ms of the rate, at least 32 KiB; 50 ms of queue).
shape() {
  local dev=$1 rate=$2 ns=${3:-}
  [[ "$rate" == none ]] && return 0
  local bits
  bits=$(tc_bits "$rate")
  local burst=$((bits / 8 / 1000))
  ((burst >= 32768)) || burst=32768
  ${ns:+ip netns exec "$ns"} tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 50ms
}
tc_bits() {  # 1gbit -> 1000000000
  local n unit
  [[ "$1" =~ ^([0-9]+)(bit|kbit|mbit|gbit)$ ]] || die "--rate '$1' is not a rate" "e.g. 1gbit, 100mbit, 10gbit or none"
  n=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
  case "$unit" in bit) echo "$n" ;; kbit) echo $((n * 1000)) ;; mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;; esac
}

cmd_up() {
  need_root
  local n=${1:-}
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 64 ]] || die "up needs a host count from 1 to 64, not '${n}'" \
    "scripts/cluster/cluster.sh up 4"
  [[ "$SUBNET" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "--subnet '$SUBNET' is not A.B.C" "e.g. 10.77.0"
  [[ "$RATE" == none ]] || tc_bits "$RATE" >/dev/null
  command -v tc >/dev/null || die "'tc' is not installed" "apt-get install iproute2"
  command -v unshare >/dev/null || die "'unshare' is not installed" "apt-get install util-linux"
  if ! ip netns add "$NAME-probe" 2>/dev/null; then
    die "cannot make network namespaces here" "the cluster needs root in a machine (or container) that allows them"
  fi
  ip netns delete "$NAME-probe"
  cmd_down
  mkdir -p "$STATE"
  trap 'cmd_down' ERR
  ip link add "$NAME-br" type bridge
  ip link set "$NAME-br" up
  local i ns addr
  for ((i = 0; i < n; ++i)); do
    ns=$NAME-h$i
    addr=$SUBNET.$((i + 1))
    ip netns add "$ns"
    ip link add "$NAME-v$i" type veth peer name eth0 netns "$ns"
    ip link set "$NAME-v$i" master "$NAME-br" up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip addr add "$addr/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    # A peer that vanished (its link down) is given up on after 6 retransmissions, about 25 s, instead of Linux's
    # default of 15 (about 15 minutes): Open MPI's launcher only notices a lost host when its TCP connection fails.
    ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_retries2=6
    # Both directions: the host's egress inside its namespace, its ingress on the bridge side.
    shape eth0 "$RATE" "$ns"
    shape "$NAME-v$i" "$RATE"
    echo "$i $ns $addr" >>"$STATE/hosts"
  done
  echo "$RATE" >"$STATE/rate"
  echo "$SUBNET" >"$STATE/subnet"
  trap - ERR
  # Every host reaches every other before the cluster is called up.
  for ((i = 1; i < n; ++i)); do
    ip netns exec "$NAME-h0" ping -c 1 -W 2 "$SUBNET.$((i + 1))" >/dev/null ||
      { cmd_down; die "host 0 cannot reach host $i" "look at 'ip -n $NAME-h$i addr' and the bridge $NAME-br"; }
  done
  echo "cluster $NAME: $n hosts on $SUBNET.0/24, links shaped to $RATE each way"
}

cmd_link() {
  need_root
  check_host "${1:-}"
  [[ "${2:-}" == up || "${2:-}" == down ]] || die "link needs up or down, not '${2:-}'" "cluster.sh link 1 down"
  ip link set "$NAME-v$1" "$2"
  [[ "$2" == up && "$1" != 0 ]] || return 0
  # Back up only once host 0 reaches host I again: the neighbour entries the outage left behind fail the first
  # connections for a moment, and a daemon launched into that moment dies without a word.
  local addr
  addr=$(awk -v i="$1" '$1 == i {print $3}' "$STATE/hosts")
  for _ in $(seq 1 50); do
    ip netns exec "$NAME-h0" ping -c 1 -W 1 "$addr" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  die "host $1's link is up, but host 0 cannot reach $addr" "look at 'ip -n $NAME-h$1 addr' and the bridge $NAME-br"
}

cmd_exec() {
  need_root
  check_host "${1:-}"
  local i=$1
  shift
  (($#)) || die "exec needs a command" "cluster.sh exec 0 hostname"
  # Each host has a name of its own (a UTS namespace), so Open MPI sees separate nodes.
  exec ip netns exec "$NAME-h$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$NAME-h$i" "$@"
}

cmd_status() {
  [[ -f "$STATE/hosts" ]] || { echo "cluster $NAME: not up"; return 0; }
  echo "cluster $NAME: $(host_count) hosts, rate $(cat "$STATE/rate") each way"
  local i ns addr
  while read -r i ns addr; do
    echo "  host $i: $ns $addr link $(ip -br link show "$NAME-v$i" 2>/dev/null | awk '{print $2}')"
  done <"$STATE/hosts"
}

case "$COMMAND" in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  link) cmd_link "$@" ;;
  exec) cmd_exec "$@" ;;
  status) cmd_status ;;
  *) die "unknown command '$COMMAND'" "commands: up, down, link, exec, status (scripts/cluster/cluster.sh --help)" ;;
esac
