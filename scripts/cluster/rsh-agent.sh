#!/usr/bin/env bash
# Open MPI's remote-shell agent inside an emulated cluster (plm_rsh_agent): called as `rsh-agent.sh [options] HOST
# COMMAND...` like ssh, it runs COMMAND with sh on the namespace that holds HOST's address, under that host's name.
set -euo pipefail
NAME=${EMBER_CLUSTER:-ember}
STATE=/run/ember-cluster/$NAME
while [[ $# -gt 0 && "$1" == -* ]]; do shift; done  # ssh-style options (-x, -o ...) mean nothing here
(($# >= 2)) || { echo "error: rsh-agent: usage: rsh-agent.sh HOST COMMAND..." >&2; exit 2; }
host=$1
shift
ns=$(awk -v h="$host" '$3 == h || $2 == h {print $2}' "$STATE/hosts" 2>/dev/null | head -n 1)
[[ -n "$ns" ]] || { echo "error: rsh-agent: '$host' is no host of cluster '$NAME'" >&2;
  echo "hint: the hostfile must list the cluster's addresses (scripts/cluster/cluster.sh status)" >&2; exit 1; }
# Like ssh, the command's words are joined and run by a shell on the far side.
exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$ns" "$*"
