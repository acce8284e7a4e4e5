#!/usr/bin/env bash
# All-reduce benchmark (ember's MPI communicator vs raw MPI_Allreduce, 4 KB .. 256 MB at np 2 and 4) and the
# training throughput it leads to (tokens/s and communication time of `ember train` at np 1, 2, 4). Prints a report.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment): bench sizes, rank counts, training steps and warm-up steps left out of means; EMBER_BUILD_DIR.
MAX_BYTES=${BENCH_MAX_BYTES:-268435456}
BENCH_NPS=${BENCH_NPS:-"2 4"}
TRAIN_NPS=${BENCH_TRAIN_NPS:-"1 2 4"}
STEPS=${BENCH_STEPS:-20}
WARMUP=${BENCH_WARMUP:-3}
PYTHON=${PYTHON:-python3}

[[ "$STEPS" =~ ^[0-9]+$ && "$WARMUP" =~ ^[0-9]+$ && "$MAX_BYTES" =~ ^[0-9]+$ ]] ||
  die "BENCH_STEPS, BENCH_WARMUP and BENCH_MAX_BYTES must be non-negative integers" "e.g. BENCH_STEPS=20"
(( STEPS > WARMUP )) || die "BENCH_STEPS=$STEPS leaves no step after BENCH_WARMUP=$WARMUP" "raise BENCH_STEPS"
command -v mpirun >/dev/null || die "mpirun is not on PATH" "run scripts/setup.sh (it installs Open MPI)"
command -v "$PYTHON" >/dev/null || die "$PYTHON is not on PATH" "set PYTHON to a python3 interpreter"

BUILD_HINT="bench_allreduce is part of the test tree: configure with -DEMBER_BUILD_TESTS=ON" \
  build_targets ember bench_allreduce
EMBER=$(built ember)
BENCH=$(built tests/bench/bench_allreduce)
work_folder allreduce

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CORES=$(nproc)
# One OpenMP thread per core across all ranks: more would oversubscribe the cores and time the scheduler instead.
threads_for() { local t=$(( CORES / $1 )); (( t > 0 )) || t=1; echo "$t"; }
relative() { local s="$*"; echo "${s//$ROOT\//}"; }

echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(cpu_model), nproc $CORES, $(mpirun --version 2>/dev/null | head -n 1)"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown) (1/5/15-minute averages before the runs)"
echo

# --- all-reduce: communicator vs raw MPI ---
for np in $BENCH_NPS; do
  cmd=(mpirun -np "$np" --oversubscribe "$BENCH" --max-bytes "$MAX_BYTES")
  echo "## all_reduce at np $np"
  echo "command: $(relative "${cmd[*]}")"
  "${cmd[@]}" || die "bench_allreduce failed at np $np" "rerun the command above by hand"
  echo
done

# --- training tokens/s at np 1, 2, 4 ---
echo "## training tokens/s at np ${TRAIN_NPS// /, }"
prep=("$EMBER" prep --input src --output "$WORK/data")
echo "command: $(relative "${prep[*]}")"
"${prep[@]}" >"$WORK/prep.log" 2>&1 || { cat "$WORK/prep.log" >&2; die "ember prep failed (log above)"; }

# Means over the steps after the warm-up; a field the trainer does not (yet) write prints as n/a.
summarize() {
  "$PYTHON" - "$1" "$WARMUP" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = sorted((r for r in rows if "step" in r), key=lambda r: r["step"])[int(sys.argv[2]):]
def mean(key, fmt):
    vals = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return format(sum(vals) / len(vals), fmt) if vals else "n/a"
print(len(rows), mean("tokens_per_s", ".1f"), mean("ms_per_step", ".1f"), mean("comm_ms", ".2f"),
      mean("comm_exposed_ms", ".2f"))
PY
}

table="| np | threads/rank | steps averaged | tokens/s (global) | ms/step | comm_ms | comm_exposed_ms |
|----|--------------|----------------|-------------------|---------|---------|-----------------|"
for np in $TRAIN_NPS; do
  threads=$(threads_for "$np")
  cmd=(mpirun -np "$np" --oversubscribe -x OMP_NUM_THREADS="$threads" "$EMBER" train --config configs/demo.ini
       --training.steps="$STEPS" --eval.every=0 --checkpoint.interval=0 --run.dir="$WORK/np$np"
       --data.dir="$WORK/data")
  echo "command: $(relative "${cmd[*]}")"
  if ! "${cmd[@]}" >"$WORK/train_np$np.log" 2>&1; then
    tail -n 30 "$WORK/train_np$np.log" >&2
    die "ember train failed at np $np (last lines above)" "rerun the command above by hand"
  fi
  [[ -f "$WORK/np$np/metrics.jsonl" ]] || die "no metrics.jsonl in $WORK/np$np" "check the train log: $WORK/train_np$np.log"
  summary=$(summarize "$WORK/np$np/metrics.jsonl") || die "could not read $WORK/np$np/metrics.jsonl" "see above"
  read -r rows tps ms comm exposed <<<"$summary"
  table+=$'\n'"| $np | $threads | $rows | $tps | $ms | $comm | $exposed |"
done
echo
echo "$table"
echo "(steps 1..$WARMUP left out of the means as warm-up; load after: $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo unknown))"
