#!/usr/bin/env bash
# training.offload = optimizer on the CPU backend: the master weights and AdamW's moments in host memory, updated
# there (train/adamw.h): at 1 rank handed off layer by layer as backward finishes each (with clipping, once the norm
# is known; without, beside backward), at 2 ranks chunk by chunk after the gradients are averaged. On the CPU the
# host's update is the backend's own, so in fp32 every loss is bitwise that of the same run without offload: at
# 1 rank with and without clipping, with gradient accumulation and full recompute, and at 2 ranks with and without
# ZeRO-1 (each rank offloading its shard); the final checkpoints' weights and moments are equal too (h5py). A
# checkpoint is the same with or without offload: a run resumed across the switch, either way, equals the straight
# run bitwise. In bf16 the device holds no fp32 arena and the same holds. Async workers offload too (handed off
# alone, chunked in a group of 2): every round that started from the same center versions is bitwise the round
# without offload, and async runs resume across the switch.
source "$(dirname "$0")/support/common.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1
run() {  # run NAME NP [extra args]
  local name=$1 np=$2
  shift 2
  must_train "$np" "$name.log" --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir="$name" --training.steps=8 \
    --training.precision="${PRECISION:-fp32}" --eval.every=4 --checkpoint.interval=0 --run.log_every=4 "$@"
}
same() {  # same A B: equal losses (every one, as printed) and equal final weights and moments
  losses "$1/metrics.jsonl" > "$1.losses"
  losses "$2/metrics.jsonl" > "$2.losses"
  [ "$(wc -l < "$1.losses")" -eq 8 ] || fail "$1: $(wc -l < "$1.losses") records, not 8"
  diff "$1.losses" "$2.losses" || fail "$2's losses differ from $1's"
  "$PYTHON" - "$1/checkpoints/step_00000008.h5" "$2/checkpoints/step_00000008.h5" <<'PY' || fail "$2's final checkpoint differs from $1's"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r") for p in sys.argv[1:])
names = []  # the tensors (the run's config text differs: its run.dir and training.offload)
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and o.dtype.kind == "f" else None)
moments = [n for n in names if "exp_avg" in n]
assert moments, "no moments in the checkpoint"
for n in names:
    if not np.array_equal(a[n][()], b[n][()]):
        sys.exit(f"{n} differs")
print(f"{len(names)} datasets equal ({len(moments)} of moments)")
PY
}

handed="each layer's gradients go there as backward finishes it"
run plain 1
run offload 1 --training.offload=optimizer
grep -q "AdamW on the host (training.offload = optimizer.*$handed" offload.log || { cat offload.log; fail "no hand-off in the log"; }
same plain offload
run plain_noclip 1 --training.max_norm=0
run offload_noclip 1 --training.max_norm=0 --training.offload=optimizer
same plain_noclip offload_noclip
run plain_accum 1 --training.grad_accum_steps=2 --training.recompute=full
run offload_accum 1 --training.grad_accum_steps=2 --training.recompute=full --training.offload=optimizer
same plain_accum offload_accum
run plain_dp2 2
run offload_dp2 2 --training.offload=optimizer
grep -q "$handed" offload_dp2.log && fail "2 ranks handed off gradients that are still to be averaged"
same plain_dp2 offload_dp2
run plain_zero2 2 --training.zero=1
run offload_zero2 2 --training.zero=1 --training.offload=optimizer
same plain_zero2 offload_zero2

# Across the switch: 4 steps one way, a stop with a checkpoint, 4 more the other way, equal to the straight run.
for first in none optimizer; do
  second=$([ $first = none ] && echo optimizer || echo none)
  run switch_$first 1 --training.offload=$first --stop-after 4
  run switch_$first 1 --training.offload=$second --resume auto
  same plain switch_$first
done

# bf16: the device keeps no fp32 arena, only the bf16 copy and the packed fp32 tensors, which the optimizer writes from
# the host's masters (the cast on the host is the CPU backend's own): still bitwise the run without offload, at 1 rank
# (handed off), at 2 ranks with accumulation and recompute, and under ZeRO-1 (the copy and the packed tensors gathered
# across ranks); and across the switch.
no_arena="the device keeps no fp32 arena"
export PRECISION=bf16
run plain_bf16 1
run offload_bf16 1 --training.offload=optimizer
grep -q "$no_arena" offload_bf16.log || { cat offload_bf16.log; fail "bf16: the device kept its fp32 arena"; }
grep -q "$no_arena" offload.log && fail "fp32: the device has no weights but its fp32 arena"
same plain_bf16 offload_bf16
run plain_bf16_dp2 2 --training.grad_accum_steps=2 --training.recompute=attention
run offload_bf16_dp2 2 --training.grad_accum_steps=2 --training.recompute=attention --training.offload=optimizer
same plain_bf16_dp2 offload_bf16_dp2
run plain_bf16_zero2 2 --training.zero=1
run offload_bf16_zero2 2 --training.zero=1 --training.offload=optimizer
grep -q "$no_arena" offload_bf16_zero2.log || fail "bf16 ZeRO-1: the device kept its fp32 arena"
same plain_bf16_zero2 offload_bf16_zero2
run switch_bf16 1 --training.offload=optimizer --stop-after 4
run switch_bf16 1 --resume auto
same plain_bf16 switch_bf16
# int8: the products quantize the bf16 copy (the device has no fp32 masters to quantize), which moves a weight's
# int8 code only where its bf16 rounding crosses an int8 rounding midpoint: every loss within 0.2% of the run without
# offload (seen: 0.015% at most over 30 steps). A copy that missed an update would be off by far more. At 1 rank the
# dense weights' bf16 copy stays on the host (the backend quantizes it from there); under ZeRO-1 the device keeps it.
export PRECISION=int8
within() {  # within A B: every loss of B within 0.2% of A's
  "$PYTHON" - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY' || fail "$2: losses differ from $1's by more than 0.2%"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == 8, (a, b)
worst = max(abs(x - y) / x for x, y in zip(a, b))
assert worst <= 2e-3, (worst, a, b)
print(f"{sys.argv[2]}: worst relative loss difference {worst:.2e}")
PY
}
run plain_int8 1
run offload_int8 1 --training.offload=optimizer
grep -q "products quantize the dense weights from the host's bf16 copy" offload_int8.log ||
  { cat offload_int8.log; fail "int8: the dense weights' bf16 copy is not the host's"; }
within plain_int8 offload_int8
# The host's copy and the device's quantize the same values: ZeRO-1 on one rank keeps the device's, and is bitwise.
run offload_int8_zero1 1 --training.zero=1 --training.offload=optimizer
grep -q "$no_arena, only the bf16 copy" offload_int8_zero1.log || fail "int8 ZeRO-1 at 1 rank: not the device's copy"
same offload_int8 offload_int8_zero1
run plain_int8_zero2 2 --training.zero=1
run offload_int8_zero2 2 --training.zero=1 --training.offload=optimizer
grep -q "$no_arena, only the bf16 copy" offload_int8_zero2.log || fail "int8 ZeRO-1: not the device's bf16 copy"
within plain_int8_zero2 offload_int8_zero2
unset PRECISION

# Async: a center and one worker, then a center and one group of 2 ranks. A round after the first starts from the
# center versions the worker fetched before it, which depend on timing; rounds whose fetches (version, staleness, what
# came down) were alike in both runs must give bitwise the same loss, the others are not compared. A pair of runs in
# which no later round is comparable (the machine busy enough to move every fetch) is run again, up to 3 times. A
# worker whose host masters missed a rebase differs from its second round on.
arun() {  # arun NAME NP [extra args]: 16 steps in rounds of 4
  local name=$1 np=$2
  shift 2
  must_train "$np" "$name.log" --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir="$name" --training.mode=async \
    --training.steps=16 --async.local_steps=4 --training.precision=fp32 --eval.every=0 --checkpoint.interval=0 \
    --log-all-ranks "$@"
}
first_round() { head -1 "$1/metrics_rank1.jsonl" | "$PYTHON" -c 'import json, sys; print(repr(json.load(sys.stdin)["loss"]))'; }
same_rounds() {  # same_rounds A B: the later rounds that started alike, each checked bitwise; prints their count
  "$PYTHON" - "$1/metrics_rank1.jsonl" "$2/metrics_rank1.jsonl" <<'PY' || fail "$2: a later round differs from $1's"
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
assert len(a) == len(b) == 4, (a, b)
fetched = lambda rounds: [tuple(r[k] for k in ("version", "staleness", "behind", "downloaded", "pending", "full_fetch"))
                          for r in rounds]
same = 0
for i in range(1, 4):
    if fetched(a[:i]) != fetched(b[:i]):
        break  # this round and the rest started from other center versions
    assert a[i]["loss"] == b[i]["loss"], f"round {i + 1}: {b[i]['loss']!r} against {a[i]['loss']!r}, started alike"
    same += 1
print(same)
PY
}
async_pair() {  # async_pair PLAIN OFFLOAD NP [extra args]: both runs, the first round and the comparable later rounds
  local plain=$1 offload=$2 np=$3 same=0
  shift 3
  for try in 1 2 3; do
    arun "$plain" "$np" "$@"
    arun "$offload" "$np" "$@" --training.offload=optimizer
    [ "$(first_round "$plain")" = "$(first_round "$offload")" ] ||
      fail "$offload: first round $(first_round "$offload"), $(first_round "$plain") without offload"
    same=$(same_rounds "$plain" "$offload") || exit 1
    [ "$same" -ge 1 ] && break
    echo "$offload: no later round started as in $plain (try $try); again"
  done
  [ "$same" -ge 1 ] || fail "$offload: in 3 tries no later round started from the same center versions"
  echo "$offload: first round and $same later round(s) bitwise those of $plain"
}
async_pair async_plain async_offload 2
grep -q "$handed" async_offload.log || { cat async_offload.log; fail "async: the worker did not hand off"; }
arun async_resumed 2 --training.steps=24 --resume "async_offload/checkpoints/step_00000016.h5"
grep -q "done at step 24" async_resumed.log || { cat async_resumed.log; fail "async: the resume without offload"; }
arun async_resumed_offload 2 --training.steps=24 --resume "async_plain/checkpoints/step_00000016.h5" \
  --training.offload=optimizer
grep -q "done at step 24" async_resumed_offload.log || { cat async_resumed_offload.log; fail "async: the resume with offload"; }
async_pair group_plain group_offload 3 --async.ranks_per_worker=2
grep -q "$handed" group_offload.log && fail "async group: handed off gradients that are still to be averaged"
"$PYTHON" - group_offload/checkpoints/step_00000016.h5 <<'PY' || fail "async group: the replicas' moments differ"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    for k in ("exp_avg", "exp_avg_sq"):
        a, b = f[f"ranks/1/{k}"][()], f[f"ranks/2/{k}"][()]
        assert a.any() and np.array_equal(a, b), k
print("the group's replicas hold the same moments")
PY
echo PASS
