#!/usr/bin/env bash
# Non-power-of-two world: `ember train` at 3 ranks must stop at start-up with "not a power of two" and a hint, and a
# non-zero exit, quickly; a run that trains, or hangs until the timeout, fails this test.
source "$(dirname "$0")/support/common.bash"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v mpirun >/dev/null || fail "mpirun is not on PATH (install openmpi-bin)"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }

# 60 s is far above a start-up check (under a second) and far below a hang: timeout exits 124 on expiry.
rc=0
start=$SECONDS
timeout 60 mpirun -np 3 --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data \
  --run.dir=run --training.steps=5 --eval.every=0 --checkpoint.interval=0 >np3.out 2>np3.err || rc=$?
elapsed=$((SECONDS - start))
show() { echo "--- stdout" >&2; cat np3.out >&2; echo "--- stderr" >&2; cat np3.err >&2; }

[ "$rc" -ne 124 ] || { show; fail "mpirun -np 3 hung: killed by timeout after 60 s"; }
[ "$rc" -ne 0 ] || { show; fail "mpirun -np 3 exited 0: a 3-rank world was accepted"; }
# main prints "error: ..." then "hint: ...", prefixed by "[rank r] " when several ranks run.
grep -Eq '^(\[rank [0-9]+\] )?error: .*world size 3 .*not a power of two' np3.err ||
  { show; fail "no 'error: world size 3 ... not a power of two' line"; }
grep -Eq '^(\[rank [0-9]+\] )?hint: .+' np3.err || { show; fail "no hint line"; }
[ ! -e run/metrics.jsonl ] || ! grep -q '"step"' run/metrics.jsonl || { show; fail "training steps ran at 3 ranks"; }
echo "ok: np 3 refused in ${elapsed}s (exit $rc): $(grep -m1 -E 'error: ' np3.err)"
echo PASS
