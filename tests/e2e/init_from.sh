#!/usr/bin/env bash
# checkpoint.init_from (--init-from F): a fresh run starts from F's /model weights at step 0 with a fresh optimizer
# and data cursor, bitwise (with a vanishing learning rate the step-1 checkpoint holds F's weights, and the step-1
# validation loss is `ember eval` of F); a model or tokenizer mismatch and a missing, foreign or damaged F are
# refused with one error and a hint, writing nothing; a resume wins over init_from; two ranks work alike.
here=$(cd "$(dirname "$0")" && pwd)
source "$here/support/common.bash"
source "$here/support/bad_input.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 UCX_TLS=tcp,self

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 || { cat prep.log >&2; fail "prep"; }
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --eval.every=0 --checkpoint.interval=0
       --run.log_every=1)
# lr 1e-30 moves no weight of F by a representable amount: the step-1 checkpoint must hold F's weights bitwise.
frozen=(--optimizer.lr=1e-30 --optimizer.min_lr=0)

# Through a file: with pipefail, `| grep -q` fails whenever grep quits before ember has written all of the help.
"$EMBER" train --help >train_help.txt
grep -q -- "--checkpoint.init_from" train_help.txt || fail "ember train --help does not list init_from"

# F: 30 steps from random weights.
"${train[@]}" --run.dir=base --training.steps=30 >base.log 2>&1 || { cat base.log >&2; fail "training F"; }
F=base/checkpoints/step_00000030.h5
[ -f "$F" ] || fail "no checkpoint F"

# metric FILE STEP KEY: the value of KEY in the record of STEP, as printed (exact).
metric() {
  "$PYTHON" -c 'import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["step"] == int(sys.argv[2]): print(repr(r[sys.argv[3]]))' "$@"
}

# check_fresh_start CKPT: CKPT, written after one step of a run from F at lr 1e-30, holds F's /model bitwise, counts
# from step 0 (step 1, one AdamW step, the data cursor one global batch in) and has fresh AdamW moments: after one
# step from zero moments exp_avg = (1 - beta1) g and exp_avg_sq = (1 - beta2) g^2, so exp_avg^2 / exp_avg_sq is
# (1 - beta1)^2 / (1 - beta2) wherever g is not tiny. Its resolved config records init_from.
check_fresh_start() {
  "$PYTHON" - "$F" "$1" "$2" <<'PY' || fail "$1 is not F's weights at step 1 with a fresh optimizer"
import sys, h5py, numpy as np
f, c, global_batch = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r"), int(sys.argv[3])
names = []
f["model"].visit(lambda n: names.append(n) if isinstance(f["model"][n], h5py.Dataset) else None)
assert len(names) > 10, names
differ = [n for n in names if f["model"][n][()].tobytes() != c["model"][n][()].tobytes()]
assert not differ, f"weights differ from F: {differ}"
assert int(f.attrs["step"]) == 30, int(f.attrs["step"])
assert int(c.attrs["step"]) == 1, int(c.attrs["step"])
assert int(c["optimizer"].attrs["step"]) == 1, int(c["optimizer"].attrs["step"])
assert int(c["ranks/0"].attrs["data_cursor"]) == global_batch, dict(c["ranks/0"].attrs)
b1, b2 = float(c["optimizer"].attrs["beta1"]), float(c["optimizer"].attrs["beta2"])
want = (1 - b1) ** 2 / (1 - b2)
checked = 0
for n in names:
    m, v = c["optimizer/exp_avg"][n][()].astype(np.float64), c["optimizer/exp_avg_sq"][n][()].astype(np.float64)
    ok = v > 1e-20
    ratio = m[ok] ** 2 / v[ok]
    assert np.allclose(ratio, want, rtol=1e-3, atol=0), (n, ratio.min(), ratio.max(), want)
    checked += int(ok.sum())
assert checked > 1000, checked
cfg = c["config"][()].decode()
assert f"init_from = {sys.argv[1]}" in cfg, cfg
print(f"ok: {sys.argv[2]}: F's weights bitwise, step 1, cursor {global_batch}, fresh moments ({checked} checked)")
PY
}

# 1. A fresh run from F (--resume auto finds nothing, so init_from applies).
"${train[@]}" --run.dir=frozen --training.steps=30 --stop-after 1 --eval.every=1 "${frozen[@]}" --resume auto \
  --init-from "$F" >frozen.log 2>&1 || { cat frozen.log >&2; fail "run from F"; }
grep -q "starting from the weights of $F (checkpoint.init_from) at step 0" frozen.log ||
  { cat frozen.log >&2; fail "no log line naming F"; }
check_fresh_start frozen/checkpoints/step_00000001.h5 4
# The step-1 validation loss, on weights still F's, is F's loss as `ember eval` gives it, exactly.
"$EMBER" eval --checkpoint "$F" --data data --batch-size 4 --seq-len 32 --max-batches 2 --json >eval.json 2>/dev/null
want=$("$PYTHON" -c 'import json, sys; print(repr(json.load(open(sys.argv[1]))["loss"]))' eval.json)
got=$(metric frozen/metrics.jsonl 1 val_loss)
[ "$got" = "$want" ] || fail "step-1 val_loss $got of the run from F is not ember eval's $want"
echo "ok: step-1 val_loss $got = ember eval of F"
# The first training loss is at F's level, far below the ln(256) = 5.55 of random weights (F's own step 1).
first=$(metric frozen/metrics.jsonl 1 loss)
scratch=$(metric base/metrics.jsonl 1 loss)
"$PYTHON" -c 'import math, sys
first, scratch = float(sys.argv[1]), float(sys.argv[2])
assert abs(scratch - math.log(256)) < 0.3, scratch
assert first < scratch - 1.0, (first, scratch)' "$first" "$scratch" ||
  fail "step-1 loss $first from F is not far below $scratch from random weights"
echo "ok: step-1 loss $first from F, $scratch from random weights"

# 2. Training on from F at the configured rate: 4 steps straight, and 2 + 2 with a resume that must win over
#    init_from (a requeued fine-tune continues) with one log line, bitwise alike.
#    The config key works as the command-line alias does.
"${train[@]}" --run.dir=straight --training.steps=4 --checkpoint.init_from="$F" >straight.log 2>&1 ||
  { cat straight.log >&2; fail "4 steps from F"; }
[ "$(metric straight/metrics.jsonl 1 loss)" = "$first" ] || fail "step-1 loss differs between two runs from F"
"${train[@]}" --run.dir=split --training.steps=4 --init-from "$F" --stop-after 2 >split1.log 2>&1 ||
  { cat split1.log >&2; fail "2 steps from F"; }
"${train[@]}" --run.dir=split --training.steps=4 --init-from "$F" --resume auto >split2.log 2>&1 ||
  { cat split2.log >&2; fail "resume of the run from F"; }
grep -q "checkpoint.init_from = $F ignored: the run resumes from split/checkpoints/step_00000002.h5" split2.log ||
  { cat split2.log >&2; fail "no log line saying the resume wins over init_from"; }
grep -q "starting from the weights" split2.log && fail "the resumed run loaded F again"
diff <(losses straight/metrics.jsonl) <(losses split/metrics.jsonl) || fail "resumed run from F differs"
echo "ok: a resume wins over init_from, and continues bitwise"
# Async mode cannot start from F, but resumes a run that did, ignoring init_from alike.
cp -r straight async_resume
mpirun -np 3 --oversubscribe "${train[@]}" --run.dir=async_resume --training.mode=async --training.steps=6 \
  --async.local_steps=1 --init-from "$F" --resume auto >async_resume.log 2>&1 ||
  { cat async_resume.log >&2; fail "async resume of the run from F"; }
grep -q "checkpoint.init_from = $F ignored: the run resumes from async_resume/checkpoints/step_00000004.h5" \
  async_resume.log || { cat async_resume.log >&2; fail "async: no log line saying the resume wins over init_from"; }
[ -f async_resume/checkpoints/step_00000006.h5 ] || fail "async resume did not reach step 6"
echo "ok: async mode resumes a run from F, ignoring init_from"

# 3. Two ranks (ZeRO-1 too): every rank starts from F.
mpirun -np 2 --oversubscribe "${train[@]}" --run.dir=np2 --training.steps=30 --stop-after 1 --training.zero=1 \
  "${frozen[@]}" --init-from "$F" >np2.log 2>&1 || { cat np2.log >&2; fail "np 2 run from F"; }
check_fresh_start np2/checkpoints/step_00000001.h5 8

# 4. Bad input: one error naming F and what is wrong, a hint, no hang, nothing written, earlier outputs untouched.
cp "$F" damaged.h5
"$PYTHON" -c 'import os, sys
path = sys.argv[1]; size = os.path.getsize(path); off = size // 2 - 2048
with open(path, "r+b") as f:
    f.seek(off); data = f.read(4096); f.seek(off); f.write(bytes(b ^ 0xFF for b in data))' damaged.h5
cp "$F" other_tokenizer.h5
"$PYTHON" -c 'import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["tokenizer"].attrs["kind"] = "bpe"
    f["tokenizer"].attrs["fingerprint"] = "00112233aabbccdd"' other_tokenizer.h5
echo "not a checkpoint" >text.h5
"$PYTHON" -c 'import h5py; h5py.File("foreign.h5", "w").create_dataset("x", data=[1, 2])'
protect base frozen straight split np2 damaged.h5 other_tokenizer.h5

bad_case model_mismatch 1 "init_from checkpoint $F: its model differs from the run's \[model\]: model\.n_layer = 2 \(the run has 3\), model\.n_embd = 32 \(the run has 64\)" \
  -- "${train[@]}" --run.dir=r1 --model.n_layer=3 --model.n_embd=64 --init-from "$F"
grep -q "^hint: set model\.\* to the checkpoint's values (see \`ember inspect $F\`)" cases/model_mismatch.err ||
  fail "model_mismatch: the hint does not point at ember inspect"
bad_case model_mismatch_np2 nonzero "init_from checkpoint $F: its model differs .*model\.block_size = 32 \(the run has 64\)" \
  -- mpirun -np 2 --oversubscribe "${train[@]}" --run.dir=r2 --model.block_size=64 --init-from "$F"
bad_case tokenizer_mismatch 1 "checkpoint other_tokenizer\.h5 was trained with tokenizer bpe \(256 ids, fingerprint 00112233aabbccdd\) but this run's is bytes" \
  -- "${train[@]}" --run.dir=r3 --init-from other_tokenizer.h5
bad_case missing 1 "init_from checkpoint nothing\.h5 does not exist" \
  -- "${train[@]}" --run.dir=r4 --init-from nothing.h5
bad_case missing_np2 nonzero "init_from checkpoint nothing\.h5 does not exist" \
  -- mpirun -np 2 --oversubscribe "${train[@]}" --run.dir=r5 --init-from nothing.h5
bad_case folder 1 "init_from checkpoint data is not a file" -- "${train[@]}" --run.dir=r6 --init-from data
bad_case not_hdf5 1 "checkpoint text\.h5: not an HDF5 file" -- "${train[@]}" --run.dir=r7 --init-from text.h5
bad_case foreign 1 "checkpoint foreign\.h5: not an ember checkpoint" \
  -- "${train[@]}" --run.dir=r8 --init-from foreign.h5
bad_case damaged 1 "checkpoint damaged\.h5" -- "${train[@]}" --run.dir=r9 --init-from damaged.h5
bad_case async nonzero "checkpoint\.init_from = $F is supported in sync mode only" \
  -- mpirun -np 3 --oversubscribe "${train[@]}" --run.dir=r10 --training.mode=async --init-from "$F"
bad_case_summary
for d in r1 r3 r4 r6 r7 r8 r9; do [ ! -e "$d" ] || fail "a refused run left $d behind"; done
# Several ranks: a failing rank's MPI_Abort may end rank 0 before it has removed the folders it created and its lock
# (main's error path), so only files other than the lock count there.
for d in r2 r5 r10; do
  [ -z "$(find "$d" -type f ! -name ember.lock 2>/dev/null)" ] || { find "$d" -type f >&2; fail "a refused run wrote into $d"; }
done
echo PASS
