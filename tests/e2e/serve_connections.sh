#!/usr/bin/env bash
# `ember serve` at the connection level (serve_http.py: raw sockets and asyncio): 300 idle connections beside
# /health and a completion, slow headers and bodies answered 408, half-close, pipelining, keep-alive,
# Expect: 100-continue, no compression, the connection past --max-connections answered 503, and 500 clients at once
# getting only 200s and 429s, never a reset.
source "$(dirname "$0")/support/common.bash"
source "$(dirname "$0")/support/serve.bash"
CLIENT="$SRC/tests/e2e/support/serve_http.py"

tiny_checkpoint
# 300 idle connections and the client's own: the test's and the server's descriptors stay within 1024 each.
ulimit -n 4096 2>/dev/null || true

start_server conn --checkpoint "$ckpt" --read-timeout 1
"$PYTHON" "$CLIENT" connections "$port" 1
grep -q '^serve: 127.0.0.1 GET /health 408 ' conn.err || fail "no access log line for the 408"
kill -TERM "$server_pid"
wait_exit conn

start_server limit --checkpoint "$ckpt" --max-connections 8
"$PYTHON" "$CLIENT" max_connections "$port" 8
kill -TERM "$server_pid"
wait_exit limit

# A queue shorter than the burst: the rest must be told 429, not reset.
start_server load --checkpoint "$ckpt" --max-batch 16 --max-queue 64
"$PYTHON" "$CLIENT" load "$port" 500
kill -TERM "$server_pid"
wait_exit load
echo PASS
