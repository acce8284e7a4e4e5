#!/usr/bin/env bash
# Async-mode benchmark (training.mode = async): bytes on the wire per sync against fp32 deltas, worker utilisation
# with and without a slowed worker, validation loss against tokens for sync all-reduce (2 ranks), async (center + 2
# workers) and async with a slowed worker on the same data and tokens, the final-loss gap over several seeds, and a
# Pareto sweep of local steps H and compression (gap against upload bits per parameter per step). Prints a report
# and writes the loss curves and the Pareto plot as PNGs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment; paths relative to the folder the script was started from): EMBER_BUILD_DIR, model config, sync-equivalent steps of the loss runs and of the utilisation
# runs, local steps per sync, evaluation interval (steps), slowdown of the slowed worker, plot path, interpreter.
CONFIG=$([[ -n "${BENCH_CONFIG:-}" ]] && from_caller "$BENCH_CONFIG" || echo "$ROOT/configs/demo.ini")
STEPS=${BENCH_STEPS:-300}
UTIL_STEPS=${BENCH_UTIL_STEPS:-192}
LOCAL_STEPS=${BENCH_LOCAL_STEPS:-10}
SEEDS=${BENCH_SEEDS:-3}
PARETO=${BENCH_PARETO:-1}
PARETO_H=${BENCH_PARETO_H:-4 8 16 32}
EVAL_EVERY=${BENCH_EVAL_EVERY:-25}
SLOWDOWN=${BENCH_SLOWDOWN:-4}
PLOT=$([[ -n "${BENCH_PLOT:-}" ]] && from_caller "$BENCH_PLOT" || echo "$ROOT/docs/async_loss_vs_tokens.png")
PARETO_PLOT=$([[ -n "${BENCH_PARETO_PLOT:-}" ]] && from_caller "$BENCH_PARETO_PLOT" || echo "$ROOT/docs/async_pareto.png")
# Debian's python3-matplotlib is installed for the system interpreter, not for one that happens to come first on PATH.
PYTHON=${PYTHON:-$([[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3)}

for knob in BENCH_STEPS="$STEPS" BENCH_UTIL_STEPS="$UTIL_STEPS" BENCH_LOCAL_STEPS="$LOCAL_STEPS" \
            BENCH_EVAL_EVERY="$EVAL_EVERY" BENCH_SEEDS="$SEEDS"; do
  [[ "${knob#*=}" =~ ^[1-9][0-9]*$ ]] || die "${knob%%=*}='${knob#*=}' is not a positive integer" \
    "e.g. BENCH_STEPS=300 BENCH_UTIL_STEPS=192 BENCH_LOCAL_STEPS=8 BENCH_EVAL_EVERY=25"
done
[[ "$PARETO" == 0 || "$PARETO" == 1 ]] || die "BENCH_PARETO='$PARETO' is neither 0 nor 1" "BENCH_PARETO=0 skips the sweep"
for h in $PARETO_H; do
  [[ "$h" =~ ^[1-9][0-9]*$ ]] || die "BENCH_PARETO_H holds '$h', not a positive integer" "e.g. BENCH_PARETO_H=\"4 8 16 32\""
  # 2 workers share STEPS x 2 batches in rounds of H batches: at least 2 rounds each.
  (( STEPS >= 2 * h )) || die "BENCH_STEPS=$STEPS gives the workers fewer than 2 rounds each at H = $h" \
    "raise BENCH_STEPS to at least $(( 2 * h )) or drop $h from BENCH_PARETO_H"
done
[[ -n "${PARETO_H// /}" || "$PARETO" == 0 ]] || die "BENCH_PARETO_H is empty" "e.g. BENCH_PARETO_H=\"4 8 16 32\""
[[ "$SLOWDOWN" =~ ^[0-9]+([.][0-9]+)?$ ]] && awk -v s="$SLOWDOWN" 'BEGIN { exit !(s > 1) }' ||
  die "BENCH_SLOWDOWN='$SLOWDOWN' is not a number above 1" "e.g. BENCH_SLOWDOWN=4 (worker 1 then trains 4x slower)"
(( STEPS > EVAL_EVERY )) ||
  die "BENCH_STEPS=$STEPS leaves no evaluation before the end at BENCH_EVAL_EVERY=$EVAL_EVERY" \
      "raise BENCH_STEPS or lower BENCH_EVAL_EVERY"
# 3 workers share UTIL_STEPS x 3 batches in rounds of LOCAL_STEPS batches: at least 2 rounds each on average.
(( UTIL_STEPS >= 2 * LOCAL_STEPS )) ||
  die "BENCH_UTIL_STEPS=$UTIL_STEPS gives the workers fewer than 2 rounds each" \
      "raise BENCH_UTIL_STEPS to at least 2 x BENCH_LOCAL_STEPS = $(( 2 * LOCAL_STEPS ))"
[[ -f "$CONFIG" ]] || die "BENCH_CONFIG: $CONFIG does not exist" "name an INI file, e.g. BENCH_CONFIG=configs/tiny.ini"
command -v mpirun >/dev/null || die "mpirun is not on PATH" "run scripts/setup.sh (it installs Open MPI)"
command -v "$PYTHON" >/dev/null || die "$PYTHON is not on PATH" "set PYTHON to a python3 interpreter"

# --- matplotlib for the plot, checked before the runs; installed from Debian when missing, as scripts/setup.sh does ---
if ! "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
  [[ "$PYTHON" == /usr/bin/python3 ]] ||
    die "$PYTHON cannot import matplotlib" \
        "install matplotlib for it, or set PYTHON=/usr/bin/python3 (Debian's python3-matplotlib serves that one)"
  if (( $(id -u) == 0 )); then SUDO=(); elif command -v sudo >/dev/null; then SUDO=(sudo); else
    die "matplotlib is missing, and this script is neither root nor able to use sudo" \
        "as root, run: apt-get update && apt-get install -y --no-install-recommends python3-matplotlib"
  fi
  echo "setup: installing the missing package python3-matplotlib"
  APT_LOG=$(mktemp "${TMPDIR:-/tmp}/ember-async-apt.XXXXXX.log")
  export DEBIAN_FRONTEND=noninteractive
  { ${SUDO[@]+"${SUDO[@]}"} apt-get update -q &&
    ${SUDO[@]+"${SUDO[@]}"} apt-get install -y -q --no-install-recommends python3-matplotlib; } >"$APT_LOG" 2>&1 || {
    tail -n 20 "$APT_LOG" >&2
    die "installing python3-matplotlib failed (last lines above)" "as root: apt-get install python3-matplotlib"
  }
  rm -f "$APT_LOG"
  "$PYTHON" -c 'import matplotlib' 2>/dev/null || die "$PYTHON still cannot import matplotlib after installing it" \
    "check: $PYTHON -c 'import matplotlib'"
fi

# --- build ---
build_targets ember
EMBER=$(built ember)
work_folder async

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
relative() { local s="$*"; s="${s//$ROOT\//}"; echo "${s//$WORK/\$WORK}"; }

echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "machine: $(cpu_model), nproc $(nproc), $(mpirun --version 2>/dev/null | head -n 1)"
echo "load:    $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown) (1/5/15-minute averages before the runs)"
echo "config:  $(relative "$CONFIG"), async.local_steps $LOCAL_STEPS, one thread per rank, seeds 1..$SEEDS"
echo "work:    WORK=$WORK (data, logs and metrics; removed after a successful run)"
echo

# --- corpus: the text scripts/run.sh trains the demo on (this repository's text and the system's licence texts) ---
mkdir -p "$WORK/corpus/project"
for item in README.md docs src configs scripts; do
  [[ -e "$item" ]] && cp -R "$item" "$WORK/corpus/project/"
done
if [[ -d /usr/share/common-licenses ]]; then
  mkdir -p "$WORK/corpus/licenses"
  cp -RL /usr/share/common-licenses/. "$WORK/corpus/licenses/" 2>/dev/null || true
fi
prep=("$EMBER" prep --input "$WORK/corpus" --output "$WORK/data" --tokenizer bytes --val-fraction 0.05)
"${prep[@]}" >"$WORK/prep.log" 2>&1 || { cat "$WORK/prep.log" >&2; die "ember prep failed (log above)"; }
echo "corpus:  $(grep -o 'train [0-9]* tokens.*val [0-9]*' "$WORK/prep.log" || echo '?') (repository text + licences)"
echo

# Analysis of the metrics files: `report.py bytes|util|loss ...` prints one markdown table per measurement.
cat >"$WORK/report.py" <<'PY'
import json, sys

def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]

def workers(run_dir, count):
    return {r: records(f"{run_dir}/metrics_rank{r}.jsonl") for r in range(1, count + 1)}

def center(run_dir):
    recs = records(f"{run_dir}/metrics.jsonl")
    publishes = [r for r in recs if "version" in r]
    evals = [r for r in recs if "val_loss" in r]
    check(publishes, f"{run_dir}/metrics.jsonl holds no published version")
    # versions_per_min is measured from the center's start, so version / rate is its training time so far.
    last = publishes[-1]
    seconds = 60.0 * last["version"] / last["versions_per_min"] if last["versions_per_min"] > 0 else float("nan")
    return publishes, evals, seconds

def check(ok, what):
    if not ok:
        print(f"error: {what}", file=sys.stderr)
        sys.exit(1)

def num(x, digits=0):
    return f"{x:,.{digits}f}"

def groups(args, size):  # LABEL DIR ... given as consecutive arguments, `size` per run
    return [args[i:i + size] for i in range(0, len(args), size)]

def cmd_bytes(args):
    print("| run | syncs | bytes put / sync | fp32 delta | put: x fewer | bytes got / sync | downloads / sync "
          "| put + got / sync | fp32 exchange (2 x delta) | total: x fewer | center's ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, run_dir, count in groups(args, 3):
        ws = workers(run_dir, int(count))
        recs = [r for rs in ws.values() for r in rs]
        n = len(recs)
        put = sum(r["bytes_put"] for r in recs) / n
        got = sum(r["bytes_got"] for r in recs) / n
        fp32 = recs[0]["fp32_delta_bytes"]
        check(all(r["fp32_delta_bytes"] == fp32 for r in recs), f"{run_dir}: workers disagree on fp32_delta_bytes")
        downloads = sum(1 for r in recs if r["downloaded"]) / n
        publishes, _, _ = center(run_dir)
        print(f"| {label} | {n} | {num(put)} | {num(fp32)} | {fp32 / put:.2f} | {num(got)} | {downloads:.2f} | "
              f"{num(put + got)} | {num(2 * fp32)} | {2 * fp32 / (put + got):.2f} | {publishes[-1]['bytes_ratio']:.2f} |")

def cmd_util(args):
    runs = []
    print("| run | worker | rounds | tokens (share) | mean round ms | blocked ms (total) | blocked_fraction "
          "| utilisation |")
    print("|---|---|---|---|---|---|---|---|")
    for label, run_dir, count, slow, wall in groups(args, 5):
        ws = workers(run_dir, int(count))
        publishes, _, seconds = center(run_dir)
        tokens = publishes[-1]["tokens_seen"]
        worker_tokens = {w: sum(r["tokens"] for r in rs) for w, rs in ws.items()}
        check(sum(worker_tokens.values()) == tokens,
              f"{run_dir}: the workers trained {sum(worker_tokens.values())} tokens, the center applied {tokens}")
        for w, rs in ws.items():
            last = rs[-1]
            mark = " (slowed)" if str(w) == slow else ""
            share = 100 * worker_tokens[w] / tokens
            print(f"| {label} | {w}{mark} | {len(rs)} | {num(worker_tokens[w])} ({share:.0f} %) "
                  f"| {num(sum(r['round_ms'] for r in rs) / len(rs))} | {num(sum(r['blocked_ms'] for r in rs), 1)} "
                  f"| {100 * last['blocked_fraction']:.3f} % | {100 * (1 - last['blocked_fraction']):.2f} % |")
        staleness = max(d["staleness"] for p in publishes for d in p["deltas"])
        runs.append((label, tokens, seconds, float(wall), publishes[-1]["version"], staleness))
    print()
    print("| run | tokens | training s (center) | tokens/s | launch-to-exit s | tokens/s over launch-to-exit "
          "| versions | max staleness |")
    print("|---|---|---|---|---|---|---|---|")
    for label, tokens, seconds, wall, versions, staleness in runs:
        print(f"| {label} | {num(tokens)} | {seconds:.1f} | {num(tokens / seconds)} | {wall:.1f} "
              f"| {num(tokens / wall)} | {versions} | {staleness} |")

def final_val(run_dir):
    evals = [r for r in records(f"{run_dir}/metrics.jsonl") if "val_loss" in r]
    check(evals, f"{run_dir}: no validation loss in the metrics")
    return evals[-1]["val_loss"]

def upload(run_dir, count):  # (bits per parameter per local step, up + down x fewer than fp32)
    recs = [r for rs in workers(run_dir, count).values() for r in rs]
    fp32 = recs[0]["fp32_delta_bytes"]
    put, got = sum(r["bytes_put"] for r in recs), sum(r["bytes_got"] for r in recs)
    return 8 * put / (fp32 / 4) / sum(r["local_steps"] for r in recs), 2 * fp32 * len(recs) / (put + got)

def cmd_seeds(args):  # SYNC_PREFIX ASYNC_PREFIX SEEDS: the final losses of runs PREFIX1..PREFIXn
    import statistics as st
    sync_prefix, async_prefix, seeds = args[0], args[1], int(args[2])
    sync = [final_val(f"{sync_prefix}{s}") for s in range(1, seeds + 1)]
    asyn = [final_val(f"{async_prefix}{s}") for s in range(1, seeds + 1)]
    print("| seed | sync val loss | async val loss | async / sync |")
    print("|---|---|---|---|")
    for s, (a, b) in enumerate(zip(sync, asyn), 1):
        print(f"| {s} | {a:.4f} | {b:.4f} | {b / a:.4f} |")
    sd = lambda v: f"{st.stdev(v):.4f}" if len(v) > 1 else "n/a"
    print(f"| mean (sd) | {st.mean(sync):.4f} ({sd(sync)}) | {st.mean(asyn):.4f} ({sd(asyn)}) "
          f"| gap {100 * (st.mean(asyn) / st.mean(sync) - 1):+.2f} % |")

def cmd_pareto(args):  # SYNC_PREFIX SEEDS PLOT then H COMPRESSION PREFIX triples
    import statistics as st
    sync_prefix, seeds, plot = args[0], int(args[1]), args[2]
    sync = st.mean(final_val(f"{sync_prefix}{s}") for s in range(1, seeds + 1))
    rows = []
    print("| H | compression | upload bits / parameter / step | up + down: x fewer than fp32 | mean val loss "
          "| sd | gap vs sync |")
    print("|---|---|---|---|---|---|---|")
    for h, comp, prefix in groups(args[3:], 3):
        vals = [final_val(f"{prefix}{s}") for s in range(1, seeds + 1)]
        bits, ratio = upload(f"{prefix}1", 2)
        gap = 100 * (st.mean(vals) / sync - 1)
        sd = f"{st.stdev(vals):.4f}" if len(vals) > 1 else "n/a"
        print(f"| {h} | {comp} | {bits:.4f} | {ratio:.1f} | {st.mean(vals):.4f} | {sd} | {gap:+.2f} % |")
        rows.append((int(h), comp, bits, gap))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for comp, marker in (("onebit", "o"), ("none", "s")):
        pts = [(b, g, h) for h, c, b, g in rows if c == comp]
        if not pts:
            continue
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, label=f"compression {comp}")
        for b, g, h in pts:
            ax.annotate(f"H={h}", (b, g), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("upload bits per parameter per worker step")
    ax.set_ylabel("final val loss gap vs sync (%)")
    ax.axhline(0, color="grey", lw=0.8)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot, dpi=100)
    print(f"plot: {plot}")

def cmd_loss(args):
    sync_dir, async_dir, slow_dir, sync_wall, async_wall, plot, title = args
    sync = [r for r in records(f"{sync_dir}/metrics.jsonl") if "val_loss" in r]
    slow = [r for r in records(f"{slow_dir}/metrics.jsonl") if "val_loss" in r]
    _, evals, async_seconds = center(async_dir)
    check(sync and evals, "no validation losses in the metrics (eval.every?)")
    check(sync[-1]["tokens_seen"] == evals[-1]["tokens_seen"],
          f"sync ended at {sync[-1]['tokens_seen']} tokens, async at {evals[-1]['tokens_seen']}")
    total = sync[-1]["tokens_seen"]
    print("| share of tokens | sync tokens | sync val loss | async tokens | async val loss | async / sync "
          "| slowed: tokens | slowed: val loss | slowed / sync |")
    print("|---|---|---|---|---|---|---|---|---|")
    for share in (0.25, 0.5, 0.75, 1.0):
        s = min(sync, key=lambda r: abs(r["tokens_seen"] - share * total))
        a = min(evals, key=lambda r: abs(r["tokens_seen"] - share * total))
        w = min(slow, key=lambda r: abs(r["tokens_seen"] - share * total))
        print(f"| {100 * share:.0f} % | {num(s['tokens_seen'])} | {s['val_loss']:.4f} | {num(a['tokens_seen'])} "
              f"| {a['val_loss']:.4f} | {a['val_loss'] / s['val_loss']:.4f} | {num(w['tokens_seen'])} "
              f"| {w['val_loss']:.4f} | {w['val_loss'] / s['val_loss']:.4f} |")
    print()
    print(f"final validation loss after {num(total)} tokens: sync {sync[-1]['val_loss']:.4f}, "
          f"async {evals[-1]['val_loss']:.4f}, async / sync = {evals[-1]['val_loss'] / sync[-1]['val_loss']:.4f}")
    print(f"launch-to-exit: sync {float(sync_wall):.1f} s ({num(total / float(sync_wall))} tokens/s), "
          f"async {float(async_wall):.1f} s ({num(total / float(async_wall))} tokens/s; "
          f"center's training time {async_seconds:.1f} s)")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    ax.plot([r["tokens_seen"] / 1e6 for r in sync], [r["val_loss"] for r in sync], "o-", ms=3,
            label="sync all-reduce, 2 ranks")
    ax.plot([r["tokens_seen"] / 1e6 for r in evals], [r["val_loss"] for r in evals], "s-", ms=3,
            label="async 1-bit, center + 2 workers")
    ax.plot([r["tokens_seen"] / 1e6 for r in slow], [r["val_loss"] for r in slow], "^-", ms=3,
            label="async 1-bit, center + 2 workers, worker 1 slowed")
    ax.set_xlabel("tokens (millions)")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(plot, dpi=100)
    print(f"plot: {plot}")

{"bytes": cmd_bytes, "util": cmd_util, "loss": cmd_loss, "seeds": cmd_seeds,
 "pareto": cmd_pareto}[sys.argv[1]](sys.argv[2:])
PY

# run NAME NP STEPS ARGS...: one `ember train` of STEPS steps under mpirun into $WORK/NAME, timed from launch to exit
# (seconds in WALL).
COMMON=(--config "$CONFIG" --data.dir="$WORK/data" --training.threads=1 --checkpoint.interval=0)
WALL=0
run() {
  local name=$1 np=$2 steps=$3; shift 3
  local cmd=(mpirun -np "$np" --oversubscribe -x OMP_NUM_THREADS=1 "$EMBER" train "${COMMON[@]}"
             --training.steps="$steps" "$@" --run.dir="$WORK/$name")
  echo "command: $(relative "${cmd[*]}")"
  local t0; t0=$(date +%s.%N)
  if ! "${cmd[@]}" >"$WORK/$name.log" 2>&1; then
    tail -n 30 "$WORK/$name.log" >&2
    die "ember train failed in the '$name' run (last lines above)" "rerun the command above by hand"
  fi
  WALL=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  grep -q "done at step $steps " "$WORK/$name.log" ||
    die "the '$name' run ended without reaching step $steps" "see $WORK/$name.log"
}
center_line() { grep -o "center: .*fp32 deltas" "$WORK/$1.log" | tail -n 1; }
ASYNC=(--training.mode=async --async.local_steps="$LOCAL_STEPS")

# --- utilisation: center + 3 workers, as they are and with worker 1 slowed ---
echo "## Async center + 3 workers (np 4), $UTIL_STEPS steps, no evaluation: as they are, then worker 1" \
     "${SLOWDOWN}x slower"
run util 4 "$UTIL_STEPS" "${ASYNC[@]}" --eval.every=0
UTIL_WALL=$WALL
echo "  $(center_line util)"
run slow 4 "$UTIL_STEPS" "${ASYNC[@]}" --eval.every=0 --async.test_slow_worker=1 --async.test_slowdown="$SLOWDOWN"
SLOW_WALL=$WALL
echo "  $(center_line slow)"
echo

# --- loss against tokens: sync all-reduce on 2 ranks vs async center + 2 workers, seeds 1..SEEDS (the curves and
# the bytes table use seed 1), and async with worker 1 slowed (seed 1) ---
echo "## Loss against tokens: sync all-reduce (np 2), async center + 2 workers (np 3) and async with worker 1" \
     "${SLOWDOWN}x slower, $STEPS steps, eval every $EVAL_EVERY, seeds 1..$SEEDS"
for seed in $(seq 1 "$SEEDS"); do
  run "sync$seed" 2 "$STEPS" --training.mode=sync --eval.every="$EVAL_EVERY" --training.seed="$seed"
  if (( seed == 1 )); then SYNC_WALL=$WALL; fi
  run "async$seed" 3 "$STEPS" "${ASYNC[@]}" --eval.every="$EVAL_EVERY" --training.seed="$seed"
  if (( seed == 1 )); then ASYNC_WALL=$WALL; fi
  echo "  $(center_line "async$seed")"
done
run slowloss 3 "$STEPS" "${ASYNC[@]}" --eval.every="$EVAL_EVERY" --training.seed=1 --async.test_slow_worker=1 \
  --async.test_slowdown="$SLOWDOWN"
echo

# --- Pareto: local steps H x compression, seeds 1..SEEDS each, against the sync runs above ---
PARETO_ARGS=()
if (( PARETO == 1 )); then
  echo "## Pareto sweep: H in {$PARETO_H} x compression {onebit, none}, async center + 2 workers, seeds 1..$SEEDS"
  for h in $PARETO_H; do
    for comp in onebit none; do
      for seed in $(seq 1 "$SEEDS"); do
        run "p_${h}_${comp}_$seed" 3 "$STEPS" --training.mode=async --async.local_steps="$h" \
          --async.compression="$comp" --eval.every=0 --training.seed="$seed"
      done
      PARETO_ARGS+=("$h" "$comp" "$WORK/p_${h}_${comp}_")
    done
  done
  echo
fi

echo "### 1. Bytes on the wire per sync (workers' metrics, every round of every worker)"
"$PYTHON" "$WORK/report.py" bytes "np 4, 3 workers" "$WORK/util" 3 "np 4, worker 1 slowed" "$WORK/slow" 3 \
  "np 3, 2 workers" "$WORK/async1" 2 || die "could not summarize the workers' metrics" "see the error above"
echo "(put: the 1-bit delta with its fp32 block scales and slot header; got: at most one 1-bit download per round"
echo " plus the window header and download record; fp32 exchange: an fp32 delta up and fp32 parameters down)"
echo

echo "### 2. Worker utilisation (utilisation = 1 - blocked_fraction, blocked = inside MPI calls on the window)"
"$PYTHON" "$WORK/report.py" util "as they are" "$WORK/util" 3 0 "$UTIL_WALL" \
  "worker 1 ${SLOWDOWN}x slower" "$WORK/slow" 3 1 "$SLOW_WALL" ||
  die "could not summarize the utilisation runs" "see the error above"
echo

echo "### 3. Validation loss against tokens"
mkdir -p "$(dirname "$PLOT")"
"$PYTHON" "$WORK/report.py" loss "$WORK/sync1" "$WORK/async1" "$WORK/slowloss" "$SYNC_WALL" "$ASYNC_WALL" "$PLOT" \
  "$(basename "$CONFIG"), $STEPS steps, async.local_steps $LOCAL_STEPS" ||
  die "could not summarize the loss runs or write $PLOT" "see the error above"
echo

echo "### 4. Final validation loss over seeds 1..$SEEDS"
"$PYTHON" "$WORK/report.py" seeds "$WORK/sync" "$WORK/async" "$SEEDS" ||
  die "could not summarize the seeds" "see the error above"
echo

if (( PARETO == 1 )); then
  echo "### 5. Pareto: gap against upload bits per parameter per worker step"
  mkdir -p "$(dirname "$PARETO_PLOT")"
  "$PYTHON" "$WORK/report.py" pareto "$WORK/sync" "$SEEDS" "$PARETO_PLOT" "${PARETO_ARGS[@]}" ||
    die "could not summarize the Pareto sweep or write $PARETO_PLOT" "see the error above"
  echo
fi
echo "(load after: $(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo unknown))"
