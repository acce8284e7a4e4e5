#!/usr/bin/env bash
# Bad checkpoints: metadata and tensors damaged one at a time (h5py), each refused by resume, eval, generate or
# inspect with one error line naming the file and the attribute or dataset, a hint, a bounded time and the earlier
# runs' outputs untouched; an async checkpoint given to a sync run says so (a sync one given to an async run works).
here=$(cd "$(dirname "$0")" && pwd)
source "$here/support/common.bash"
source "$here/support/bad_input.bash"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 UCX_TLS=tcp,self

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --eval.every=0)
"${train[@]}" --run.dir=run --checkpoint.interval=10 --training.steps=20 >run.log 2>&1 ||
  { cat run.log >&2; fail "sync run failed"; }
async=(mpirun -np 3 --oversubscribe "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --eval.every=0
       --training.mode=async --training.threads=1 --async.local_steps=4)
timeout 300 "${async[@]}" --run.dir=arun --training.steps=8 >arun.log 2>&1 || { cat arun.log >&2; fail "async run failed"; }
good=run/checkpoints/step_00000020.h5 agood=arun/checkpoints/step_00000008.h5
[ -f "$good" ] && [ -f "$agood" ] || fail "the good runs wrote no checkpoints"

# damage SRC DST EXPR: a copy of SRC with one change made by the Python statement EXPR on the h5py file `f`.
mkdir -p bad
damage() {
  cp "$1" "bad/$2"
  "$PYTHON" -c 'import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    exec(sys.argv[2])' "bad/$2" "$3"
}
damage "$good" neg_step.h5 'f.attrs["step"] = np.int64(-5)'
damage "$good" huge_step.h5 'f.attrs["step"] = np.int64(1 << 40)'
damage "$good" ws0.h5 'f.attrs["world_size"] = np.int64(0)'
damage "$good" ws4.h5 'f.attrs["world_size"] = np.int64(4)'
damage "$good" eps_nan.h5 'f["optimizer"].attrs["eps"] = np.float32("nan")'
damage "$good" beta.h5 'f["optimizer"].attrs["beta1"] = np.float32(1.5)'
damage "$good" mode.h5 'f.attrs["mode"] = "banana"'
damage "$good" n_embd.h5 'f.attrs["n_embd"] = np.int64(33)'
damage "$good" tokens.h5 'f.attrs["tokens_seen"] = np.int64(3)'
damage "$good" opt_step.h5 'f["optimizer"].attrs["step"] = np.int64(7)'
damage "$good" nan_weight.h5 'f["model/transformer/wte/weight"][3, 5] = np.nan'
damage "$good" inf_exp_avg.h5 'f["optimizer/exp_avg/transformer/h/1/mlp/c_fc/bias"][2] = np.inf'
damage "$agood" role.h5 'f["ranks/1"].attrs["role"] = "banana"'
protect run arun data

resume=("${train[@]}" --run.dir=resumed --training.steps=30 --resume)
bad_case neg_step 1 "neg_step.h5: attribute /step is -5" -- "${resume[@]}" bad/neg_step.h5
bad_case huge_step 1 "huge_step.h5: attribute /step is 1099511627776" -- "${resume[@]}" bad/huge_step.h5
bad_case world_size_0 1 "ws0.h5: attribute /world_size is 0" -- "${resume[@]}" bad/ws0.h5
bad_case world_size_4 1 "ws4.h5: attribute /world_size is 4, expected 1..1" -- "${resume[@]}" bad/ws4.h5
bad_case eps_nan 1 "eps_nan.h5: attribute /optimizer:eps is -?nan" -- "${resume[@]}" bad/eps_nan.h5
bad_case beta_1_5 1 "beta.h5: attribute /optimizer:beta1 is 1.5" -- "${resume[@]}" bad/beta.h5
bad_case mode_banana 1 "mode.h5: attribute /mode is \"banana\"" -- "${resume[@]}" bad/mode.h5
bad_case n_embd_33 1 "n_embd.h5: attribute /n_embd is 33, expected a multiple of n_head" -- "${resume[@]}" bad/n_embd.h5
bad_case tokens_lt_step 1 "tokens.h5: attribute /tokens_seen is 3, expected >= /step = 20" -- "${resume[@]}" bad/tokens.h5
bad_case optimizer_step 1 "opt_step.h5: attribute /optimizer:step is 7, expected 20" -- "${resume[@]}" bad/opt_step.h5
bad_case nan_weight_resume 1 "nan_weight.h5: dataset /model/transformer/wte/weight holds 1 non-finite" -- \
  "${resume[@]}" bad/nan_weight.h5
bad_case inf_exp_avg_resume 1 "inf_exp_avg.h5: dataset /optimizer/exp_avg/transformer/h/1/mlp/c_fc/bias holds 1" -- \
  "${resume[@]}" bad/inf_exp_avg.h5
bad_case nan_weight_eval 1 "nan_weight.h5: dataset /model/transformer/wte/weight holds 1 non-finite" -- \
  "$EMBER" eval --checkpoint bad/nan_weight.h5 --data data --max-batches 2
bad_case nan_weight_generate 1 "nan_weight.h5: dataset /model/transformer/wte/weight holds 1 non-finite" -- \
  "$EMBER" generate --checkpoint bad/nan_weight.h5 --max-new-tokens 4
# inspect lists every dataset and marks the bad one, then exits 1 as for a corrupt dataset: the file is unusable.
bad_case nan_weight_inspect 1 "nan_weight.h5: 1 dataset.*first: /model/transformer/wte/weight" -- \
  "$EMBER" inspect bad/nan_weight.h5
grep -q "/model/transformer/wte/weight .* NON-FINITE (holds 1 non-finite" cases/nan_weight_inspect.out ||
  { cat cases/nan_weight_inspect.out >&2; fail "inspect does not mark wte NON-FINITE"; }
[ "$(grep -c ' ok$' cases/nan_weight_inspect.out)" -gt 10 ] || fail "inspect stopped at the bad dataset"
bad_case neg_step_eval 1 "neg_step.h5: attribute /step is -5" -- \
  "$EMBER" eval --checkpoint bad/neg_step.h5 --data data --max-batches 2
bad_case neg_step_inspect 1 "neg_step.h5: attribute /step is -5" -- "$EMBER" inspect bad/neg_step.h5
bad_case async_in_sync 1 "step_00000008.h5 was written in async mode.*training.mode = sync" -- "${resume[@]}" "$agood"
bad_case async_role nonzero "role.h5: attribute /ranks/1:role is \"banana\"" --timeout 120 -- \
  "${async[@]}" --run.dir=aresumed --training.steps=16 --resume bad/role.h5
bad_case_summary

# The other way round works: an async run starts from a sync checkpoint (fresh AdamW state and momentum).
timeout 300 "${async[@]}" --run.dir=from_sync --training.steps=24 --resume "$good" >from_sync.log 2>&1 ||
  { cat from_sync.log >&2; fail "an async run did not start from the sync checkpoint"; }
grep -q "notice: .*written in sync mode" from_sync.log && grep -q "done at step 24" from_sync.log ||
  { cat from_sync.log >&2; fail "async from a sync checkpoint: no notice or did not finish"; }
echo "ok: an async run resumes the sync checkpoint $good"
echo PASS
