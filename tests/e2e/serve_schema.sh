#!/usr/bin/env bash
# `ember serve` against its own /openapi.json with schemathesis (property-based: requests generated from the schema,
# valid and invalid): no 5xx, every status, content type, header and body as documented, invalid requests refused
# with 4xx; then again with --api-key, where every route but /health must refuse a request without the key.
source "$(dirname "$0")/support/common.bash"
source "$(dirname "$0")/support/serve.bash"
VPY=${EMBER_VENV_PYTHON:?set EMBER_VENV_PYTHON to the venv of scripts/python_env.sh}
ST="$(dirname "$VPY")/schemathesis"
[ -x "$ST" ] || { echo "SKIP: no $ST (run scripts/python_env.sh)"; exit 77; }

tiny_checkpoint
CHECKS=not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance
CHECKS=$CHECKS,response_headers_conformance,negative_data_rejection,unsupported_method

# schemathesis exits non-zero on any failed check; the server's own log must show no 5xx either.
run_schemathesis() {
  local name=$1
  shift
  "$ST" run "http://127.0.0.1:$port/openapi.json" --checks "$CHECKS" --max-examples 150 --request-timeout 30 \
    "$@" > "$name.log" 2>&1 || { tail -60 "$name.log" >&2; fail "$name: schemathesis found failures"; }
  grep -E "^Test cases:|generated" "$name.log" | tail -1
  if grep -E '^serve: \S+ \S+ \S+ 5[0-9][0-9] ' "$name.err"; then fail "$name: 5xx in the server's log"; fi
  echo "ok: $name: $(grep -o '[0-9]* generated, [0-9]* passed' "$name.log" | tail -1)"
}

start_server plain --checkpoint "$ckpt" --max-tokens-limit 64
run_schemathesis plain
kill -TERM "$server_pid"
wait_exit plain

start_server keyed --checkpoint "$ckpt" --max-tokens-limit 64 --api-key sch3ma-key
CHECKS=$CHECKS,ignored_auth
run_schemathesis keyed -H "Authorization: Bearer sch3ma-key"
kill -TERM "$server_pid"
wait_exit keyed
echo PASS
