#!/usr/bin/env bash
# An async job (center on host 0, workers on hosts 1 and 2) whose center's host is cut off mid-run: each worker
# ends within async.center_timeout + 5 s with one error line naming the center (its one-sided calls to the center
# are bounded, dist/stall_watchdog.h), mpirun within async.center_timeout + 60 s, and once the link is back,
# --resume auto continues from the last checkpoint.
source "$2/tests/cluster/common.bash"
TIMEOUT=10

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
common=(train --config "$SRC/configs/tiny.ini" --data.dir="$WORK/data" --training.mode=async --training.steps=1000000
        --eval.every=0 --checkpoint.interval=100 --run.log_every=50 --async.local_steps=5
        --async.center_timeout=$TIMEOUT --run.dir="$WORK/run")
cat >rank.sh <<'SH'
#!/bin/sh
"$@" 2>"$RANK_DIR/rank$OMPI_COMM_WORLD_RANK.err"
rc=$?
echo "$rc $(date +%s.%N)" >"$RANK_DIR/rank$OMPI_COMM_WORLD_RANK.exit"
exit $rc
SH
chmod +x rank.sh
mkdir -p ranks
export RANK_DIR=$WORK/ranks

cluster_up 3
"$SRC/scripts/cluster/mpirun.sh" --name "$CLUSTER_NAME" --ranks-per-host 1 -x RANK_DIR -- \
  "$WORK/rank.sh" "$EMBER" "${common[@]}" >job.log 2>&1 &
mpirun_pid=$!
for _ in $(seq 1 600); do
  [[ -f run/checkpoints/step_00000200.h5 ]] && break
  kill -0 "$mpirun_pid" 2>/dev/null || { cat job.log ranks/*.err >&2; fail "the job ended before the link went down"; }
  sleep 0.2
done
[[ -f run/checkpoints/step_00000200.h5 ]] || { cat job.log >&2; fail "no checkpoint at step 200 within 120 s"; }
"${CLUSTER[@]}" link 0 down
down=$(date +%s.%N)
echo "link of host 0 (the center) down at $down"

for _ in $(seq 1 $(((TIMEOUT + 5) * 10))); do
  [[ -f ranks/rank1.exit && -f ranks/rank2.exit ]] && break
  sleep 0.1
done
for r in 1 2; do
  [[ -f ranks/rank$r.exit ]] || { cat ranks/*.err >&2; fail "worker $r had not exited $((TIMEOUT + 5)) s after the link went down"; }
  read -r rc at <ranks/rank$r.exit
  [[ $rc -ne 0 ]] || fail "worker $r exited 0"
  grep -Eq "^\[rank $r\] error: async worker rank $r: the center \(rank 0\) did not answer MPI_Win_[a-z]+ within async.center_timeout = $TIMEOUT s" ranks/rank$r.err ||
    { cat ranks/rank$r.err >&2; fail "worker $r: no error line naming the center"; }
  [[ $(grep -Ec '^(\[rank [0-9]+\] )?error: ' ranks/rank$r.err) -eq 1 ]] || { cat ranks/rank$r.err >&2; fail "worker $r: more than one error line"; }
  grep -q '^hint: ' ranks/rank$r.err || fail "worker $r: no hint line"
  echo "ok: worker $r exited $rc after $("$PYTHON" -c "print(round($at - $down, 1))") s: $(grep 'error: ' ranks/rank$r.err | cut -c1-120)"
done
for _ in $(seq 1 $(((TIMEOUT + 60) * 10))); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$mpirun_pid" 2>/dev/null; then fail "mpirun still runs $((TIMEOUT + 60)) s after the link went down"; fi
rc=0
wait "$mpirun_pid" || rc=$?
mpirun_pid=""
[[ $rc -ne 0 ]] || fail "mpirun exited 0"
echo "ok: mpirun exited $rc after $("$PYTHON" -c "import time; print(round(time.time() - $down, 1))") s"

"${CLUSTER[@]}" link 0 up
step=$(sed -E 's/step_0*([0-9]+)\.h5/\1/' run/checkpoints/latest)
on_cluster 3 1 "${common[@]}" --resume auto --stop-after 50 >resume.log 2>&1 ||
  { cat resume.log >&2; fail "--resume auto after the link came back"; }
grep -q "resumed from .* at step $step" resume.log || { cat resume.log >&2; fail "did not resume at step $step"; }
echo "ok: resumed at step $step"

cluster_down
trap - EXIT
cluster_gone
echo PASS
