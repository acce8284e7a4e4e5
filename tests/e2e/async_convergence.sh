#!/usr/bin/env bash
# Async convergence: the demo model (configs/demo.ini, 0.84 M parameters, batch 16 per worker) on the demo's corpus
# (this checkout's text and the system's licence texts, staged as scripts/run.sh stages it), 300 sync-equivalent
# steps. The async run (center + 2 workers, the [async] defaults) is compared with sync all-reduce over 2 ranks on the
# same data and total tokens, in final validation loss. Async runs are not bitwise reproducible (message order depends
# on timing), so the criterion is on the means over seeds 1..5: async at most +3% above sync. The gap is noisy: one
# seed's async runs alone spread over 3 points (seed 4: 2.4487 to 2.5245). Measured on 2026-11-28, 12 async runs of
# seeds 1..5 against the same seeds' sync runs: mean +1.8%, per run from +0.1% to +4.3%, sd about 1.1 points, so a
# 5-seed mean has an sd near 0.5 points and lands above +3% about once in 250 runs; the build before workers could be
# dropped gave the same (5 runs, +1.8%). (15 other seeds on 2026-11-27: mean +1.06%.) What the bound guards against
# fails it clearly: the defaults before the workers' beta1 went to 0.8 gave +4.1% on this corpus, and no error
# feedback +16% to +29%.
# Error feedback: async runs of seeds 1..2 with async.error_feedback = false (what the 1-bit messages lost is dropped,
# both ways) must fail that criterion (mean more than +3% above the same seeds' sync) and end worse than with feedback
# on both seeds (measured +15.8% and +28.5%).
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
SEEDS=5 FEEDBACK_SEEDS=2

mkdir -p corpus/project corpus/licenses
for item in README.md docs src configs scripts; do cp -R "$SRC/$item" corpus/project/; done
cp -RL /usr/share/common-licenses/. corpus/licenses/ 2>/dev/null || true
"$EMBER" prep --input corpus --output demo_data --tokenizer bytes --val-fraction 0.05 >/dev/null
DEMO=(--config "$SRC/configs/demo.ini" --data.dir=demo_data --training.threads=1 --training.steps=300
      --eval.every=0 --checkpoint.interval=0)
final_val() {  # final_val LOG: the last validation loss the run printed
  grep "val loss" "$1" | tail -1 | sed 's/.*val loss \([0-9.]*\).*/\1/'
}
run() {  # run NAME NP SEED ARGS...: one run; its log is NAME.log
  local name=$1 np=$2 seed=$3
  shift 3
  timeout 600 mpirun -np "$np" --oversubscribe "$EMBER" train "$@" --training.seed="$seed" --run.dir="$name" \
    >"$name.log" 2>&1 || { cat "$name.log" >&2; fail "run $name"; }
  rm -rf "$name"
}
: >results.txt
: >feedback.txt
for seed in $(seq 1 $SEEDS); do
  run "sync$seed" 2 "$seed" "${DEMO[@]}"
  run "async$seed" 3 "$seed" "${DEMO[@]}" --training.mode=async
  echo "$seed $(final_val "sync$seed.log") $(final_val "async$seed.log")" | tee -a results.txt
  if ((seed <= FEEDBACK_SEEDS)); then
    run "noef$seed" 3 "$seed" "${DEMO[@]}" --training.mode=async --async.error_feedback=false
    echo "$seed $(final_val "noef$seed.log")" | tee -a feedback.txt
  fi
done
"$PYTHON" - results.txt feedback.txt <<'PY' || fail "async convergence criteria"
import statistics as st, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1])]
noef = [float(l.split()[1]) for l in open(sys.argv[2])]
sync, ef = [r[1] for r in rows], [r[2] for r in rows]
k = len(noef)
def show(name, v):
    print(f"{name:34s} mean {st.mean(v):.4f}  sd {st.stdev(v):.4f}  min {min(v):.4f}  max {max(v):.4f}")
show("sync all-reduce (2 ranks)", sync)
show("async, the defaults", ef)
show(f"async, no error feedback ({k} seeds)", noef)
gaps = [a / s - 1 for s, a in zip(sync, ef)]
gap = st.mean(ef) / st.mean(sync) - 1
gap_noef = st.mean(noef) / st.mean(sync[:k]) - 1
wins = sum(n > e for n, e in zip(noef, ef))
print(f"async vs sync over {len(rows)} seeds: {gap:+.2%} (must be <= +3%); per seed {min(gaps):+.1%} to "
      f"{max(gaps):+.1%}")
print(f"no error feedback vs sync over {k} seeds: {gap_noef:+.2%} (must be > +3%), worse than feedback on {wins} of {k}")
ok = gap <= 0.03 and gap_noef > 0.03 and wins == k
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
