#!/usr/bin/env bash
# CPU decoding speed of `ember serve` against Hugging Face transformers' generate (KV cache, use_cache=True) and
# CTranslate2 (fp32 and int8 runs) on the same model: time to first token and tokens/s of one stream, aggregate
# tokens/s of 1, 8 and 32 concurrent streams.
# The model is trained for one step (speed does not depend on the weights), exported with `ember export`, checked
# greedy token for token on both sides, then timed. Prints one table with the ratio; it is not a test.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment): model shape, new tokens per stream, repeats of the single-stream runs, threads, the Python with
# transformers and torch, the work folder (kept; by default a fresh one); EMBER_BUILD_DIR.
N_LAYER=${BENCH_N_LAYER:-6}
N_HEAD=${BENCH_N_HEAD:-6}
N_EMBD=${BENCH_N_EMBD:-384}
BLOCK_SIZE=${BENCH_BLOCK_SIZE:-512}
VOCAB=${BENCH_VOCAB:-256}  # rows of wte: above 256 (GPT-2's 50257) the byte tokenizer's model gets padding rows
PRECISION=${BENCH_PRECISION:-fp32}
TOKENS=${BENCH_TOKENS:-128}
REPEATS=${BENCH_REPEATS:-3}
THREADS=${BENCH_THREADS:-$(nproc)}
VENV_PYTHON=${EMBER_VENV_PYTHON:-$ROOT/.venv/bin/python}

require_positive N_LAYER N_HEAD N_EMBD BLOCK_SIZE VOCAB TOKENS REPEATS THREADS
(( TOKENS + 64 <= BLOCK_SIZE )) || die "64 prompt tokens + BENCH_TOKENS=$TOKENS exceed BENCH_BLOCK_SIZE=$BLOCK_SIZE" \
  "lower BENCH_TOKENS or raise BENCH_BLOCK_SIZE"
"$VENV_PYTHON" -c "import torch, transformers" 2>/dev/null ||
  die "$VENV_PYTHON cannot import torch and transformers" "run scripts/python_env.sh, or set EMBER_VENV_PYTHON"
# CTranslate2 (PyPI) beside them: fp32 runs compare with its float32 weights, int8 with its int8 ones; it has no bf16
# on the CPU, so bf16 runs leave it out.
case "$PRECISION" in fp32) CT2_TYPE=float32 ;; int8) CT2_TYPE=int8 ;; *) CT2_TYPE="" ;; esac
if [[ -n "$CT2_TYPE" ]] && ! "$VENV_PYTHON" -c "import ctranslate2" 2>/dev/null; then
  "$VENV_PYTHON" -m pip install --quiet ctranslate2 ||
    die "installing ctranslate2 into $VENV_PYTHON's environment failed" "pip install ctranslate2 there by hand"
fi

build_targets ember
EMBER=$(built ember)
DRIVER="$ROOT/scripts/bench/serve_bench.py"
export OMP_NUM_THREADS=$THREADS

WORK=$([[ -n "${BENCH_WORK:-}" ]] && from_caller "$BENCH_WORK" || mktemp -d /tmp/ember_serve_bench.XXXXXX)
mkdir -p "$WORK"
cd "$WORK"
echo "bench: work folder $WORK; model n_layer=$N_LAYER n_head=$N_HEAD n_embd=$N_EMBD block_size=$BLOCK_SIZE" \
  "vocab $VOCAB (bytes, padded); $TOKENS new tokens per stream; $THREADS threads; ember --precision $PRECISION"
"$EMBER" prep --input "$ROOT/src" --output data --val-fraction 0.1 >prep.log
"$EMBER" train --config "$ROOT/configs/tiny.ini" --data.dir=data --run.dir=run --training.steps=1 --eval.every=0 \
  --model.n_layer="$N_LAYER" --model.n_head="$N_HEAD" --model.n_embd="$N_EMBD" --model.block_size="$BLOCK_SIZE" \
  --model.vocab_size="$VOCAB" \
  --training.seq_len=64 >train.log 2>&1 || { tail train.log >&2; die "training the bench model failed" "see above"; }
ckpt=run/checkpoints/step_00000001.h5
"$EMBER" export --checkpoint "$ckpt" --output hf >export.log 2>&1 ||
  { cat export.log >&2; die "ember export failed" "the bench compares the same weights on both sides"; }

: >serve.err # read by the poll below, perhaps before the server's shell opens it
"$EMBER" serve --checkpoint "$ckpt" --port 0 --max-batch 32 --max-tokens-limit "$TOKENS" --precision "$PRECISION" \
  2>serve.err &
server_pid=$!
trap 'kill "$server_pid" 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1200); do  # up to a minute: loading a large model on a busy machine
  port=$(sed -n 's|^serve: .* listening on http://127.0.0.1:\([0-9]*\)$|\1|p' serve.err)
  [[ -n "$port" ]] && break
  sleep 0.05
done
[[ -n "$port" ]] || { cat serve.err >&2; die "ember serve did not start" "see above"; }
url=http://127.0.0.1:$port

# The same model on both sides: greedy tokens agree in fp32 (bf16 rounds ember's weights, so it may not).
if [[ "$PRECISION" == fp32 ]]; then
  "$VENV_PYTHON" "$DRIVER" greedy "$url" hf --tokens "$TOKENS"
fi
"$VENV_PYTHON" "$DRIVER" ember "$url" ember.json --tokens "$TOKENS" --repeats "$REPEATS"
kill -TERM "$server_pid"
wait "$server_pid" || die "ember serve exited with an error after SIGTERM" "see $WORK/serve.err"
trap - EXIT
# transformers at 1 thread and at $THREADS, the better of the two for each number.
"$VENV_PYTHON" "$DRIVER" hf hf hf.json --tokens "$TOKENS" --repeats "$REPEATS" --threads "$(
  [[ $THREADS -gt 1 ]] && echo "1,$THREADS" || echo 1)"
ct2_json=""
if [[ -n "$CT2_TYPE" ]]; then
  "$VENV_PYTHON" "$DRIVER" ct2 hf ct2.json --tokens "$TOKENS" --repeats "$REPEATS" --threads "$THREADS" \
    --compute-type "$CT2_TYPE"
  ct2_json=ct2.json
fi
echo
"$VENV_PYTHON" "$DRIVER" table ember.json hf.json $ct2_json
# Timings on a shared machine mean little: say how busy it was.
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
