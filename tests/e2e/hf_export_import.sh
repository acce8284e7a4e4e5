#!/usr/bin/env bash
# Hugging Face interop through transformers itself (hf_interop.py in $EMBER_VENV_PYTHON): ember export of a BPE run and
# of a byte run loads with AutoModelForCausalLM and AutoTokenizer, gives ember's logits, loss, token ids and greedy
# text; a bf16 export within bf16 rounding; a random GPT2LMHeadModel saved by save_pretrained imports with the same
# logits and loss; export -> import is bitwise; and every bad input is refused without touching earlier outputs.
source "$(dirname "$0")/support/common.bash"
VPY=${EMBER_VENV_PYTHON:?set EMBER_VENV_PYTHON to the venv of scripts/python_env.sh}
HF="$VPY $SRC/tests/e2e/support/hf_interop.py"

# fp32 tolerances, relative to the largest logit: ember and PyTorch sum the same products in other orders over at
# most 4C = 256 terms per layer and 2 layers, a few ulp (1e-7 each) of the largest magnitude; 2e-5 leaves room for
# 100x that while a transposed or misplaced tensor moves logits by their own size. bf16: weights rounded to 8 bits
# (2^-9 relative), 2e-2.
FP32_TOL=2e-5
BF16_TOL=2e-2

mkdir -p corpus
cp -r "$SRC/src/infer" "$SRC/src/data" corpus/
"$EMBER" tokenizer train --input corpus --vocab-size 400 --output tok > tok.log 2>&1 || { cat tok.log >&2; fail "tokenizer train"; }
"$EMBER" prep --input corpus --output data --tokenizer tok --val-fraction 0.2 > prep.log 2>&1 || fail "prep bpe"
"$EMBER" prep --input corpus --output data_b --val-fraction 0.2 > prep_b.log 2>&1 || fail "prep bytes"
for kind in bpe bytes; do
  d=data; [ $kind = bytes ] && d=data_b
  "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=$d --run.dir=run_$kind --training.steps=30 \
    --eval.every=0 --model.vocab_size=$([ $kind = bpe ] && echo 448 || echo 256) > train_$kind.log 2>&1 ||
    { cat train_$kind.log >&2; fail "train $kind"; }
done

printf 'int main() {\n  return ember::run(argc, argv); // naïve — ok\n}\n' > sample.txt
for kind in bpe bytes; do
  d=data; spec=tok; [ $kind = bytes ] && d=data_b && spec=bytes
  ckpt=run_$kind/checkpoints/$(cat run_$kind/checkpoints/latest)
  "$EMBER" eval --checkpoint "$ckpt" --data $d --seq-len 32 --batch-size 4 --max-batches 1 --json \
    --logits-out logits_$kind.npy > eval_$kind.json || fail "eval --logits-out"
  "$EMBER" export --checkpoint "$ckpt" --output hf_$kind > export.log || fail "export $kind"
  "$EMBER" export --checkpoint "$ckpt" --output hf16_$kind --dtype bf16 > /dev/null || fail "export bf16"
  "$EMBER" generate --checkpoint "$ckpt" --prompt "int main" --max-new-tokens 24 --temperature 0 > gen_$kind.txt
  "$EMBER" tokenizer encode --tokenizer $spec < sample.txt > ids_$kind.txt
  $HF check-export hf_$kind logits_$kind.npy eval_$kind.json gen_$kind.txt "int main" 24 sample.txt ids_$kind.txt \
    $FP32_TOL || fail "transformers on the $kind export"
  $HF check-export hf16_$kind logits_$kind.npy eval_$kind.json - "" 0 sample.txt ids_$kind.txt $BF16_TOL ||
    fail "transformers on the bf16 $kind export"
  # Export -> import gives back the weights bit for bit and the same tokenizer.
  "$EMBER" import --hf hf_$kind --output back_$kind.h5 > import.log || fail "import of the export"
  "$PYTHON" - "$ckpt" back_$kind.h5 <<'PY' || fail "export -> import is not bitwise ($kind)"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
names = []
b["model"].visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
assert names and len(names) == sum(1 for _ in [0] for n in names)
for n in names:
    x, y = a["model/" + n][()], b["model/" + n][()]
    assert x.dtype == y.dtype and x.shape == y.shape and (x.view(np.uint32) == y.view(np.uint32)).all(), n
assert a["tokenizer"].attrs["fingerprint"] == b["tokenizer"].attrs["fingerprint"]
assert b.attrs["step"] == 0
print(len(names), "tensors bitwise equal")
PY
done

# Import of a model transformers made: a random GPT2LMHeadModel saved by save_pretrained, with the BPE tokenizer.
$HF make-random hf_random 448 tok || fail "save_pretrained"
"$EMBER" import --hf hf_random --output random.h5 || fail "import of a save_pretrained folder"
"$EMBER" eval --checkpoint random.h5 --data data --seq-len 32 --batch-size 4 --max-batches 1 --json \
  --logits-out logits_random.npy > eval_random.json || fail "eval of the imported model"
$HF check-import hf_random logits_random.npy eval_random.json $FP32_TOL || fail "imported model differs"
"$EMBER" generate --checkpoint random.h5 --prompt "int" --max-new-tokens 5 > /dev/null || fail "generate on import"

# Bad input: each refused with one error line and a hint, earlier outputs untouched.
echo "not hdf5" > bogus.h5
expect_error export_bogus "bogus.h5" "$EMBER" export --checkpoint bogus.h5 --output hf_bogus
[ ! -e hf_bogus ] || fail "a failed export left a folder"
before=$(md5sum hf_bpe/model.safetensors)
before_sum=$(md5sum < hf_bpe/model.safetensors)
ckpt=run_bpe/checkpoints/$(cat run_bpe/checkpoints/latest)
expect_error export_exists "hf_bpe exists" "$EMBER" export --checkpoint "$ckpt" --output hf_bpe
expect_error export_dtype "--dtype fp8 is not a dtype" "$EMBER" export --checkpoint "$ckpt" --output x --dtype fp8
[ "$(md5sum hf_bpe/model.safetensors)" = "$before" ] || fail "a refused export changed the earlier one"
"$EMBER" export --checkpoint "$ckpt" --output hf_bpe --overwrite --dtype fp16 > /dev/null || fail "--overwrite"
grep -q '"torch_dtype": "float16"' hf_bpe/config.json || fail "--overwrite did not replace the folder"
ls -d hf_bpe.tmp-* hf_bpe.lock 2>/dev/null && fail "export left its temporary folder or its lock"
aside=(hf_bpe.previous-*)
[ "${#aside[@]}" -eq 1 ] && [ "$(md5sum < "${aside[0]}/model.safetensors")" = "$before_sum" ] ||
  fail "--overwrite did not move the earlier export aside intact"
expect_error import_exists "random.h5 exists" "$EMBER" import --hf hf_random --output random.h5
for k in missing shape arch header untied; do
  rm -rf hf_$k && cp -r hf_random hf_$k && $HF break hf_$k $k || fail "break $k"
done
expect_error import_missing "lacks the tensor transformer.h.0.ln_1.weight" "$EMBER" import --hf hf_missing --output m.h5
expect_error import_shape "h.0.ln_1.weight has shape \[65\], not \[64\]" "$EMBER" import --hf hf_shape --output m.h5
expect_error import_arch "activation_function relu" "$EMBER" import --hf hf_arch --output m.h5
expect_error import_header "header length" "$EMBER" import --hf hf_header --output m.h5
expect_error import_untied "lm_head.weight differs" "$EMBER" import --hf hf_untied --output m.h5
mkdir -p hf_notok && cp hf_random/config.json hf_random/model.safetensors hf_notok/
expect_error import_notok "no tokenizer files" "$EMBER" import --hf hf_notok --output m.h5
"$EMBER" import --hf hf_notok --output notok.h5 --tokenizer tok > /dev/null || fail "import --tokenizer"
[ ! -e m.h5 ] || fail "a refused import wrote its output"
echo PASS
