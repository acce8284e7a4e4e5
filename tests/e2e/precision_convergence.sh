#!/usr/bin/env bash
# int8 and fp8 training against bf16 at equal tokens, in final validation loss, at the smallest size that trains in
# seconds: a 0.11 M-parameter byte-level model (configs/demo.ini with 2 layers, n_embd 64, 2 heads, T = 64; batch 16)
# on the demo's corpus, 300 steps, seeds 1..3, one process of one thread each (so every number repeats exactly).
# Criteria, on the means over the seeds: int8 (with its weight gradients in int8, the default, and in bf16) at most +1%
# above bf16, fp8 at most +2%.
# Why fp8's bound is wider than the +0.5% aimed at: measured on 2026-11-29 over seeds 1..9 here, int8 follows bf16's
# trajectory closely (per-seed gap -0.17% to +0.33%, mean +0.02%), while fp8's coarser rounding makes its run diverge
# from bf16's as another seed's would (per-seed gap -2.2% to +0.8%, sd 0.85 points, mean +0.04%): the mean of three
# seeds then has an sd near 0.7 points, so +0.5% could not tell a good scheme from noise, and +2% sits about 3 sd
# away. What the bound guards against fails it clearly: fp8 without its per-tensor scaling
# (training.fp8_scaling = false: the values cast into e4m3 and e5m2 as they are, so small weights and most output
# gradients fall among the subnormals or to zero) gave +23% to +30%; its seeds 1..2 must fail the fp8 bound and end
# worse than scaled fp8 on both. int8's own weakened variants (gradients rounded to nearest, one scale per tensor for
# gradients or activations) are not measurably worse at this size or at 1500 steps (docs/precision.md), so they are
# not run here. Each run takes 10 to 20 s.
source "$(dirname "$0")/support/common.bash"
export OMP_NUM_THREADS=1
SEEDS=3 WEAK_SEEDS=2

prep_demo_corpus demo_data
SMALL=(--config "$SRC/configs/demo.ini" --data.dir=demo_data --training.threads=1 --training.steps=300
       --eval.every=0 --checkpoint.interval=0 --model.n_layer=2 --model.n_embd=64 --model.n_head=2
       --model.block_size=64 --training.seq_len=64)
final_val() {  # final_val LOG: the last validation loss the run printed
  grep "val loss" "$1" | tail -1 | sed 's/.*val loss \([0-9.]*\).*/\1/'
}
run() {  # run NAME SEED ARGS...: one run; prints its final validation loss
  local name=$1 seed=$2
  shift 2
  timeout 600 "$EMBER" train "${SMALL[@]}" "$@" --training.seed="$seed" --run.dir="$name" >"$name.log" 2>&1 ||
    { cat "$name.log" >&2; fail "run $name"; }
  rm -rf "$name"
  final_val "$name.log"
}
: >results.txt
for seed in $(seq 1 $SEEDS); do
  row="$seed"
  for precision in bf16 int8 fp8; do row="$row $(run "$precision$seed" "$seed" --training.precision=$precision)"; done
  row="$row $(run "int8bf16w$seed" "$seed" --training.precision=int8 --training.int8_weight_gradient=false)"
  if ((seed <= WEAK_SEEDS)); then
    row="$row $(run "unscaled$seed" "$seed" --training.precision=fp8 --training.fp8_scaling=false)"
  fi
  echo "$row" | tee -a results.txt
done
grep -q "matmul precision fp8: .* (unscaled: training.fp8_scaling = false)" unscaled1.log ||
  fail "the unscaled run did not say it was unscaled"
grep -q "matmul precision int8: the dense layers' forward, input-gradient and weight-gradient products" int81.log ||
  fail "the int8 run did not say its weight gradients are int8"
grep -q "forward and input-gradient (training.int8_weight_gradient = false)" int8bf16w1.log ||
  fail "the int8 run with bf16 weight gradients did not say so"
"$PYTHON" - results.txt <<'PY' || fail "precision convergence criteria"
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
bf16, int8, fp8, int8b = ([float(r[k]) for r in rows] for k in (1, 2, 3, 4))
weak = [float(r[5]) for r in rows if len(r) > 5]
n, k = len(rows), len(weak)
def gap(v, ref):
    return st.mean(v) / st.mean(ref) - 1
for name, v in (("bf16", bf16), ("int8", int8), ("int8, bf16 weight gradients", int8b), ("fp8", fp8),
                (f"fp8 unscaled ({k} seeds)", weak)):
    print(f"{name:28s} mean {st.mean(v):.4f}  min {min(v):.4f}  max {max(v):.4f}")
checks = [
    (f"int8 vs bf16 over {n} seeds", gap(int8, bf16), "<=", 0.01),
    (f"int8 with bf16 weight gradients vs bf16 over {n} seeds", gap(int8b, bf16), "<=", 0.01),
    (f"fp8 vs bf16 over {n} seeds", gap(fp8, bf16), "<=", 0.02),
    (f"fp8 unscaled vs bf16 over {k} seeds", gap(weak, bf16[:k]), ">", 0.02),
]
ok = True
for what, g, op, bound in checks:
    good = g <= bound if op == "<=" else g > bound
    ok = ok and good
    print(f"{what}: {g:+.2%} (must be {op} {bound:+.0%}) {'ok' if good else 'FAIL'}")
wins = sum(w > f for w, f in zip(weak, fp8))
print(f"fp8 unscaled worse than scaled on {wins} of {k} seeds")
ok = ok and wins == k
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
