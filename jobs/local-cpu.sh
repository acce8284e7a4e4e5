#!/usr/bin/env bash
# Train on one machine without Slurm: mpirun with one rank using every core through OpenMP threads.
# Run from the repository root after scripts/run.sh (or a Release build in build/) and `ember prep` of your data.
# To stop early with a checkpoint, send SIGUSR1 to mpirun (exit code 3); rerun the script to continue. Several ranks
# or machines: jobs/mpirun-multi-rank.sh; under Slurm: jobs/slurm-*.sbatch.
set -euo pipefail

CONFIG=${CONFIG:-configs/demo.ini}      # model and recipe
DATA_DIR=${DATA_DIR:-data/demo}         # shards from `ember prep --output ...`
RUN_DIR=${RUN_DIR:-runs/local}          # metrics.jsonl and checkpoints/ go here
THREADS=${THREADS:-$(nproc)}            # OpenMP threads for the one rank
EMBER=${EMBER:-build/ember}             # the ember binary

# mpirun refuses to start as root (containers) unless told that it is meant.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=$THREADS

# --resume auto: a rerun of this script after an interruption continues from the newest checkpoint.
# --bind-to none: the rank's OpenMP threads may use every core, not just the one mpirun would pin it to.
exec mpirun -np 1 --bind-to none "$EMBER" train --config "$CONFIG" --data.dir="$DATA_DIR" --run.dir="$RUN_DIR" \
  --training.threads="$THREADS" --resume auto "$@"
