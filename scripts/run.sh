#!/usr/bin/env bash
# The demo: installs dependencies, builds Ember, turns a text corpus into byte-level shards, trains the demo model
# (configs/demo.ini) on this machine's cores, and prints a sample from the final checkpoint. Usage: run.sh [INPUT]
set -euo pipefail

# INPUT is resolved against the caller's directory before moving to the repository root.
INPUT=${1:+$(realpath -m -- "$1")}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
RUN_DIR=runs/demo
DATA_DIR=data/demo
# Extra `ember train` arguments, e.g. EMBER_DEMO_ARGS="--training.steps=200 --resume auto".
read -r -a EXTRA_ARGS <<<"${EMBER_DEMO_ARGS:-}"

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
# mpirun refuses to start as root (containers, CI) unless told that it is meant.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

bash scripts/setup.sh

echo "== build (Release, build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
cmake --build build -j"$(nproc)" --target ember  # the demo needs only the binary; scripts/test.sh builds the tests
EMBER="$ROOT/build/ember"

# Default corpus: real English and code text that every set-up machine has, so the demo needs no download:
# this project's own README, docs, sources, configs and scripts, plus the licence texts Debian ships.
if [[ -z "$INPUT" ]]; then
  INPUT=data/demo-corpus
  echo "== corpus (no INPUT given: the project's own text and the system's licence texts, staged in $INPUT)"
  rm -rf "$INPUT"
  mkdir -p "$INPUT/project"
  for item in README.md docs src configs scripts; do
    [[ -e "$item" ]] && cp -R "$item" "$INPUT/project/"
  done
  if [[ -d /usr/share/common-licenses ]]; then
    mkdir -p "$INPUT/licenses"
    # -L: several entries there are symbolic links to the GPL/LGPL texts.
    cp -RL /usr/share/common-licenses/. "$INPUT/licenses/" 2>/dev/null || true
  fi
elif [[ ! -e "$INPUT" ]]; then
  echo "error: input '$INPUT' does not exist" >&2
  echo "hint: pass a text file or a directory of text files, or no argument for the built-in corpus" >&2
  exit 1
fi

echo "== prep: $INPUT -> $DATA_DIR"
# Every run is a fresh demo: prep replaces an earlier demo's shards (only once the new ones are complete), and train
# moves an earlier demo's metrics and checkpoints into $RUN_DIR/previous-<UTC time>/ (nothing is deleted).
"$EMBER" prep --input "$INPUT" --output "$DATA_DIR" --tokenizer bytes --val-fraction 0.05 --overwrite

echo "== train: configs/demo.ini -> $RUN_DIR (OMP_NUM_THREADS=$OMP_NUM_THREADS)"
"$EMBER" train --config configs/demo.ini --run.dir="$RUN_DIR" --data.dir="$DATA_DIR" --overwrite \
  ${EXTRA_ARGS[@]+"${EXTRA_ARGS[@]}"}

LATEST_FILE="$RUN_DIR/checkpoints/latest"
if [[ ! -s "$LATEST_FILE" ]]; then
  echo "error: training finished but wrote no checkpoint ($LATEST_FILE is missing)" >&2
  echo "hint: check the training log above; the config may set a different checkpoint.folder" >&2
  exit 1
fi
# `latest` names the newest checkpoint, either as a bare file name or as a path.
LATEST=$(head -n 1 "$LATEST_FILE" | tr -d '[:space:]')
if [[ "$LATEST" != /* && ! -e "$LATEST" ]]; then
  LATEST="$RUN_DIR/checkpoints/$LATEST"
fi

echo "== sample from $LATEST"
"$EMBER" generate --checkpoint "$LATEST" --prompt "The " --max-new-tokens 200 --temperature 0.8 --top-k 40 --seed 1
echo

# The loss curves (train and validation against tokens, tokens/s, learning rate, gradient norm) as a picture.
PLOT="$RUN_DIR/loss.png"
if /usr/bin/python3 scripts/plot_metrics.py "$RUN_DIR" -o "$PLOT" --title "configs/demo.ini" --overwrite 2>/dev/null; then
  echo "== plot of the run's metrics: $PLOT"
else
  echo "warning: could not draw $PLOT (scripts/plot_metrics.py; python3-matplotlib from scripts/setup.sh)" >&2
fi
