#!/usr/bin/env bash
# Multiple-choice scoring throughput (docs/BENCHMARKS.md, "HellaSwag-shaped items"): `ember eval --task hellaswag`
# against the reference through transformers (tests/e2e/support/choice_reference.py, which runs an item's endings in
# one forward pass, as llm.c's script does), side by side on the same items: HellaSwag's layout, 4 endings of 1 to 4
# words after contexts of 3 to 120 words. Two models: the demo's (configs/demo.ini, byte-level) and GPT-2 124M's
# shape (a BPE tokenizer of 400 tokens under a 50257-row vocabulary); each a checkpoint after one training step,
# since the weights do not change the work. Both on every core. Prints one table row per model: items/s of each and
# Ember's ratio, and checks that the two agree on every prediction.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment): items per model, the Python with transformers; EMBER_BUILD_DIR.
ITEMS=${BENCH_ITEMS:-200}
ITEMS_124M=${BENCH_ITEMS_124M:-40}
VPY=${BENCH_PYTHON:-$ROOT/.venv/bin/python}
require_positive ITEMS ITEMS_124M
"$VPY" -c 'import transformers' 2>/dev/null ||
  die "$VPY cannot import transformers" "run bash scripts/python_env.sh, or set BENCH_PYTHON to a Python with it"

build_targets ember
EMBER=$(built ember)
REF="$ROOT/tests/e2e/support/choice_reference.py"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
mkdir -p corpus
cp -r "$ROOT/src/infer" "$ROOT/docs" corpus/
"$EMBER" tokenizer train --input corpus --vocab-size 400 --output tok >/dev/null 2>&1 || die "tokenizer train failed"
"$EMBER" prep --input corpus --output bpe --tokenizer tok --val-fraction 0.1 >/dev/null 2>&1 || die "prep failed"
"$EMBER" prep --input corpus --output bytes --val-fraction 0.1 >/dev/null 2>&1 || die "prep failed"

# model NAME LABEL CONFIG DATA ITEMS [overrides]: a one-step checkpoint, its export, N items, both scorers, one row.
model() {
  local name=$1 label=$2 config=$3 data=$4 n=$5
  shift 5
  "$EMBER" train --config "$ROOT/configs/$config" --data.dir="$data" --run.dir="run_$name" --training.steps=1 \
    --training.batch_size=1 --training.seq_len=64 --eval.every=0 --training.precision=fp32 "$@" >"train_$name.log" 2>&1 ||
    die "training the $name model failed (see $WORK/train_$name.log)"
  local ckpt="run_$name/checkpoints/step_00000001.h5"
  "$EMBER" export --checkpoint "$ckpt" --output "hf_$name" >/dev/null || die "export of the $name model failed"
  "$VPY" "$REF" make "items_$name.jsonl" "hella_$name.jsonl" corpus "$n" 11 4
  "$EMBER" eval --checkpoint "$ckpt" --task hellaswag --data "hella_$name.jsonl" --batch-size 16 --json \
    --items-out "ember_$name.jsonl" >"ember_$name.json" 2>/dev/null || die "ember eval failed ($name)"
  local window
  window=$("$VPY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["seq_len"])' "ember_$name.json")
  "$VPY" "$REF" score "hf_$name" "hella_$name.jsonl" hellaswag "$window" "ref_$name.json" >/dev/null
  "$VPY" "$REF" compare "ember_$name.jsonl" "ember_$name.json" "ref_$name.json" 1e-3 >/dev/null ||
    die "ember and the reference disagree on the $name model"
  "$VPY" - "$label" "ember_$name.json" "ref_$name.json" <<'PY'
import json, sys
name, e, r = sys.argv[1], json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
print(f"| {name} | {e['items']} | {e['items_per_s']:.1f} | {r['items_per_s']:.1f} | "
      f"**{e['items_per_s'] / r['items_per_s']:.2f}x** |")
PY
}

echo "HellaSwag-shaped items per second, $(nproc) cores, fp32"
echo "| model | items | Ember | transformers | Ember / transformers |"
echo "|---|---|---|---|---|"
model demo "demo (0.8M, bytes)" demo.ini bytes "$ITEMS"
model 124m "GPT-2 124M shape" gpt2-124m.ini bpe "$ITEMS_124M" --model.vocab_size=50257
echo "$("$VPY" -c 'import torch, transformers; print("torch", torch.__version__, "| transformers", transformers.__version__)')"
