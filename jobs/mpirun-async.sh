#!/usr/bin/env bash
# Async-mode training without Slurm (training.mode = async): mpirun starts one center (rank 0: holds the global
# parameters and serves the workers, trains nothing, needs no GPU) and N workers (ranks 1..N: one per GPU, or on CPUs
# with OpenMP threads each), on one or more machines. Rerunning this script after any interruption continues from
# the newest checkpoint.
#
# Run from the repository root after a Release build in build/ and `ember prep` of your data, e.g.
#   WORKERS=2 jobs/mpirun-async.sh --training.steps=2000
# Arguments are passed to `ember train` on every rank (every rank must get the same configuration, or ember stops at
# start-up naming the first difference). To stop early with a checkpoint, send SIGUSR1 to mpirun (it forwards it to
# every rank; Ctrl-C and SIGTERM to mpirun kill the ranks without one) or give --max-runtime SECONDS; then run this
# script again to continue. Exit code: 0 finished, 3 stopped early after a checkpoint, anything else an error.
set -euo pipefail

WORKERS=${WORKERS:-2}                    # worker ranks: any number >= 1 (no power-of-two rule); one per GPU on GPUs
CONFIG=${CONFIG:-configs/async.ini}      # model and recipe (INI) with [training] mode = async
DATA_DIR=${DATA_DIR:-data/demo}          # shards from `ember prep --output ...`
RUN_DIR=${RUN_DIR:-runs/async}           # metrics.jsonl and checkpoints/
CENTER_THREADS=${CENTER_THREADS:-1}      # CPU threads of the center (it folds in 1-bit deltas and steps its optimizer)
THREADS=${THREADS:-$(( ($(nproc) - CENTER_THREADS) / WORKERS > 0 ? ($(nproc) - CENTER_THREADS) / WORKERS : 1 ))}
                                         # CPU threads per worker: the cores the center leaves, shared by the workers
EMBER=${EMBER:-build/ember}              # the ember binary
HOSTFILE=${HOSTFILE:-}                   # several machines: a file with one line per machine, slots = the ranks it
                                         # runs; rank 0, the center, takes the first slot of the first line, e.g.
                                         #   cpubox slots=1   # the center, on a machine without a GPU
                                         #   node1 slots=4    # 4 workers (4 GPUs)
                                         #   node2 slots=4    # 4 workers (4 GPUs)
                                         # or the center on a worker machine with one slot more: node1 slots=5.
                                         # Slots of all lines together = 1 + WORKERS. Every machine needs
                                         # passwordless ssh from this one and the same paths (a shared filesystem).

# Why the center is a rank of its own on a CPU-only slot: it trains nothing, so a GPU given to it would sit idle; it
# keeps the fp32 global parameters and the outer optimizer state in host memory; and it loops on MPI calls so that
# the workers' one-sided puts and gets progress (with osc/pt2pt nothing moves unless the center is inside MPI). A
# worker never waits for another, but every worker waits for the center, so the center must not compete with a
# worker for its cores: give its machine one core more than its workers use.

# mpirun refuses to start as root (containers) unless told that it is meant.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# One-sided transport of the center's window (OSC=ucx, pt2pt or default). On one machine Open MPI picks osc/sm
# (shared memory) by itself. Across machines a component must be named: Debian's Open MPI turns osc/ucx and
# osc/pt2pt off in /etc/openmpi/openmpi-mca-params.conf (osc = ^ucx,pt2pt), which leaves none that works over plain
# Ethernet (MPI_Win_allocate then fails with MPI_ERR_WIN), and Open MPI 4.1 has no RDMA one-sided path over TCP:
#   ucx    osc/ucx over TCP (UCX emulates the one-sided operations); UCX_TLS=tcp,self unless set, and name the
#          interface between the machines with UCX_NET_DEVICES=eth0 if UCX picks a wrong one
#   pt2pt  osc/pt2pt over Open MPI's TCP transport, without UCX: it moves data only while the target (the center) is
#          inside an MPI call, which the center always is
OSC=${OSC:-$([ -n "$HOSTFILE" ] && echo ucx || echo default)}  # with HOSTFILE, ucx unless set
case $OSC in
  ucx)
    export UCX_TLS=${UCX_TLS:-tcp,self}
    osc=(--mca osc ucx -x UCX_TLS)
    [ -n "${UCX_NET_DEVICES:-}" ] && osc+=(-x UCX_NET_DEVICES)
    ;;
  pt2pt) osc=(--mca osc pt2pt) ;;
  default) osc=() ;;
  *)
    echo "error: OSC=$OSC: not one of ucx, pt2pt, default" >&2
    echo "hint: set OSC to ucx, pt2pt or default" >&2
    exit 1
    ;;
esac
# Open MPI's own traffic (start-up, point-to-point) between machines: name the interface (`ip -br addr`).
# MCA_NET=(--mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0)

hosts=()
if [ -n "$HOSTFILE" ]; then
  hosts=(--hostfile "$HOSTFILE")
else
  # One machine: the center and the workers may together be more processes than cores (the demo on a laptop).
  hosts=(--oversubscribe)
fi

# Every rank gets the same `ember train` arguments; only the number of OpenMP threads differs between the center and
# the workers, so it goes in the environment (`env` sets it and then runs ember; training.threads stays at its
# default 0 = OMP_NUM_THREADS). The first app context is rank 0, the center; the second, ranks 1..WORKERS.
# --bind-to none: a rank's OpenMP threads may use all of its share of cores, not the one core mpirun would pin it to.
# --resume auto: the first run trains from scratch, a rerun continues from checkpoints/latest.
# --enable-recovery and orte_abort_on_non_zero_status 0: a worker that dies, or that the center dropped (silent for
# async.worker_timeout), does not end the job; the center and the other workers go on (docs/cluster.md).
train=("$EMBER" train --config "$CONFIG" --data.dir="$DATA_DIR" --run.dir="$RUN_DIR" --resume auto "$@")
exec mpirun "${hosts[@]}" --bind-to none --enable-recovery --mca orte_abort_on_non_zero_status 0 \
  ${osc[@]+"${osc[@]}"} ${MCA_NET:+"${MCA_NET[@]}"} \
  -np 1 env OMP_NUM_THREADS="$CENTER_THREADS" "${train[@]}" \
  : -np "$WORKERS" env OMP_NUM_THREADS="$THREADS" "${train[@]}"
