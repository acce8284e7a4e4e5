#!/usr/bin/env bash
# `ember serve` against real clients (serve_client.py, standard library only, and curl): the OpenAI completions API,
# streaming, 32 concurrent clients batched by the engine, every kind of bad request, a queue full, a client leaving
# mid-stream, a request past --timeout, and SIGTERM while a stream is in flight (it finishes; exit 0).
source "$(dirname "$0")/support/common.bash"
source "$(dirname "$0")/support/serve.bash"
CLIENT="$SRC/tests/e2e/support/serve_client.py"

# tiny: block_size 32. long: a context of 1024 and enough width that a 1000-token stream lasts about a second.
tiny_checkpoint
"$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run_long --training.steps=2 --eval.every=0 \
  --model.n_layer=4 --model.n_head=6 --model.n_embd=384 --model.block_size=1024 > train_long.log
long=run_long/checkpoints/step_00000002.h5

"$EMBER" generate --checkpoint "$ckpt" --prompt "int main" --temperature 0 --max-new-tokens 20 > generate.txt

# A bad command line is refused before anything loads.
expect_error bad_port "--port = 70000 must be" "$EMBER" serve --checkpoint "$ckpt" --port 70000
expect_error bad_step "--max-step-tokens 4 is less than --max-batch 8" \
  "$EMBER" serve --checkpoint "$ckpt" --max-batch 8 --max-step-tokens 4

start_server tiny --checkpoint "$ckpt" --max-tokens-limit 256
grep -q "listening on http://127.0.0.1:" tiny.err || fail "not bound to 127.0.0.1 by default"
"$PYTHON" "$CLIENT" tiny "$port" generate.txt

# curl: one completion, one stream.
curl -sS --fail-with-body "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"model": "step_00000030", "prompt": "int main", "max_tokens": 20, "temperature": 0}' > curl.json
"$PYTHON" - "$WORK/curl.json" "$WORK/generate.txt" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
gen = open(sys.argv[2], errors="replace").read()
assert j["object"] == "text_completion" and gen == "int main" + j["choices"][0]["text"] + "\n", (j, gen)
PY
curl -sS -N --fail-with-body "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "int main", "max_tokens": 12, "stream": true}' > curl_stream.txt
[ "$(grep -c '^data: {' curl_stream.txt)" -ge 2 ] || { cat curl_stream.txt >&2; fail "curl stream: too few chunks"; }
[ "$(grep -v '^$' curl_stream.txt | tail -1)" = "data: [DONE]" ] || fail "curl stream: no final [DONE]"
echo "ok: curl completion and stream"

# The access log: one line per request with method, path, status, latency and tokens.
grep -q '^serve: 127.0.0.1 POST /v1/completions 200 [0-9.]* ms prompt_tokens=8 completion_tokens=20$' tiny.err ||
  fail "no access log line for a completion"
grep -q '^serve: 127.0.0.1 POST /v1/completions 413 ' tiny.err || fail "no access log line for the 413"
kill -TERM "$server_pid"
wait_exit tiny

# Queue full, a client leaving mid-stream; then SIGTERM while a stream is in flight.
start_server long --checkpoint "$long" --max-batch 2 --max-queue 1
"$PYTHON" "$CLIENT" long "$port"
"$PYTHON" "$CLIENT" sigterm "$port" "$server_pid"
wait_exit long
grep -q '^serve: signal 15: finishing the requests in flight' long.err || fail "no shutdown line"

# --api-key (here from EMBER_API_KEY): 401 without the bearer token or with another, the OpenAI error body, /health
# open; the right key gets through.
EMBER_API_KEY=s3cret-key start_server key --checkpoint "$ckpt"
status() { curl -sS -o "$1.json" -w '%{http_code}' "${@:2}"; }
[ "$(status nokey "http://127.0.0.1:$port/v1/models")" = 401 ] || fail "api key: no key was let in"
grep -q '"code":"missing_api_key"' nokey.json || { cat nokey.json >&2; fail "api key: no missing_api_key error body"; }
[ "$(status badkey -H 'Authorization: Bearer s3cret-kez' "http://127.0.0.1:$port/v1/models")" = 401 ] ||
  fail "api key: a wrong key was let in"
grep -q '"code":"invalid_api_key"' badkey.json || fail "api key: no invalid_api_key error body"
[ "$(status prefix -H 'Authorization: Bearer s3cret-key-and-more' "http://127.0.0.1:$port/v1/models")" = 401 ] ||
  fail "api key: a key with the right prefix was let in"
[ "$(status post -H 'Content-Type: application/json' -d '{"prompt": "x", "max_tokens": 1}' \
  "http://127.0.0.1:$port/v1/completions")" = 401 ] || fail "api key: a completion without the key was served"
[ "$(status health "http://127.0.0.1:$port/health")" = 200 ] || fail "api key: /health needs no key"
[ "$(status goodkey -H 'Authorization: Bearer s3cret-key' "http://127.0.0.1:$port/v1/models")" = 200 ] ||
  fail "api key: the right key was refused"
[ "$(status goodpost -H 'Authorization: Bearer s3cret-key' -H 'Content-Type: application/json' \
  -d '{"prompt": "x", "max_tokens": 1}' "http://127.0.0.1:$port/v1/completions")" = 200 ] ||
  fail "api key: a completion with the key was refused"
grep -q "without --api-key" key.err && fail "api key: a warning although a key is set"
kill -TERM "$server_pid"
wait_exit key
# Every interface without a key: served, with a warning naming the risk.
"$EMBER" serve --port 0 --host 0.0.0.0 --checkpoint "$ckpt" > open.out 2> open.err &
server_pid=$!
for _ in $(seq 200); do grep -q "listening on" open.err && break; sleep 0.05; done
grep -q "^warning: serve: listening on 0.0.0.0 without --api-key" open.err || { cat open.err >&2; fail "no warning"; }
kill -TERM "$server_pid"
wait_exit open
echo "ok: --api-key: 401 without or with a wrong key, /health open, a warning on 0.0.0.0 without one"

start_server timeout --checkpoint "$long" --timeout 0.3
"$PYTHON" "$CLIENT" timeout "$port"
kill -INT "$server_pid"
wait_exit timeout
echo PASS
