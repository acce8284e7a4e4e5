#!/usr/bin/env bash
# mpirun across the hosts of an emulated cluster (scripts/cluster/cluster.sh): mpirun itself runs on host 0, the
# other hosts' Open MPI daemons start through rsh-agent.sh, ranks on different hosts talk over TCP through the shaped
# links, ranks on one host over shared memory.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  cat <<'EOF_USAGE'
usage: scripts/cluster/mpirun.sh [--name NAME] [--first-host I] [--hosts N] --ranks-per-host K [--center-host]
                                 [MPIRUN OPTION...] -- PROGRAM [ARG...]

Runs N x K ranks, K on each of hosts I..I+N-1 (I defaults to 0, N to every host from I on), ranks in host order;
mpirun itself runs on host I. With --center-host, host I runs one rank only (an async job's center) and the others K
each: 1 + (N - 1) x K ranks. A later mpirun with --first-host starts ranks that join a running async job from hosts
of their own (--async.join; both mpiruns need the same --ompi-server, docs/cluster.md). MPIRUN
OPTIONs (e.g. -x VAR, --mca osc ucx) go to mpirun as they are. What it sets: Open MPI's rsh launcher with this
folder's agent, pml ob1 with the btl tcp between hosts and vader within one, TCP (MPI and Open MPI's own
out-of-band traffic) only on the cluster's subnet, osc pt2pt unless an --mca osc is given; with osc ucx, UCX over
TCP on the cluster's link. The exit code is mpirun's.
EOF_USAGE
}
die() { echo "error: cluster mpirun: $1" >&2; shift; for line in "$@"; do echo "hint: $line" >&2; done; exit 1; }

NAME=${EMBER_CLUSTER:-ember}
HOSTS=""
FIRST=0
PER_HOST=""
CENTER=0
EXTRA=()
while (($#)); do
  case "$1" in
    --name|--first-host|--hosts|--ranks-per-host)
      [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value" "scripts/cluster/mpirun.sh --help"
      case "$1" in
        --name) NAME=$2 ;; --first-host) FIRST=$2 ;; --hosts) HOSTS=$2 ;; --ranks-per-host) PER_HOST=$2 ;;
      esac
      shift ;;
    --center-host) CENTER=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) EXTRA+=("$1") ;;
  esac
  shift
done
(($#)) || die "no program given" "scripts/cluster/mpirun.sh --ranks-per-host 1 -- build/ember train ..."
STATE=/run/ember-cluster/$NAME
[[ -f "$STATE/hosts" ]] || die "no cluster '$NAME' is up" "scripts/cluster/cluster.sh up N --name $NAME"
available=$(wc -l <"$STATE/hosts")
[[ "$FIRST" =~ ^[0-9]+$ && "$FIRST" -lt "$available" ]] ||
  die "--first-host '$FIRST' must be from 0 to $((available - 1)), a host of cluster '$NAME'" \
    "scripts/cluster/cluster.sh status"
available=$((available - FIRST))
HOSTS=${HOSTS:-$available}
[[ "$HOSTS" =~ ^[1-9][0-9]*$ && "$HOSTS" -le "$available" ]] ||
  die "--hosts '$HOSTS' must be from 1 to $available, the hosts of cluster '$NAME' from host $FIRST on" \
    "scripts/cluster/cluster.sh status"
[[ "$PER_HOST" =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-host '${PER_HOST}' must be a positive number" \
  "e.g. --ranks-per-host 2 for two GPUs a box"
subnet=$(cat "$STATE/subnet")

hostfile=$(mktemp "${TMPDIR:-/tmp}/ember-cluster-hosts.XXXXXX")
trap 'rm -f "$hostfile"' EXIT
tail -n +"$((FIRST + 1))" "$STATE/hosts" | head -n "$HOSTS" | awk -v k="$PER_HOST" -v c="$CENTER" '{print $3 " slots=" (NR == 1 && c ? 1 : k)}' >"$hostfile"
ranks=$((HOSTS * PER_HOST))
((CENTER)) && ranks=$((1 + (HOSTS - 1) * PER_HOST))

osc=(--mca osc pt2pt)
for ((i = 0; i < ${#EXTRA[@]}; ++i)); do
  [[ "${EXTRA[$i]}" == --mca && "${EXTRA[$((i + 1))]-}" == osc ]] && osc=()
done
# The launch goes out from host I; its daemons' and ranks' TCP stays on the cluster's subnet. Environment for the
# ranks travels with -x (the far hosts' daemons start with a bare one).
export EMBER_CLUSTER=$NAME
forward=(-x EMBER_CLUSTER -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=eth0)
for var in PATH LD_LIBRARY_PATH OMPI_ALLOW_RUN_AS_ROOT OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMP_NUM_THREADS; do
  [[ -n "${!var+set}" ]] && forward+=(-x "$var")
done
"$HERE/cluster.sh" --name "$NAME" exec "$FIRST" mpirun --hostfile "$hostfile" -np "$ranks" \
  --map-by slot --oversubscribe \
  --mca plm rsh --mca plm_rsh_agent "$HERE/rsh-agent.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include "$subnet.0/24" \
  --mca oob_tcp_if_include "$subnet.0/24" "${osc[@]}" \
  --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 5 --mca oob_tcp_keepalive_probes 3 \
  --mca orte_startup_timeout 60 \
  "${forward[@]}" "${EXTRA[@]+"${EXTRA[@]}"}" "$@"
