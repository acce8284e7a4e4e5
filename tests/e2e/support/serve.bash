# Helpers for the scripts that test `ember serve` (after common.bash): start a server on a free port, stop it.
server_pid=""
stop_server() { if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill -KILL "$server_pid"; fi; }
trap stop_server EXIT

# start_server NAME ARGS...: starts `ember serve` on a free port in the background; sets server_pid and port.
start_server() {
  local name=$1
  shift
  # The log exists before the poll reads it: the background shell may not have opened it yet, and a sed of a missing
  # file inside `port=$(...)` would end the script under `set -e` with no word of why.
  : > "$name.err"
  "$EMBER" serve --port 0 "$@" > "$name.out" 2> "$name.err" &
  server_pid=$!
  port=""
  for _ in $(seq 200); do
    port=$(sed -n 's|^serve: .* listening on http://127.0.0.1:\([0-9]*\)$|\1|p' "$name.err")
    [ -n "$port" ] && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$name.err" >&2; fail "$name: the server exited at start"; }
    sleep 0.05
  done
  [ -n "$port" ] || { cat "$name.err" >&2; fail "$name: no listening line"; }
}

# wait_exit NAME: after a SIGTERM, the exit status must be 0 within 20 s.
wait_exit() {
  local name=$1 rc=0
  for _ in $(seq 400); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$server_pid" 2>/dev/null && { cat "$name.err" >&2; fail "$name: still running 20 s after SIGTERM"; }
  wait "$server_pid" || rc=$?
  [ "$rc" -eq 0 ] || { tail "$name.err" >&2; fail "$name: exit status $rc after SIGTERM"; }
  grep -q '^serve: stopped$' "$name.err" || fail "$name: no 'serve: stopped' line"
}

# tiny_checkpoint: a prep of the source tree and 30 steps of the tiny config; sets ckpt.
tiny_checkpoint() {
  "$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 > prep.log
  "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run --training.steps=30 --eval.every=0 \
    > train.log
  ckpt=run/checkpoints/step_00000030.h5
}
