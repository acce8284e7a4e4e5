#!/usr/bin/env bash
# `ember serve` under connection load, for one or more ember binaries side by side (e.g. this build and an older
# one): a burst of 500 clients at once against a queue of 64 (how many got 200, 429, or a reset), and /health beside
# 150 and 300 idle connections (its latency, or no answer within 10 s). Reliability counts, not speed: the client is
# tests/e2e/support/serve_http.py.
#   scripts/bench/serve_load.sh [EMBER_BINARY...]    (default: the ember of EMBER_BUILD_DIR, build)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"
BINS=()
for b in "$@"; do BINS+=("$(realpath "$(from_caller "$b")")"); done
((${#BINS[@]})) || BINS=("$(built ember)")
PY=/usr/bin/python3
CLIENT=$ROOT/tests/e2e/support/serve_http.py
WORK=$(mktemp -d /tmp/ember-serve-load.XXXXXX)
trap 'rm -rf "$WORK"; [ -n "${pid:-}" ] && kill -KILL "$pid" 2>/dev/null || true' EXIT
ulimit -n 4096 2>/dev/null || true
cd "$WORK"
"${BINS[0]}" prep --input "$ROOT/src" --output data --val-fraction 0.1 > /dev/null
"${BINS[0]}" train --config "$ROOT/configs/tiny.ini" --data.dir=data --run.dir=run --training.steps=10 \
  --eval.every=0 > /dev/null
ckpt=run/checkpoints/step_00000010.h5
echo "date: $(date -u +%F), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
for bin in "${BINS[@]}"; do
  echo "== $bin ($(cd "$(dirname "$bin")/.." && git log -1 --format=%h 2>/dev/null || echo '?'))"
  : > serve.err # read by the poll below, perhaps before the server's shell opens it
  "$bin" serve --checkpoint $ckpt --port 0 --max-batch 16 --max-queue 64 > serve.out 2> serve.err &
  pid=$!
  port=""
  for _ in $(seq 200); do
    port=$(sed -n 's|^serve: .* listening on http://127.0.0.1:\([0-9]*\)$|\1|p' serve.err)
    [ -n "$port" ] && break
    sleep 0.05
  done
  [ -n "$port" ] || { cat serve.err >&2; exit 1; }
  "$PY" "$CLIENT" load "$port" 500 2>&1 | grep '^load' || true
  for n in 150 300; do "$PY" "$CLIENT" idle "$port" $n | grep '^idle'; done
  kill -TERM $pid
  for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
  kill -KILL $pid 2>/dev/null || true
  pid=""
done
