#!/usr/bin/env bash
# The tools around a checkpoint: eval (text and JSON, bits per byte = loss / ln 2 for bytes), generate (the same
# seed gives the same text; greedy is deterministic), inspect (metadata and verified datasets).
source "$(dirname "$0")/common.bash"

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

"$EMBER" inspect "$ckpt" | tee inspect.txt
grep -q "^step *30" inspect.txt || fail "inspect step"
grep -q "transformer.h.1.attn.c_attn.weight *\[32, 96\] ok" inspect.txt || fail "inspect dataset line"
echo PASS
