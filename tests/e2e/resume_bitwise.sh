#!/usr/bin/env bash
# Golden resume test: 20 steps straight equal 10 steps, a stop with a checkpoint, `--resume auto`, and 10 more
# steps, bitwise (every loss compared as its exact printed double), with gradient accumulation on.
source "$(dirname "$0")/common.bash"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
common=(--config "$SRC/configs/tiny.ini" --data.dir=data --training.steps=20 --training.grad_accum_steps=2
        --eval.every=5 --checkpoint.interval=0 --run.log_every=5)
"$EMBER" train "${common[@]}" --run.dir=straight
"$EMBER" train "${common[@]}" --run.dir=split --stop-after 10
[ "$(cat split/checkpoints/latest)" = step_00000010.h5 ] || fail "no checkpoint at step 10"
"$EMBER" train "${common[@]}" --run.dir=split --resume auto

losses straight/metrics.jsonl > straight.txt
losses split/metrics.jsonl > split.txt
[ "$(wc -l < straight.txt)" -eq 20 ] || fail "straight run has $(wc -l < straight.txt) records"
diff straight.txt split.txt || fail "resumed losses differ from the straight run"
cmp <("$EMBER" eval --checkpoint straight/checkpoints/step_00000020.h5 --data data --seq-len 32 --json | sed 's/"checkpoint":"[^"]*",//') \
    <("$EMBER" eval --checkpoint split/checkpoints/step_00000020.h5 --data data --seq-len 32 --json | sed 's/"checkpoint":"[^"]*",//') \
  || fail "final checkpoints evaluate differently"
echo PASS
