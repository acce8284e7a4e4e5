#!/usr/bin/env bash
# Golden resume test: 20 steps straight equal 10 steps, a stop with a checkpoint, `--resume auto`, and 10 more
# steps, bitwise (every loss compared as its exact printed double), with gradient accumulation on, at matmul
# precision fp32, bf16, int8 (whose dithered rounding is keyed by the step, so a resume draws the same) and fp8.
# Then a resume that switches precision: int8's checkpoint goes on in fp32, which the checkpoint and inspect record.
source "$(dirname "$0")/support/common.bash"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
# bf16 also stores the GEMM inputs and a working copy of the weights in bf16, which the run must rebuild from the
# master weights after every optimizer step and after the resume; int8 and fp8 keep their copies of the weights the
# same way.
for precision in fp32 bf16 int8 fp8; do
  common=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.steps=20 --training.grad_accum_steps=2
          --training.precision=$precision --eval.every=5 --checkpoint.interval=0 --run.log_every=5)
  "$EMBER" train "${common[@]}" --run.dir=straight_$precision > straight_$precision.log 2>&1 ||
    { cat straight_$precision.log; fail "$precision: straight run failed"; }
  if [ $precision = bf16 ]; then
    grep -q "parameters + gradients + bf16 weight copy" straight_$precision.log || fail "bf16 run without a weight copy"
  fi
  "$EMBER" train "${common[@]}" --run.dir=split_$precision --stop-after 10
  [ "$(cat split_$precision/checkpoints/latest)" = step_00000010.h5 ] || fail "$precision: no checkpoint at step 10"
  "$EMBER" train "${common[@]}" --run.dir=split_$precision --resume auto

  losses straight_$precision/metrics.jsonl > straight.txt
  losses split_$precision/metrics.jsonl > split.txt
  [ "$(wc -l < straight.txt)" -eq 20 ] || fail "$precision: straight run has $(wc -l < straight.txt) records"
  diff straight.txt split.txt || fail "$precision: resumed losses differ from the straight run"
  cmp <("$EMBER" eval --checkpoint straight_$precision/checkpoints/step_00000020.h5 --data data --seq-len 32 --json | sed 's/"checkpoint":"[^"]*",//') \
      <("$EMBER" eval --checkpoint split_$precision/checkpoints/step_00000020.h5 --data data --seq-len 32 --json | sed 's/"checkpoint":"[^"]*",//') \
    || fail "$precision: final checkpoints evaluate differently"
done
# The precisions trained differently (else nothing was rounded).
for precision in fp32 bf16 int8 fp8; do losses straight_$precision/metrics.jsonl > losses_$precision.txt; done
cmp -s losses_fp32.txt losses_bf16.txt && fail "bf16 losses equal fp32's"
cmp -s losses_fp32.txt losses_int8.txt && fail "int8 losses equal fp32's"
cmp -s losses_bf16.txt losses_fp8.txt && fail "fp8 losses equal bf16's"

# The checkpoint records the precision it was trained in; inspect and h5py read it.
"$EMBER" inspect split_int8/checkpoints/step_00000010.h5 > inspect_int8.txt
grep -q "^precision *int8 (matmul precision, as resolved)" inspect_int8.txt || fail "inspect: no 'precision int8' line"
"$PYTHON" -c "import h5py, sys; sys.exit(h5py.File(sys.argv[1], 'r').attrs['precision'] != 'int8')" \
  split_int8/checkpoints/step_00000010.h5 || fail "h5py: the root attribute precision is not int8"
# Resuming int8's step 10 in fp32: a notice names the switch; steps 11..20 train in fp32 from int8's masters, so
# step 11's loss (the same batch, the same weights) differs from int8's only by the products' rounding: within 1%
# (int8 and fp32 stay within 0.2% of each other on this model, GPTInt8.TracksTheFp32LossCurve).
mkdir -p switch/checkpoints
cp split_int8/checkpoints/step_00000010.h5 switch/checkpoints/
"$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --training.steps=20 --training.grad_accum_steps=2 \
  --training.precision=fp32 --eval.every=5 --checkpoint.interval=0 --run.log_every=5 --run.dir=switch \
  --resume switch/checkpoints/step_00000010.h5 > switch.log 2>&1 || { cat switch.log; fail "switch: resume failed"; }
grep -q "notice: the checkpoint was trained in int8; this run goes on in fp32" switch.log ||
  { cat switch.log; fail "switch: no notice of the precision change"; }
"$EMBER" inspect switch/checkpoints/step_00000020.h5 > inspect_switch.txt
grep -q "^precision *fp32" inspect_switch.txt || fail "switch: not recorded as fp32"
a=$(sed -n 11p losses_int8.txt | cut -d' ' -f2)
b=$(losses switch/metrics.jsonl > losses_switch.txt && head -1 losses_switch.txt | cut -d' ' -f2)
"$PYTHON" -c "import sys; a, b = map(float, sys.argv[1:]); print(f'step 11: int8 {a} fp32 {b}'); sys.exit(a == b or abs(b / a - 1) > 0.01)" "$a" "$b" ||
  fail "switch: step 11's loss $b against int8's $a (must differ, by at most 1%)"
echo PASS
