#!/usr/bin/env bash
# scripts/plot_metrics.py on real runs: two runs overlaid (one stopped and resumed), the picture is a PNG of the
# promised size with every step and evaluation read, a step recorded twice is drawn once; bits per byte and task
# accuracy get panels of their own; bad inputs give one error line and a hint and leave an earlier picture as it was.
source "$(dirname "$0")/support/common.bash"
PLOT_PY=(/usr/bin/python3 "$SRC/scripts/plot_metrics.py")

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
train() { "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --training.steps=30 --eval.every=10 \
  --checkpoint.interval=10 "$@" >>train.log 2>&1 || { cat train.log >&2; fail "train $*"; }; }
train --run.dir=run_a
train --run.dir=run_b --stop-after 20
train --run.dir=run_b --resume auto

"${PLOT_PY[@]}" run_a run_b/metrics.jsonl -o loss.png --title "tiny" 2>plot.err || { cat plot.err >&2; fail "plot"; }
cat plot.err
grep -q "run_a/metrics.jsonl: 30 steps, 3 evaluations" plot.err || fail "run_a: not every step and evaluation read"
grep -q "run_b/metrics.jsonl: 30 steps, 3 evaluations" plot.err || fail "run_b: the resumed run is not read whole"
# Steps 11..20 and 30 recorded again (a file joined by hand), step 30 with another loss: 30 steps drawn, each with
# its last record.
cat run_b/metrics.jsonl > joined.jsonl
sed -n '11,20p' run_b/metrics.jsonl >> joined.jsonl
tail -1 run_b/metrics.jsonl | sed 's/"loss":[0-9.e+-]*/"loss":9.5/' >> joined.jsonl
grep -q '"loss":9.5' joined.jsonl || fail "could not write the joined metrics"
"${PLOT_PY[@]}" joined.jsonl -o joined.png 2>joined.err || { cat joined.err >&2; fail "plot of joined metrics"; }
grep -q "joined.jsonl: 30 steps, 3 evaluations, last loss 9.5000" joined.err ||
  { cat joined.err >&2; fail "steps recorded twice are not drawn once with their last record"; }
/usr/bin/python3 - <<'PY' || fail "loss.png is not a drawn 1200x800 picture (1200x1200 with evaluations)"
import json
import matplotlib.image as mpimg
img = mpimg.imread("loss.png")
rows = [json.loads(line) for run in ("run_a", "run_b") for line in open(f"{run}/metrics.jsonl")]
evals = any(r.get("bits_per_byte") is not None or r.get("task_acc_norm") is not None for r in rows)
assert img.shape[:2] == (1200 if evals else 800, 1200), img.shape
assert img[..., :3].std() > 0.05, img[..., :3].std()  # not a blank canvas
PY

# Bits per byte and a task's accuracy: two runs whose tokenizers put 512 and 128 tokens in a step, each evaluated
# every 5 steps and scored on hellaswag every 10, drawn against tokens seen in a third row of panels.
/usr/bin/python3 - <<'PY' || fail "could not write the synthetic evaluation metrics"
import json, os
for run, tokens_per_step, bpb in (("evals_gpt2", 512, 2.4), ("evals_bytes", 128, 2.9)):
    os.makedirs(run)
    with open(f"{run}/metrics.jsonl", "w") as f:
        for step in range(1, 21):
            r = {"step": step, "loss": 5 - 0.1 * step, "tokens_seen": tokens_per_step * step, "lr": 1e-3}
            if step % 5 == 0:
                r.update(val_loss=5 - 0.1 * step, bits_per_byte=bpb - 0.02 * step)
            if step % 10 == 0:
                r.update(task="hellaswag", task_acc=0.25 + 0.001 * step, task_acc_norm=0.26 + 0.002 * step,
                         task_items=64)
            f.write(json.dumps(r) + "\n")
PY
"${PLOT_PY[@]}" evals_gpt2 evals_bytes -o evals.png 2>evals.err || { cat evals.err >&2; fail "plot of evaluations"; }
cat evals.err
for want in "evals_gpt2/metrics.jsonl: 20 steps, 4 evaluations, last loss 3.0000, last bits per byte 2.0000" \
  "evals_bytes/metrics.jsonl: 20 steps, 4 evaluations, last loss 3.0000, last bits per byte 2.5000"; do
  grep -qF "$want, last hellaswag acc_norm 0.3000" evals.err || fail "not read: $want, last hellaswag acc_norm 0.3000"
done
/usr/bin/python3 - <<'PY' || fail "evals.png is not a 1200x1200 picture with its bottom row drawn"
import matplotlib.image as mpimg
img = mpimg.imread("evals.png")
assert img.shape[:2] == (1200, 1200), img.shape
for panel in (img[800:, :600, :3], img[800:, 600:, :3]):  # bits per byte, hellaswag acc_norm
    assert panel.std() > 0.05, panel.std()
PY

# Bad inputs: one error line with a hint, exit 1, the earlier picture untouched.
cp loss.png before.png
expect_error missing_run "run nowhere has no metrics.jsonl" "${PLOT_PY[@]}" nowhere -o loss.png
printf '{"step": "one", "loss": 5.0}\n' > badstep.jsonl
expect_error bad_step "badstep.jsonl line 1: \"step\" is \"one\", not a whole number" "${PLOT_PY[@]}" badstep.jsonl -o loss.png
: > empty.jsonl
expect_error empty_metrics "holds no losses" "${PLOT_PY[@]}" empty.jsonl -o loss.png
{ head -4 evals_gpt2/metrics.jsonl; echo '{"step": 5, "loss": 4.5, "val_loss": 4.5, "bits_per_byte": "low"}'; } \
  >badbpb.jsonl
expect_error bad_bits_per_byte 'badbpb.jsonl line 5: "bits_per_byte" is "low", not a number' \
  "${PLOT_PY[@]}" badbpb.jsonl -o loss.png
printf '{"step": 10, "loss": 4.0, "tokens_seen": 1280, "task": "hellaswag", "task_acc_norm": 1.5}\n' > badacc.jsonl
expect_error bad_task_acc 'badacc.jsonl line 1: "task_acc_norm" is 1.5, not a number in \[0, 1\]' \
  "${PLOT_PY[@]}" badacc.jsonl -o loss.png
expect_error bad_extension "is not a .png, .svg or .pdf" "${PLOT_PY[@]}" run_a -o loss.txt
expect_error missing_folder "does not exist" "${PLOT_PY[@]}" run_a -o no/such/loss.png
expect_error exists "output loss.png exists" "${PLOT_PY[@]}" run_a -o loss.png
cp train.log notes.png
expect_error not_a_picture "notes.png exists and is not a picture" "${PLOT_PY[@]}" run_a -o notes.png --overwrite
mkfifo pipe.png
expect_error special_file "pipe.png exists and is not a regular file" "${PLOT_PY[@]}" run_a -o pipe.png --overwrite
[ -p pipe.png ] || fail "special_file: the FIFO was replaced"
cmp -s loss.png before.png || fail "a failed plot changed the earlier picture"
"${PLOT_PY[@]}" run_a -o loss.png --overwrite 2>over.err || { cat over.err >&2; fail "plot --overwrite"; }
aside=(loss.png.previous-*)
cmp -s "${aside[0]}" before.png || fail "--overwrite did not move the earlier picture aside intact"
[ -z "$(ls -A | grep '\.tmp')" ] || fail "a temporary picture was left behind"

# Damaged lines (the half-written last line of a killed run, a line of another tool, a loss that is text) are skipped
# with one warning naming them, never a traceback; the rest is plotted.
{ head -5 run_a/metrics.jsonl; echo 'not json'; echo '[1, 2]'; echo '{"step": 6, "loss": "high"}'; echo '{"step": 7, "lo'; } \
  > damaged.jsonl
"${PLOT_PY[@]}" damaged.jsonl -o damaged.png 2>damaged.err || { cat damaged.err >&2; fail "plot of damaged metrics"; }
grep -q "damaged.jsonl: skipped 4 lines that are not metrics records (line 6, 7, 8, 9)" damaged.err ||
  { cat damaged.err >&2; fail "damaged lines not skipped with one warning"; }
grep -q "Traceback" damaged.err && fail "a traceback for damaged lines"

# An async run: the center's records hold the losses of the deltas it applied and its evaluations, no "loss".
mpirun -np 3 --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --training.steps=30 \
  --eval.every=10 --training.mode=async --run.dir=run_async >async.log 2>&1 || { cat async.log >&2; fail "async run"; }
"${PLOT_PY[@]}" run_async -o async.png 2>async.err || { cat async.err >&2; fail "plot of an async run"; }
grep -Eq "run_async/metrics.jsonl: [0-9]+ steps, [1-9][0-9]* evaluations, last loss [0-9.]+" async.err ||
  { cat async.err >&2; fail "the async run's losses and evaluations are not plotted"; }
echo "ok: two runs plotted, evaluation panels drawn, damaged lines skipped, an async run plotted, bad inputs refused"
