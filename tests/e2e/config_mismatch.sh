#!/usr/bin/env bash
# Ranks with different configurations: an MPMD launch that gives one rank another override must stop at start-up on
# every rank with one error naming the first differing rank and key, a hint and a non-zero exit, quickly, with nothing
# written into the run directory. Ranks that resolve the same configuration (by different arguments) still train.
source "$(dirname "$0")/support/common.bash"

command -v mpirun >/dev/null || fail "mpirun is not on PATH (install openmpi-bin)"

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >prep.log 2>&1 ||
  { cat prep.log >&2; fail "prep"; }

# The arguments of every rank; a case appends its per-rank overrides.
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --training.steps=3 --eval.every=0
       --checkpoint.interval=0 --run.log_every=1)

# launch NAME RUN_DIR MPIRUN_ARGS...: runs mpirun under a 60 s timeout (far above a start-up check, far below a hang;
# timeout exits 124 on expiry); sets rc and elapsed, output in NAME.out and NAME.err.
launch() {
  local name=$1
  shift
  rc=0
  local start=$SECONDS
  timeout 60 mpirun --oversubscribe "$@" >"$name.out" 2>"$name.err" || rc=$?
  elapsed=$((SECONDS - start))
}
show() { echo "--- $1 stdout" >&2; cat "$1.out" >&2; echo "--- $1 stderr" >&2; cat "$1.err" >&2; }

# expect_mismatch NAME RUN_DIR PATTERN: the launch failed quickly with "error: ...PATTERN" (main prefixes each rank's
# lines with "[rank r] " when several run), a hint, and left RUN_DIR without any file.
expect_mismatch() {
  local name=$1 run=$2 pattern=$3
  [ "$rc" -ne 124 ] || { show "$name"; fail "$name: hung, killed by the timeout after 60 s"; }
  [ "$rc" -ne 0 ] || { show "$name"; fail "$name: exited 0, ranks with different configs were accepted"; }
  grep -Eq "^(\[rank [0-9]+\] )?error: config differs between ranks: $pattern" "$name.err" ||
    { show "$name"; fail "$name: no 'error: config differs between ranks: $pattern' line"; }
  grep -Eq '^(\[rank [0-9]+\] )?hint: .+' "$name.err" || { show "$name"; fail "$name: no hint line"; }
  # Every rank throws the same error, so whichever ranks got to print before the abort printed the same line.
  [ "$(grep -E '^(\[rank [0-9]+\] )?error: ' "$name.err" | sed -E 's/^\[rank [0-9]+\] //' | sort -u | wc -l)" -eq 1 ] ||
    { show "$name"; fail "$name: ranks printed different errors"; }
  [ -z "$(find "$run" -type f 2>/dev/null)" ] || { find "$run" -type f >&2; fail "$name: files written into $run"; }
  echo "ok: $name refused in ${elapsed}s (exit $rc): $(grep -m1 -E 'error: ' "$name.err")"
}

# 1. Two ranks, rank 1 with another sequence length.
launch seq_len -np 1 "${train[@]}" --run.dir=run1 : -np 1 "${train[@]}" --run.dir=run1 --training.seq_len=16
expect_mismatch seq_len run1 'rank 1: training\.seq_len = 16, rank 0: training\.seq_len = 32'

# 2. Four ranks, ranks 2 and 3 differ in different keys: the first differing rank and its first differing line are
#    named (the check runs before the topology check, so a size that would be refused later makes no difference).
launch two_ranks_differ -np 2 "${train[@]}" --run.dir=run2 : -np 1 "${train[@]}" --run.dir=run2 --optimizer.lr=0.001 \
  : -np 1 "${train[@]}" --run.dir=run2 --training.seq_len=16
expect_mismatch two_ranks_differ run2 \
  'rank 2: optimizer\.lr = [0-9.e-]+, rank 0: optimizer\.lr = [0-9.e-]+ \(2 of 4 ranks differ'

# 3. Async mode (center + 2 workers): worker rank 2 syncs every 4 local steps instead of the default; the job stops
#    before the center opens its window.
launch async -np 2 "${train[@]}" --training.mode=async --run.dir=run4 \
  : -np 1 "${train[@]}" --training.mode=async --run.dir=run4 --async.local_steps=4
expect_mismatch async run4 'rank 2: async\.local_steps = 4, rank 0: async\.local_steps = [0-9]+'

# 4. The same resolved configuration reached by different arguments (rank 1 repeats the INI's seq_len on the command
#    line) passes the check and trains.
launch same -np 1 "${train[@]}" --run.dir=run3 : -np 1 "${train[@]}" --run.dir=run3 --training.seq_len=32
[ "$rc" -eq 0 ] || { show same; fail "same config by different arguments: exit $rc, expected 0"; }
[ "$(grep -c '"step"' run3/metrics.jsonl)" -eq 3 ] || { show same; fail "same config: not 3 steps in metrics.jsonl"; }
echo "ok: same resolved config on both ranks trained 3 steps in ${elapsed}s"
echo PASS
