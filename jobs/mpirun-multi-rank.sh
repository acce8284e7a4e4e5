#!/usr/bin/env bash
# Train on one or more machines without Slurm: mpirun starts N ranks (a power of two), one per GPU, or on CPUs with
# OpenMP threads each. Rerunning this script after any interruption continues from the newest checkpoint.
#
# Run from the repository root after a Release build in build/ and `ember prep` of your data, e.g.
#   NP=4 jobs/mpirun-multi-rank.sh --training.steps=5000
# Arguments are passed to `ember train`. To stop early with a checkpoint, send SIGUSR1 to mpirun (it forwards it to
# every rank; Ctrl-C and SIGTERM to mpirun kill the ranks without one) or give --max-runtime SECONDS; then run this
# script again to continue. Exit code: 0 finished, 3 stopped early after a checkpoint, anything else an error.
set -euo pipefail

NP=${NP:-2}                              # ranks: a power of two; on GPU machines one per GPU (all machines together)
CONFIG=${CONFIG:-configs/demo.ini}       # model and recipe (INI)
DATA_DIR=${DATA_DIR:-data/demo}          # shards from `ember prep --output ...`
RUN_DIR=${RUN_DIR:-runs/mpirun}          # metrics.jsonl and checkpoints/
THREADS=${THREADS:-$(($(nproc) / NP > 0 ? $(nproc) / NP : 1))}  # CPU threads per rank: cores of a machine / its ranks
EMBER=${EMBER:-build/ember}              # the ember binary
HOSTFILE=${HOSTFILE:-}                   # several machines: a file with one line per machine, e.g.
                                         #   node1 slots=4
                                         #   node2 slots=4
                                         # (slots = ranks on that machine = its GPUs). Every machine needs
                                         # passwordless ssh from this one and the same paths (a shared filesystem).

# mpirun refuses to start as root (containers) unless told that it is meant.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=$THREADS

# Several machines on plain Ethernet: uncomment and name the interface that connects them (`ip -br addr`).
# export NCCL_IB_DISABLE=1          # no InfiniBand/RoCE: NCCL stops probing for it
# export NCCL_SOCKET_IFNAME=eth0    # NCCL's interface between machines
# MCA_NET=(--mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0)   # Open MPI's interface between machines
# RTX 4090 (and other consumer cards) have no NVLink and a disabled or broken peer-to-peer path; without this NCCL may
# hang or fail at the first all-reduce. Data-center GPUs with NVLink/P2P (A100, H100) must leave it unset.
# export NCCL_P2P_DISABLE=1

hosts=()
[ -n "$HOSTFILE" ] && hosts=(--hostfile "$HOSTFILE")
# -x: forward these variables to the ranks on other machines (mpirun passes its own environment only locally).
forward=(-x OMP_NUM_THREADS)
for var in NCCL_IB_DISABLE NCCL_SOCKET_IFNAME NCCL_P2P_DISABLE NCCL_DEBUG; do
  [ -n "${!var:-}" ] && forward+=(-x "$var")
done

# --bind-to none: a rank's OpenMP threads may use all of its share of cores, not the one core mpirun would pin it to.
# --resume auto: the first run trains from scratch, a rerun continues from checkpoints/latest.
exec mpirun -np "$NP" "${hosts[@]}" --bind-to none "${forward[@]}" ${MCA_NET:+"${MCA_NET[@]}"} \
  "$EMBER" train --config "$CONFIG" --data.dir="$DATA_DIR" --run.dir="$RUN_DIR" --training.threads="$THREADS" \
  --resume auto "$@"
