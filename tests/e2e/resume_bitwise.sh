#!/usr/bin/env bash
# Golden resume test: 20 steps straight equal 10 steps, a stop with a checkpoint, `--resume auto`, and 10 more
# steps, bitwise (every loss compared as its exact printed double), with gradient accumulation on, at matmul
# precision fp32 and bf16.
source "$(dirname "$0")/support/common.bash"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
# Both precisions: bf16 also stores the GEMM inputs and a working copy of the weights in bf16, which the run must
# rebuild from the master weights after every optimizer step and after the resume.
for precision in fp32 bf16; do
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
# The two precisions trained differently (else nothing was rounded).
cmp -s <(losses straight_fp32/metrics.jsonl) <(losses straight_bf16/metrics.jsonl) && fail "bf16 losses equal fp32's"
echo PASS
