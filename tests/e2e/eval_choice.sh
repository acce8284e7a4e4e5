#!/usr/bin/env bash
# Multiple-choice evaluation (`ember eval --task`, docs/eval.md) against a reference written from the task's
# definition and run through transformers on the model `ember export` writes (support/choice_reference.py): 240
# generated items over a BPE model of block_size 64 (contexts up to 120 words, so many are cut from the left; choices
# with and without a leading space; the HellaSwag layout, whose endings are scored after a space). Every item gets
# the same predictions, every choice's log-likelihood agrees within ATOL, and acc and acc_norm are equal; the
# reference with its scored span one token early must fail the same comparison. Then eval.task during training (sync
# at 1 and 2 ranks, and async; the same scores as ember eval's on the final checkpoint), and the bad inputs, each one
# error line naming the line and the field, and a hint.
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
VPY=${EMBER_VENV_PYTHON:?set EMBER_VENV_PYTHON to the venv of scripts/python_env.sh}
REF="$VPY $SRC/tests/e2e/support/choice_reference.py"
# Per choice, |log-likelihood difference| between ember and PyTorch (both fp32): a choice sums at most 64 token
# log-probabilities, each off by a few fp32 ulps of the logits (hf_export_import.sh: within 2e-5 of the largest
# logit, about 10 here), so at most about 64 x 2e-4 = 1.3e-2; seen: 3e-6. 1e-4 leaves 30x the seen while the
# span shifted by one token moves a choice by whole nats.
ATOL=1e-4

mkdir -p corpus
cp -r "$SRC/src/infer" "$SRC/src/data" "$SRC/docs" corpus/
"$EMBER" tokenizer train --input corpus --vocab-size 400 --output tok > tok.log 2>&1 || { cat tok.log >&2; fail "tokenizer train"; }
"$EMBER" prep --input corpus --output data --tokenizer tok --val-fraction 0.1 > prep.log 2>&1 || fail "prep"
"$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run --training.steps=40 --eval.every=0 \
  --model.vocab_size=448 --model.block_size=64 --training.seq_len=64 > train.log 2>&1 || { cat train.log >&2; fail "train"; }
ckpt=run/checkpoints/$(cat run/checkpoints/latest)
"$EMBER" export --checkpoint "$ckpt" --output hf > export.log || fail "export"
$REF make items.jsonl hellaswag.jsonl corpus 240 7 || fail "making the items"

for fmt in choice hellaswag; do
  f=items.jsonl; [ $fmt = hellaswag ] && f=hellaswag.jsonl
  "$EMBER" eval --checkpoint "$ckpt" --task $fmt --data $f --batch-size 7 --json --items-out ember_$fmt.jsonl \
    > ember_$fmt.json 2> eval_$fmt.log || { cat eval_$fmt.log >&2; fail "ember eval --task $fmt"; }
  $REF score hf $f $fmt 64 ref_$fmt.json || fail "the reference on $fmt"
  $REF compare ember_$fmt.jsonl ember_$fmt.json ref_$fmt.json $ATOL || fail "ember and the reference differ ($fmt)"
done
"$PYTHON" - <<'PY' || fail "the items do not exercise the window or the spaces"
import json
items = [json.loads(l) for l in open("ember_choice.jsonl")]
cut = sum(1 for i in items if i["context_tokens"] + max(i["tokens"]) > 65)
assert len(items) == 240 and cut >= 40, (len(items), cut)
a = [json.loads(l) for l in open("ember_choice.jsonl")]
b = [json.loads(l) for l in open("ember_hellaswag.jsonl")]
bare = [json.loads(l) for l in open("items.jsonl")]
# Items whose choices were written without a space: the hellaswag layout scores them after one, other tokens.
differ = sum(1 for x, y, z in zip(a, b, bare) for c, t, u in zip(z["choices"], x["tokens"], y["tokens"])
             if not c.startswith(" ") and t != u)
assert differ >= 20, differ
print(f"{len(items)} items, {cut} cut to the window; {differ} bare choices tokenized otherwise after a space")
PY
# The test can fail: the same reference with its span one token early.
$REF score hf items.jsonl choice 64 shifted.json --shift > /dev/null || fail "the shifted reference"
if $REF compare ember_choice.jsonl ember_choice.json shifted.json $ATOL > shifted.log 2>&1; then
  fail "a reference scoring one token early agreed with ember"
fi
grep -q "items differ" shifted.log || { cat shifted.log >&2; fail "the shifted reference failed otherwise"; }
# --limit scores the first N items, and the pass size changes nothing beyond rounding.
"$EMBER" eval --checkpoint "$ckpt" --task choice --data items.jsonl --batch-size 1 --limit 25 --json \
  --items-out limited.jsonl > limited.json 2> /dev/null || fail "--limit"
"$PYTHON" - <<'PY' || fail "--limit or --batch-size 1 differ"
import json
a = [json.loads(l) for l in open("limited.jsonl")]
b = [json.loads(l) for l in open("ember_choice.jsonl")][:25]
assert len(a) == 25 and json.load(open("limited.json"))["items"] == 25
for x, y in zip(a, b):
    assert x["pred"] == y["pred"] and max(abs(p - q) for p, q in zip(x["logprob"], y["logprob"])) < 1e-4, (x, y)
PY
# --items-out replaces a file of its own only with --overwrite, and never a file of another kind.
few=(--checkpoint "$ckpt" --task choice --data items.jsonl --limit 3)
"$EMBER" eval "${few[@]}" --items-out limited.jsonl > /dev/null 2>&1 && fail "--items-out replaced a file without --overwrite"
"$EMBER" eval "${few[@]}" --items-out limited.jsonl --overwrite > /dev/null 2> overwrite.err ||
  { cat overwrite.err >&2; fail "--items-out --overwrite refused its own file"; }
[ "$(wc -l < limited.jsonl)" -eq 3 ] || fail "--items-out --overwrite did not replace the file"
echo "not ours" > foreign.jsonl
expect_error items_foreign "foreign.jsonl exists and is not a JSONL file" "$EMBER" eval "${few[@]}" \
  --items-out foreign.jsonl --overwrite
[ "$(cat foreign.jsonl)" = "not ours" ] || fail "--items-out changed a file of another kind"

# During training: the records carry the task's acc and acc_norm at every eval.task_every steps and the last, the
# same at 1 and 2 ranks (the ranks score alternate items and add up), and in async mode the center's.
TASK=(--eval.task=choice --eval.task_data=items.jsonl --eval.task_limit=60 --eval.task_every=4)
for np in 1 2; do
  mpirun -np $np --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=task$np \
    --training.steps=8 --eval.every=4 --model.vocab_size=448 --model.block_size=64 --training.seq_len=64 \
    --training.batch_size=$((4 / np)) --training.precision=fp32 "${TASK[@]}" > task$np.log 2>&1 ||
    { cat task$np.log >&2; fail "training with eval.task at $np rank(s)"; }
done
must_train 2 task_async.log --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=task_async \
  --training.mode=async --training.steps=8 --async.local_steps=2 --eval.every=4 --model.vocab_size=448 \
  --model.block_size=64 --training.seq_len=64 "${TASK[@]}"
"$PYTHON" - <<'PY' || fail "the task's records"
import json
def recs(run):
    return [json.loads(l) for l in open(f"{run}/metrics.jsonl") if "task_acc" in l]
one, two, center = recs("task1"), recs("task2"), recs("task_async")
assert [r["step"] for r in one] == [4, 8] and [r["step"] for r in two] == [4, 8], (one, two)
for a, b in zip(one, two):
    assert a["task"] == "choice" and a["task_items"] == b["task_items"] == 60, (a, b)
    assert 0 <= a["task_acc"] <= 1 and abs(a["task_acc"] - b["task_acc"]) <= 1 / 60 + 1e-9, (a, b)
assert center and center[-1]["step"] == 8 and center[-1]["task_items"] == 60, center
print("task records:", [(r["step"], r["task_acc"], r["task_acc_norm"]) for r in one])
PY
# Training scores with its GPT (a row per choice), ember eval with a KV cache (each context once): the same numbers.
"$EMBER" eval --checkpoint task1/checkpoints/step_00000008.h5 --task choice --data items.jsonl --limit 60 --json \
  > task1_eval.json 2> /dev/null || fail "ember eval on the task run's checkpoint"
"$PYTHON" - <<'PY' || fail "training's task scores differ from ember eval's"
import json
last = [json.loads(l) for l in open("task1/metrics.jsonl") if "task_acc" in l][-1]
ev = json.load(open("task1_eval.json"))
assert (last["task_acc"], last["task_acc_norm"]) == (ev["acc"], ev["acc_norm"]), (last, ev)
PY

# Bad input: one error line naming the line and the field, a hint, a non-zero exit.
printf '{"context": "a b", "choices": [" c", " d"], "answer": 1}\n\n{"context": "x", \n' > malformed.jsonl
printf '{"context": "a b", "choices": [" c", " d"]}\n' > missing.jsonl
printf '{"ctx": "a b", "endings": ["c", "d"], "label": 2}\n' > range.jsonl
printf '{"ctx": "a b", "endings": [], "label": 0}\n' > no_endings.jsonl
printf '{"ctx": "a b", "endings": ["c", ""], "label": 0}\n' > empty_ending.jsonl
printf '{"ctx": "a b", "endings": ["c", 4], "label": 0}\n' > typed.jsonl
: > empty.jsonl
E=("$EMBER" eval --checkpoint "$ckpt")
expect_error malformed 'task file malformed.jsonl line 3: not valid JSON' "${E[@]}" --task choice --data malformed.jsonl
expect_error missing 'line 1: no field "answer"' "${E[@]}" --task choice --data missing.jsonl
expect_error range 'line 1: "label" is 2, not an index into the 2 endings' "${E[@]}" --task hellaswag --data range.jsonl
expect_error no_endings 'line 1: "endings" is empty' "${E[@]}" --task hellaswag --data no_endings.jsonl
expect_error empty_ending 'line 1: "endings\[1\]" is empty' "${E[@]}" --task hellaswag --data empty_ending.jsonl
expect_error typed 'line 1: "endings\[1\]" is not a string' "${E[@]}" --task hellaswag --data typed.jsonl
expect_error empty 'task file empty.jsonl holds no items' "${E[@]}" --task choice --data empty.jsonl
expect_error other_format 'line 1: no field "ctx": this is a --task choice item' "${E[@]}" --task hellaswag --data items.jsonl
expect_error no_task '--task nope is not a task' "${E[@]}" --task nope --data items.jsonl
expect_error train_bad_task 'line 1: no field "answer"' "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data \
  --run.dir=bad_task --model.vocab_size=448 --eval.task=choice --eval.task_data=missing.jsonl
[ ! -e bad_task/metrics.jsonl ] || fail "a run with a bad task file wrote metrics"
# Async: only the center reads the task file; its error reaches every rank, and all of them exit.
mpi_train 3 bad_task_async.log --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=bad_task_async \
  --training.mode=async --training.steps=4 --model.vocab_size=448 --eval.task=choice --eval.task_data=missing.jsonl &&
  fail "async training with a bad task file succeeded"
for r in 0 1 2; do  # not anchored: mpirun's 1024-byte chunks may put a line after part of another (run_folder_lock)
  grep -q "\[rank $r\] error: .*line 1: no field \"answer\"" bad_task_async.log ||
    { cat bad_task_async.log >&2; fail "async: rank $r did not report the task file's error"; }
done
grep -q "hint: " bad_task_async.log || fail "async: no hint for the task file's error"
[ ! -e bad_task_async/metrics.jsonl ] || fail "an async run with a bad task file wrote metrics"
expect_error train_no_data 'eval.task' "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data \
  --run.dir=bad_task --model.vocab_size=448 --eval.task=hellaswag
echo PASS
