#!/usr/bin/env bash
# Sync training across hosts of an emulated cluster (Open MPI over TCP through shaped veth links): 2 and 4 hosts
# with 1 and 2 ranks each give losses bitwise equal to the same number of ranks on one host, the gradients really
# cross the links, and 4 hosts x 2 ranks stop and resume bitwise.
source "$2/tests/cluster/common.bash"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
common=(train --config "$SRC/configs/tiny.ini" --data.dir="$WORK/data" --training.steps=12 --eval.every=6
        --checkpoint.interval=0 --run.log_every=4)

# One host: the references.
for np in 2 4 8; do
  mpirun -np "$np" --oversubscribe "$EMBER" "${common[@]}" --run.dir="$WORK/one_np$np" >"one_np$np.log" 2>&1 ||
    { cat "one_np$np.log" >&2; fail "one host, $np ranks"; }
  losses "one_np$np/metrics.jsonl" >"one_np$np.txt"
done

cluster_up 4
"${CLUSTER[@]}" status
for shape in 2x1 2x2 4x1 4x2; do
  hosts=${shape%x*} per=${shape#*x} np=$((${shape%x*} * ${shape#*x}))
  before=$(link_bytes 1)
  on_cluster "$hosts" "$per" "${common[@]}" --run.dir="$WORK/hosts_$shape" >"hosts_$shape.log" 2>&1 ||
    { cat "hosts_$shape.log" >&2; fail "$hosts hosts x $per ranks"; }
  moved=$(($(link_bytes 1) - before))
  grep -q "^ember .* | $np rank(s), rank 0 on $CLUSTER_NAME-h0 |" "hosts_$shape.log" ||
    { head -3 "hosts_$shape.log" >&2; fail "$shape: rank 0 is not on host 0"; }
  losses "hosts_$shape/metrics.jsonl" >"hosts_$shape.txt"
  diff "one_np$np.txt" "hosts_$shape.txt" || fail "$shape: losses differ from $np ranks on one host"
  # 12 steps of gradient all-reduce over a 0.3 MiB model cross host 1's link: far more than 1 MB, both ways.
  ((moved > 1000000)) || fail "$shape: only $moved bytes crossed host 1's link"
  # The communication time is measured and reported per step.
  "$PYTHON" -c 'import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if "comm_ms" in l]
assert recs and all(r["comm_ms"] > 0 and 0 <= r["comm_exposed_ms"] for r in recs), recs' "hosts_$shape/metrics.jsonl" ||
    fail "$shape: metrics lack comm_ms > 0 and comm_exposed_ms"
  echo "ok: $hosts hosts x $per ranks: losses bitwise equal to $np ranks on one host; $moved bytes over host 1's link"
done

# 4 hosts x 2 ranks: stop at 6 with a checkpoint, resume on the cluster, bitwise equal to the straight run.
on_cluster 4 2 "${common[@]}" --run.dir="$WORK/split" --stop-after 6 >split1.log 2>&1 ||
  { cat split1.log >&2; fail "4x2 first half"; }
on_cluster 4 2 "${common[@]}" --run.dir="$WORK/split" --resume auto >split2.log 2>&1 ||
  { cat split2.log >&2; fail "4x2 resume"; }
grep -q "resumed from .* at step 6 " split2.log || { cat split2.log >&2; fail "4x2 did not resume at step 6"; }
losses split/metrics.jsonl >split.txt
diff hosts_4x2.txt split.txt || fail "4x2: losses after the resume differ from the straight run"
echo "ok: 4 hosts x 2 ranks stop at step 6 and resume bitwise"

finish_cluster_test
