#!/usr/bin/env bash
# Async traffic at 2, 4 and 8 workers (np 3, 5 and 9, oversubscribed; a 0.2M-parameter model, the [async]
# defaults): per worker round, the upload is at most 0.125 bits per parameter per local step, and upload plus download
# are at least 30x fewer bytes than an fp32 exchange (an fp32 delta up and the fp32 parameters down), whatever the
# number of workers: a download is one message however many versions the worker missed. Every byte a worker moves
# through the window is counted (headers, reservations and download records included).
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
for workers in 2 4 8; do
  # 6 rounds per worker on average: steps x workers x B samples in rounds of local_steps x B.
  timeout 600 mpirun -np $((workers + 1)) --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" \
    --data.dir=data --training.threads=1 --training.mode=async --model.n_embd=64 --model.n_layer=4 \
    --training.steps=96 --eval.every=0 --eval.batches=2 --checkpoint.interval=0 --run.dir="w$workers" \
    >"w$workers.log" 2>&1 || { cat "w$workers.log" >&2; fail "async run with $workers workers"; }
done
"$PYTHON" - w2 w4 w8 <<'PY' || fail "async traffic bounds"
import json, sys
ok = True
for run in sys.argv[1:]:
    workers = int(run[1:])
    recs = []
    for r in range(1, workers + 1):
        recs += [json.loads(l) for l in open(f"{run}/metrics_rank{r}.jsonl")]
    fp32 = recs[0]["fp32_delta_bytes"]  # 4 bytes x parameters
    params = fp32 / 4
    rounds = len(recs)
    put = sum(r["bytes_put"] for r in recs)
    got = sum(r["bytes_got"] for r in recs)
    steps = sum(r["local_steps"] for r in recs)
    bits = 8 * put / params / steps
    ratio = 2 * fp32 * rounds / (put + got)
    fetched = sum(r["downloaded"] for r in recs)
    print(f"{workers} workers: {rounds} rounds, upload {bits:.4f} bits per parameter per local step (<= 0.125), "
          f"up + down {ratio:.1f}x fewer bytes than fp32 (>= 30), {fetched} downloads")
    ok = ok and bits <= 0.125 and ratio >= 30 and fetched > 0
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
