#!/usr/bin/env bash
# A sync job whose link goes down mid-run: every rank exits non-zero within dist.timeout + 5 s with one error line
# naming the operation and the step (each rank's stderr is written to a file on its own host, since the link that
# would carry it to mpirun is down), mpirun ends within dist.timeout + 60 s (Linux gives up on the dead TCP
# connection after the cluster's 6 retransmissions, about 25 s), the checkpoints written before stay intact, and
# once the link is back, --resume auto goes on from the last of them.
source "$2/tests/cluster/common.bash"
TIMEOUT=10

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
common=(train --config "$SRC/configs/tiny.ini" --data.dir="$WORK/data" --training.steps=1000000 --eval.every=0
        --checkpoint.interval=200 --run.log_every=50 --dist.timeout=$TIMEOUT --run.dir="$WORK/run")
# Each rank runs through this, so that its exit code, the time it ended and its stderr stay on its host's disk.
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

cluster_up 2
"$SRC/scripts/cluster/mpirun.sh" --name "$CLUSTER_NAME" --ranks-per-host 1 -x RANK_DIR -- \
  "$WORK/rank.sh" "$EMBER" "${common[@]}" >job.log 2>&1 &
mpirun_pid=$!
# Past the second checkpoint, then the link goes down.
for _ in $(seq 1 600); do
  [[ -f run/checkpoints/step_00000400.h5 && $(lines run/metrics.jsonl) -ge 9 ]] && break
  kill -0 "$mpirun_pid" 2>/dev/null || { cat job.log >&2; fail "the job ended before the link went down"; }
  sleep 0.2
done
[[ -f run/checkpoints/step_00000400.h5 ]] || { cat job.log >&2; fail "no checkpoint at step 400 within 120 s"; }
ls run/checkpoints >before.txt
"${CLUSTER[@]}" link 1 down
down=$(date +%s.%N)
echo "link of host 1 down at $down"

# Every rank exits within dist.timeout + 5 s of the link going down.
for _ in $(seq 1 $(((TIMEOUT + 5) * 10))); do
  [[ -f ranks/rank0.exit && -f ranks/rank1.exit ]] && break
  sleep 0.1
done
for r in 0 1; do
  [[ -f ranks/rank$r.exit ]] || { cat job.log ranks/*.err >&2; fail "rank $r had not exited $((TIMEOUT + 5)) s after the link went down"; }
  read -r rc at <ranks/rank$r.exit
  after=$("$PYTHON" -c "print(round($at - $down, 1))")
  [[ $rc -ne 0 ]] || fail "rank $r exited 0"
  grep -Eq "^(\[rank $r\] )?error: MPI [a-z-]+ did not complete within dist.timeout = $TIMEOUT s \(step [0-9]+\): a peer rank died, froze or lost its network link\$" ranks/rank$r.err ||
    { cat ranks/rank$r.err >&2; fail "rank $r: no error line naming the operation, dist.timeout and the step"; }
  [[ $(grep -Ec '^(\[rank [0-9]+\] )?error: ' ranks/rank$r.err) -eq 1 ]] || { cat ranks/rank$r.err >&2; fail "rank $r: more than one error line"; }
  grep -q '^hint: ' ranks/rank$r.err || fail "rank $r: no hint line"
  echo "ok: rank $r exited $rc after ${after} s: $(grep 'error: ' ranks/rank$r.err | cut -c1-110)"
done

# mpirun itself ends too, non-zero.
for _ in $(seq 1 $(((TIMEOUT + 60) * 10))); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$mpirun_pid" 2>/dev/null; then fail "mpirun still runs $((TIMEOUT + 60)) s after the link went down"; fi
rc=0
wait "$mpirun_pid" || rc=$?
mpirun_pid=""
[[ $rc -ne 0 ]] || fail "mpirun exited 0"
echo "ok: mpirun exited $rc after $("$PYTHON" -c "import time; print(round(time.time() - $down, 1))") s"

# The checkpoints written before the failure are all there and read back whole.
ls run/checkpoints >after.txt
diff before.txt after.txt || fail "the checkpoint folder changed after the link went down"
last=$(cat run/checkpoints/latest)
"$EMBER" inspect "run/checkpoints/$last" >inspect.log 2>&1 || { cat inspect.log >&2; fail "$last does not read back"; }

# The link returns; the job resumes from the last checkpoint and runs on.
"${CLUSTER[@]}" link 1 up
step=$(sed -E 's/step_0*([0-9]+)\.h5/\1/' run/checkpoints/latest)
on_cluster 2 1 "${common[@]}" --resume auto --stop-after 100 >resume.log 2>&1 ||
  { cat resume.log >&2; fail "--resume auto after the link came back"; }
grep -q "resumed from .* at step $step " resume.log || { cat resume.log >&2; fail "did not resume at step $step"; }
echo "ok: resumed at step $step and ran 100 more"

cluster_down
trap - EXIT
cluster_gone
echo PASS
