#!/usr/bin/env bash
# Async checkpoints follow checkpoint.interval as sync ones do: a center and 2 workers with interval 8 and 40 steps
# write step 8, 16, 24, 32 and 40, each once, and each file holds the step its name says.
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 UCX_TLS=tcp,self

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
must_train 3 a.log --config "$SRC/configs/tiny.ini" --data.dir=data --training.mode=async --training.threads=1 \
  --async.local_steps=4 --eval.every=0 --eval.batches=2 --run.dir=a --training.steps=40 --checkpoint.interval=8 \
  --checkpoint.keep_latest_k=0
grep -q "done at step 40" a.log || { cat a.log >&2; fail "async run did not reach step 40"; }

want="step_00000008.h5 step_00000016.h5 step_00000024.h5 step_00000032.h5 step_00000040.h5"
have=$(cd a/checkpoints && ls step_*.h5 | tr '\n' ' ' | sed 's/ $//')
[ "$have" = "$want" ] || { cat a.log >&2; fail "checkpoints: $have, expected $want"; }
saved=$(grep -oE '^checkpoint [^ ]*step_[0-9]+\.h5 \(' a.log | sed -E 's/.*\/(step_[0-9]+\.h5).*/\1/' | tr '\n' ' ' |
  sed 's/ $//')
[ "$saved" = "$want" ] || { cat a.log >&2; fail "saves logged: $saved, expected each of $want once"; }
"$PYTHON" - a/checkpoints <<'PY' || fail "a checkpoint's step differs from its name"
import h5py, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).glob("step_*.h5")):
    with h5py.File(p, "r") as f:
        assert f.attrs["mode"] == "async" and int(f.attrs["step"]) == int(p.stem[5:]), (p.name, int(f.attrs["step"]))
PY
echo "ok: interval 8, 40 steps: $have, each saved once"
echo PASS
