#!/usr/bin/env bash
# Time to loss across hosts (docs/BENCHMARKS.md, "Time to loss across hosts"): on the emulated cluster
# (scripts/cluster/), sync all-reduce over 4 hosts against async with 4 single-rank workers and async with 2 workers
# of 2 ranks, with the links shaped so that one step's all-reduce takes RATIO times one step's compute, as for
# RTX 4090 boxes training GPT-2 124M over 1 Gbit/s (RATIO 5.03) and 10 Gbit/s (0.503). Reports each run's
# wall-clock time to reach sync's final validation loss, tokens/s, the workers' busy share and the bytes that crossed
# one worker host's link, and writes the loss-against-time plot. Needs root (network namespaces).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment; EMBER_BUILD_DIR too): model config, sync steps, async local steps, evaluation interval, the
# comm/compute ratios to emulate (name:ratio), the async runs' step allowance over sync's (to reach its loss), plot.
CONFIG=$([[ -n "${BENCH_CONFIG:-}" ]] && from_caller "$BENCH_CONFIG" || echo "$ROOT/configs/demo.ini")
STEPS=${BENCH_STEPS:-200}
LOCAL_STEPS=${BENCH_LOCAL_STEPS:-10}
EVAL_EVERY=${BENCH_EVAL_EVERY:-10}
RATIOS=${BENCH_RATIOS:-"1gbit:5.03 10gbit:0.503"}
EXTRA_PERCENT=${BENCH_ASYNC_EXTRA:-50}
PLOT=$([[ -n "${BENCH_PLOT:-}" ]] && from_caller "$BENCH_PLOT" || echo "$ROOT/docs/cluster_time_to_loss.png")
PYTHON=${PYTHON:-$([[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3)}
NAME=${BENCH_CLUSTER:-ebench}
SUBNET=${BENCH_SUBNET:-10.77.250}

for knob in BENCH_STEPS="$STEPS" BENCH_LOCAL_STEPS="$LOCAL_STEPS" BENCH_EVAL_EVERY="$EVAL_EVERY" \
            BENCH_ASYNC_EXTRA="$EXTRA_PERCENT"; do
  [[ "${knob#*=}" =~ ^[0-9]+$ ]] || die "${knob%%=*}='${knob#*=}' is not a whole number" "e.g. BENCH_STEPS=200"
done
for r in $RATIOS; do
  [[ "$r" =~ ^[a-z0-9]+:[0-9.]+$ ]] || die "BENCH_RATIOS holds '$r', not NAME:RATIO" 'e.g. BENCH_RATIOS="1gbit:5.03"'
done
[[ $(id -u) -eq 0 ]] || die "the emulated cluster needs root" "run as root (network namespaces, veth links, tc)"
[[ -f "$CONFIG" ]] || die "config $CONFIG does not exist" "set BENCH_CONFIG to an INI file"
build_targets ember
EMBER=$(built ember)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 EMBER_CLUSTER=$NAME
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ember-bench-cluster.XXXXXX")
CLUSTER=("$ROOT/scripts/cluster/cluster.sh" --name "$NAME")
MPIRUN=("$ROOT/scripts/cluster/mpirun.sh" --name "$NAME")
trap '"${CLUSTER[@]}" down >/dev/null 2>&1 || true' EXIT
echo "work folder: $WORK"

"$EMBER" prep --input "$ROOT/src" --output "$WORK/data" --val-fraction 0.1 >"$WORK/prep.log" 2>&1 ||
  { cat "$WORK/prep.log" >&2; die "prep failed" "see the log above"; }
common=(train --config "$CONFIG" --data.dir="$WORK/data" --training.threads=1 --eval.every="$EVAL_EVERY"
        --eval.batches=8 --checkpoint.interval=0 --run.log_every=50)
link_bytes() {
  ip -s -j link show "$NAME-v$1" | "$PYTHON" -c 'import json, sys
s = json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["bytes"] + s["tx"]["bytes"])'
}
# run LABEL HOSTS MPIRUN-OPTIONS... -- EMBER-OPTIONS...: one job; records its wall time and host 1's link bytes.
run() {
  local label=$1 hosts=$2
  shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  local before t0 t1
  before=$(link_bytes 1)
  t0=$(date +%s.%N)
  "${MPIRUN[@]}" --hosts "$hosts" "${opts[@]}" -- "$EMBER" "${common[@]}" --run.dir="$WORK/$label" "$@" \
    >"$WORK/$label.log" 2>&1 || { tail -30 "$WORK/$label.log" >&2; die "run $label failed" "see $WORK/$label.log"; }
  t1=$(date +%s.%N)
  echo "{\"wall_s\": $("$PYTHON" -c "print($t1 - $t0)"), \"link1_bytes\": $(($(link_bytes 1) - before))}" \
    >"$WORK/$label.json"
  echo "  $label: $(grep -o 'done at step [0-9]*' "$WORK/$label.log") in $("$PYTHON" -c "print(round($t1 - $t0, 1))") s"
}

# 1. One sync step's compute on this machine with 4 ranks (unshaped links): ms_per_step - comm_exposed_ms.
"${CLUSTER[@]}" up 5 --subnet "$SUBNET" --rate none >/dev/null
echo "calibration: sync over 4 unshaped hosts"
run calib 4 --ranks-per-host 1 -- --training.steps=40 --eval.every=0 --checkpoint.interval=40
read -r compute_ms grad_bytes < <("$PYTHON" - "$WORK/calib" <<'PY'
import json, statistics, sys
import h5py
d = sys.argv[1]
recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")][10:]
compute = statistics.median(r["ms_per_step"] - r["comm_exposed_ms"] for r in recs)
sizes = []
with h5py.File(f"{d}/checkpoints/step_00000040.h5", "r") as f:
    f["model"].visititems(lambda name, obj: sizes.append(obj.size) if isinstance(obj, h5py.Dataset) else None)
n = sum(sizes)
# A ring all-reduce of fp32 gradients over 4 hosts sends (and receives) 2 (N - 1) / N of them on each host's link.
print(f"{compute:.3f} {int(2 * 3 / 4 * 4 * n)}")
PY
)
echo "compute per step: $compute_ms ms; all-reduce bytes per host per step: $grad_bytes"

# 2. For each ratio: shape every link so that one all-reduce takes ratio x compute, then the three runs.
for entry in $RATIOS; do
  label=${entry%%:*} ratio=${entry#*:}
  # From the bytes a ring all-reduce moves, then corrected twice by what a short sync run measures (Open MPI's
  # all-reduce over shaped TCP takes longer than the bytes alone say).
  rate=$("$PYTHON" -c "print(max(1, round($grad_bytes * 8 / ($ratio * $compute_ms / 1e3) / 1e3)))")
  for pass in 1 2 3; do
    "${CLUSTER[@]}" down >/dev/null
    "${CLUSTER[@]}" up 5 --subnet "$SUBNET" --rate "${rate}kbit" >/dev/null
    ((pass < 3)) || break
    run "$label-probe$pass" 4 --ranks-per-host 1 -- --training.steps=12 --eval.every=0
    rate=$("$PYTHON" - "$WORK/$label-probe$pass" "$rate" "$ratio" "$compute_ms" <<'PY'
import json, statistics, sys
d, rate, ratio, compute = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
comm = statistics.median(r["comm_exposed_ms"] for r in [json.loads(l) for l in open(f"{d}/metrics.jsonl")][3:])
print(max(1, round(rate * comm / (ratio * compute))))
PY
)
  done
  echo "$label equivalent: all-reduce = $ratio x compute: links at ${rate}kbit"
  async_steps=$((STEPS + STEPS * EXTRA_PERCENT / 100))
  run "$label-sync" 4 --ranks-per-host 1 -- --training.steps="$STEPS"
  run "$label-async" 5 --center-host --ranks-per-host 1 -- --training.steps="$async_steps" \
    --training.mode=async --async.local_steps="$LOCAL_STEPS" --async.worker_timeout=600
  run "$label-groups" 3 --center-host --ranks-per-host 2 -- --training.steps="$async_steps" \
    --training.mode=async --async.local_steps="$LOCAL_STEPS" --async.ranks_per_worker=2 --async.worker_timeout=600
  echo "$rate" >"$WORK/$label.rate"
done

# 3. The report and the plot.
"$PYTHON" - "$WORK" "$PLOT" "$compute_ms" "$grad_bytes" $RATIOS <<'PY'
import glob, json, sys
work, plot, compute_ms, grad_bytes, entries = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]

def records(run):
    return [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]

def val_curve(run):
    return [(r["elapsed_s"], r["tokens_seen"], r["val_loss"]) for r in records(run) if "val_loss" in r]

def busy(run, mode):
    if mode == "sync":  # the share of a step not waiting for the all-reduce
        recs = records(run)[5:]
        return 1 - sum(r["comm_exposed_ms"] for r in recs) / sum(r["ms_per_step"] for r in recs)
    shares = []
    for f in sorted(glob.glob(f"{work}/{run}/metrics_rank*.jsonl")):
        recs = [json.loads(l) for l in open(f)]
        shares.append(1 - recs[-1]["blocked_fraction"])
    return min(shares)

curves = {}
print(f"compute per step {compute_ms:.1f} ms; all-reduce {grad_bytes / 1e6:.2f} MB per host per step")
print("| link | run | final val loss | time to sync's final loss | x sync | tokens/s | least busy worker | "
      "bytes over host 1's link |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for entry in entries:
    label = entry.split(":")[0]
    rate = open(f"{work}/{label}.rate").read().strip()
    target = val_curve(f"{label}-sync")[-1][2]
    sync_recs = records(f"{label}-sync")[3:]
    achieved = sorted(r["comm_exposed_ms"] for r in sync_recs)[len(sync_recs) // 2] / compute_ms
    sync_time = None
    for mode in ("sync", "async", "groups"):
        run = f"{label}-{mode}"
        curve = val_curve(run)
        curves[run] = curve
        meta = json.load(open(f"{work}/{run}.json"))
        reach = next((t for t, _, v in curve if v <= target), None)
        if mode == "sync":
            sync_time = reach
        tokens = curve[-1][1] if mode != "sync" else records(run)[-1]["tokens_seen"]
        tps = tokens / curve[-1][0]
        ratio = f"{reach / sync_time:.2f}" if reach is not None else "not reached"
        reach_s = f"{reach:.1f} s" if reach is not None else f"not within {curve[-1][0]:.0f} s"
        print(f"| {label}: {rate} kbit/s, all-reduce {achieved:.2f} x compute | {mode} | {curve[-1][2]:.4f} | {reach_s} | {ratio} | {tps:.0f} | "
              f"{100 * busy(run, 'sync' if mode == 'sync' else 'async'):.0f} % | {meta['link1_bytes'] / 1e6:.1f} MB |")

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, axes = plt.subplots(1, len(entries), figsize=(6 * len(entries), 4), squeeze=False)
for ax, entry in zip(axes[0], entries):
    label = entry.split(":")[0]
    for mode in ("sync", "async", "groups"):
        c = curves[f"{label}-{mode}"]
        ax.plot([t for t, _, _ in c], [v for _, _, v in c], label=mode, marker=".")
    ax.axhline(curves[f"{label}-sync"][-1][2], color="grey", linestyle=":", linewidth=0.8)
    ax.set_title(f"{label} equivalent")
    ax.set_xlabel("wall-clock seconds")
    ax.set_ylabel("validation loss")
    ax.legend()
fig.tight_layout()
fig.savefig(plot, dpi=110)
print(f"plot: {plot}")
PY
