#!/usr/bin/env bash
# Bits per byte in the training records (the validation records of sync and async runs): for a byte-level and a BPE
# run, equal to `ember eval`'s on the final checkpoint over the same batches, and to a computation in Python from the
# val shard itself (its targets' bytes under the tokenizer's own byte map, and the record's loss).
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

mkdir -p corpus
cp -r "$SRC/src/infer" "$SRC/docs" corpus/
"$EMBER" tokenizer train --input corpus --vocab-size 400 --output tok > tok.log 2>&1 || { cat tok.log >&2; fail "tokenizer train"; }
"$EMBER" prep --input corpus --output data_bpe --tokenizer tok --val-fraction 0.1 > prep.log 2>&1 || fail "prep bpe"
"$EMBER" prep --input corpus --output data_bytes --val-fraction 0.1 > prep_b.log 2>&1 || fail "prep bytes"
B=4 T=32 BATCHES=3
for kind in bpe bytes; do
  vocab=$([ $kind = bpe ] && echo 448 || echo 256)
  "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data_$kind --run.dir=run_$kind --training.steps=8 \
    --eval.every=4 --eval.batches=$BATCHES --model.vocab_size=$vocab --training.precision=fp32 > train_$kind.log 2>&1 ||
    { cat train_$kind.log >&2; fail "train $kind"; }
  must_train 2 async_$kind.log --config "$SRC/configs/tiny.ini" --data.dir=data_$kind --run.dir=async_$kind \
    --training.mode=async --training.steps=8 --async.local_steps=2 --eval.every=4 --eval.batches=$BATCHES \
    --model.vocab_size=$vocab
  "$EMBER" eval --checkpoint run_$kind/checkpoints/step_00000008.h5 --data data_$kind --batch-size $B --seq-len $T \
    --max-batches $BATCHES --json > eval_$kind.json || fail "ember eval $kind"
  "$PYTHON" - $kind $B $T $BATCHES <<'PY' || fail "bits per byte ($kind)"
import json, math, sys
import numpy as np
kind, B, T, batches = sys.argv[1], *map(int, sys.argv[2:])
raw = np.fromfile(f"data_{kind}/val_000000.bin", dtype=np.uint16)
tokens = raw[512:]  # the 1024-byte header
assert raw[:512].view(np.int32)[2] == len(tokens)
if kind == "bytes":
    size = {i: 1 for i in range(256)}
else:  # GPT-2's byte map: each vocabulary string's characters stand for bytes
    j = json.load(open("tok/tokenizer.json"))
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    char_byte = {chr(c): b for b, c in zip(bs, cs)}
    size = {i: len(bytes(char_byte[ch] for ch in s)) for s, i in j["model"]["vocab"].items()}
    for t in j["added_tokens"]:
        size[t["id"]] = len(t["content"].encode())
nbytes = sum(size[int(t)] for s in range(batches * B) for t in tokens[s * T + 1:s * T + T + 1])
for run in (f"run_{kind}", f"async_{kind}"):
    recs = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if "val_loss" in l]
    assert [r["step"] for r in recs][-1] == 8 and all("bits_per_byte" in r for r in recs), recs
    for r in recs:
        want = r["val_loss"] * batches * B * T / (math.log(2) * nbytes)
        assert abs(r["bits_per_byte"] - want) <= 1e-12 * want, (run, r, want)
ev = json.load(open(f"eval_{kind}.json"))
last = [json.loads(l) for l in open(f"run_{kind}/metrics.jsonl") if "val_loss" in l][-1]
# The same weights and batches through the training model and eval's: fp32, the same ops; 1e-6 relative.
assert abs(ev["bits_per_byte"] - last["bits_per_byte"]) <= 1e-6 * last["bits_per_byte"], (ev, last)
print(f"{kind}: {nbytes} bytes in {batches * B * T} targets; bits/byte {last['bits_per_byte']:.6f} in training, "
      f"{ev['bits_per_byte']:.6f} by ember eval")
PY
done
echo PASS
