#!/usr/bin/env bash
# The tools around a checkpoint: eval (text and JSON, bits per byte = loss / ln 2 for bytes), generate (the same
# seed gives the same text; greedy is deterministic), inspect (metadata and verified datasets); --device: the
# device line goes to stderr (stdout stays the product), bad values and an unavailable cuda are refused.
source "$(dirname "$0")/support/common.bash"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
"$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run --training.steps=30 --eval.every=0
ckpt=run/checkpoints/$(cat run/checkpoints/latest)
[ "$ckpt" = run/checkpoints/step_00000030.h5 ] || fail "latest is $ckpt"

"$EMBER" eval --checkpoint "$ckpt" --data data --seq-len 32 | tee eval.txt
grep -q "nats/token" eval.txt || fail "eval text output"
"$EMBER" eval --checkpoint "$ckpt" --data data --seq-len 32 --json > eval.json
"$PYTHON" - <<'PY'
import json, math
r = json.load(open("eval.json"))
assert r["step"] == 30 and r["split"] == "val", r
assert abs(r["bits_per_byte"] - r["loss"] / math.log(2)) < 1e-9, r
assert 0 < r["loss"] < math.log(256), r
PY

gen() { "$EMBER" generate --checkpoint "$ckpt" --prompt "int main" --max-new-tokens 40 "$@"; }
gen --seed 1 --temperature 0.8 --top-k 20 > a.txt
gen --seed 1 --temperature 0.8 --top-k 20 > b.txt
gen --seed 2 --temperature 0.8 --top-k 20 > c.txt
cmp a.txt b.txt || fail "same seed, different text"
cmp -s a.txt c.txt && fail "different seeds gave identical text"
[ "$(head -c 8 a.txt)" = "int main" ] || fail "output does not start with the prompt"
[ "$(wc -c < a.txt)" -ge 40 ] || fail "too little output"
gen --temperature 0 > g1.txt
gen --temperature 0 --seed 99 > g2.txt
cmp g1.txt g2.txt || fail "greedy decoding depends on the seed"
# Past block_size (32 in tiny.ini) generation goes on over the last half of the context.
"$EMBER" generate --checkpoint "$ckpt" --prompt "int main" --temperature 0 --max-new-tokens 150 > long.txt
[ "$(wc -c < long.txt)" -ge 150 ] || fail "generation stopped at the context length"
# bf16 and int8 weights: the same kind of output, and a bad precision is refused naming it.
gen --temperature 0 --precision bf16 > g16.txt
[ "$(head -c 8 g16.txt)" = "int main" ] && [ "$(wc -c < g16.txt)" -ge 40 ] || fail "generate --precision bf16"
gen --temperature 0 --precision int8 > g8.txt
[ "$(head -c 8 g8.txt)" = "int main" ] && [ "$(wc -c < g8.txt)" -ge 40 ] || fail "generate --precision int8"
expect_error precision_bad "--precision fp16 is not a decoding precision" gen --precision fp16
expect_error precision_fp8 "--precision fp8 is not a decoding precision" gen --precision fp8
grep -q '^hint: use fp32, bf16 or int8' precision_bad.err || fail "bad --precision: hint"

# --device: cpu by default; the choice is logged on stderr, so stdout is only the text or the JSON.
gen --seed 1 --temperature 0.8 --top-k 20 --device cpu > d.txt 2> d.err
cmp a.txt d.txt || fail "--device cpu changed the text"
grep -q '^device: cpu (--device cpu)' d.err || { cat d.err >&2; fail "no device line on stderr"; }
"$EMBER" eval --checkpoint "$ckpt" --data data --seq-len 32 --json --device cpu > eval_cpu.json 2> eval_cpu.err
cmp eval.json eval_cpu.json || fail "--device cpu changed eval's JSON"
expect_error device_bad "--device gpu is not a device" gen --device gpu
grep -q '^hint: use one of: cpu, cuda, auto' device_bad.err || fail "bad --device: hint"
# auto: the GPU when there is one (eval then agrees with the CPU to fp32 rounding), else the CPU, saying why.
"$EMBER" eval --checkpoint "$ckpt" --data data --seq-len 32 --json --device auto > eval_auto.json 2> eval_auto.err ||
  { cat eval_auto.err >&2; fail "eval --device auto failed"; }
grep -Eq '^(warning: )?device: ' eval_auto.err || fail "eval --device auto logged no device line"
"$PYTHON" - <<'PY'
import json
a, b = json.load(open("eval.json")), json.load(open("eval_auto.json"))
# fp32 on both devices; a mean of ~10^3 token losses, each after ~10 chained ops: 1e-5 relative.
assert abs(a["loss"] - b["loss"]) <= 1e-5 * a["loss"], (a, b)
PY
if grep -Eq '^(warning: )?device: cpu' eval_auto.err; then
  expect_error device_cuda "--device cuda: " gen --device cuda
  grep -q '^hint: .*--device cpu' device_cuda.err || fail "--device cuda without a GPU: hint does not say --device cpu"
else
  gen --temperature 0 --device cuda > g_cuda.txt || fail "generate --device cuda failed"
  [ "$(head -c 8 g_cuda.txt)" = "int main" ] || fail "generate on the GPU: output does not start with the prompt"
fi

"$EMBER" inspect "$ckpt" | tee inspect.txt
grep -q "^step *30" inspect.txt || fail "inspect step"
grep -q "transformer.h.1.attn.c_attn.weight *\[32, 96\] ok" inspect.txt || fail "inspect dataset line"
echo PASS
