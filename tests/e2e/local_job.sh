#!/usr/bin/env bash
# jobs/local-cpu.sh runs as shipped under mpirun: a first call trains and checkpoints, a second call with more
# steps resumes from `latest` instead of starting over.
source "$(dirname "$0")/support/common.bash"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
export EMBER CONFIG="$SRC/configs/tiny.ini" DATA_DIR=data RUN_DIR=run THREADS=1
bash "$SRC/jobs/local-cpu.sh" --training.steps=10 --eval.every=0
[ "$(cat run/checkpoints/latest)" = step_00000010.h5 ] || fail "first call did not checkpoint step 10"
bash "$SRC/jobs/local-cpu.sh" --training.steps=15 --eval.every=0 | tee second.log
grep -q "resumed from .*step_00000010.h5 at step 10" second.log || fail "second call did not resume"
[ "$(cat run/checkpoints/latest)" = step_00000015.h5 ] || fail "second call did not reach step 15"
echo PASS
