# The table runner of the bad-input suites (tests/e2e/bad_input*.sh): each case is one row, a command that must fail
# cleanly. Source it after common.bash. A row:
#   bad_case NAME RC PATTERN [--timeout SECONDS] -- COMMAND [ARGS...]
# passes when COMMAND
#   - exits with RC (a number, or "nonzero" for any failing code) within SECONDS (default 60; past it the command is
#     killed and the case counts as a hang),
#   - prints at least one line "error: ...PATTERN..." (optionally after a "[rank r] " prefix) and a "hint: " line on
#     stderr, and no second, different error line from the same rank,
#   - and leaves every file under the paths given to `protect` byte for byte as it was.
# bad_case_summary prints the figures (cases, clean errors, hangs, data lost, crashes) and fails the script on any
# failed case. Outputs of each case are kept in $WORK/cases/NAME.{out,err}.

BAD_CASES=0
BAD_CLEAN=0
BAD_HANGS=0
BAD_LOST=0
BAD_CRASHES=0
BAD_FAILED=()
BAD_PROTECTED=()

# protect PATH...: the outputs no bad input may touch (checksummed before every case and compared after it).
protect() {
  BAD_PROTECTED+=("$@")
  bad_snapshot > "$WORK/protected.md5"
}

# The run folder's lock (ember.lock) is not an output: when one rank's error aborts the job, the rank holding the lock
# may be killed before it removes it, and the next run reclaims a lock whose holder is gone (e2e_run_folder_lock).
bad_snapshot() {
  [ "${#BAD_PROTECTED[@]}" -gt 0 ] || return 0
  (cd "$WORK" && find "${BAD_PROTECTED[@]}" -type f ! -name ember.lock -print0 2>/dev/null | sort -z |
    xargs -0 -r md5sum)
}

bad_case() {
  local name=$1 want=$2 pattern=$3 timeout=60
  shift 3
  if [ "${1:-}" = "--timeout" ]; then
    timeout=$2
    shift 2
  fi
  [ "${1:-}" = "--" ] || fail "bad_case $name: expected -- before the command"
  shift
  mkdir -p "$WORK/cases"
  local out="$WORK/cases/$name.out" err="$WORK/cases/$name.err" rc=0 problem=""
  local t0=$SECONDS
  timeout --kill-after=10 "$timeout" "$@" > "$out" 2> "$err" < /dev/null || rc=$?
  local took=$((SECONDS - t0))
  BAD_CASES=$((BAD_CASES + 1))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    problem="hang: still running after ${timeout}s"
    BAD_HANGS=$((BAD_HANGS + 1))
  elif [ "$rc" -ge 128 ] && [ "$rc" -ne 137 ]; then
    problem="crash: killed by signal $((rc - 128))"
    BAD_CRASHES=$((BAD_CRASHES + 1))
  elif [ "$want" = "nonzero" ] && [ "$rc" -eq 0 ]; then
    problem="exit 0, expected a failure"
  elif [ "$want" != "nonzero" ] && [ "$rc" -ne "$want" ]; then
    problem="exit $rc, expected $want"
  elif ! grep -Eq "^(\[rank [0-9]+\] )?error: .*$pattern" "$err"; then
    problem="no 'error: ...$pattern' line"
  elif ! grep -Eq "^(\[rank [0-9]+\] )?hint: " "$err"; then
    problem="no hint line"
  elif [ -n "$(grep -E "^(\[rank [0-9]+\] )?error: " "$err" | sed -E 's/^(\[rank [0-9]+\] )?error: .*/r:\1/' | sort | uniq -d)" ]; then
    problem="more than one error line from one rank"
  fi
  if [ -n "${BAD_PROTECTED[*]:-}" ] && ! bad_snapshot | cmp -s - "$WORK/protected.md5"; then
    problem="${problem:+$problem; }earlier outputs changed"
    BAD_LOST=$((BAD_LOST + 1))
    bad_snapshot | diff "$WORK/protected.md5" - >&2 || true
    bad_snapshot > "$WORK/protected.md5"  # report each loss once
  fi
  if [ -n "$problem" ]; then
    BAD_FAILED+=("$name")
    echo "FAIL: $name ($took s): $problem" >&2
    sed 's/^/    /' "$err" | tail -20 >&2
  else
    BAD_CLEAN=$((BAD_CLEAN + 1))
    echo "ok: $name ($took s, exit $rc) -> $(grep -Em1 "^(\[rank [0-9]+\] )?error: " "$err")"
  fi
}

bad_case_summary() {
  echo "bad-input figures: $BAD_CASES cases, $BAD_CLEAN clean errors, $BAD_HANGS hangs, $BAD_LOST data lost," \
    "$BAD_CRASHES crashes"
  [ "${#BAD_FAILED[@]}" -eq 0 ] || fail "${#BAD_FAILED[@]} case(s) failed: ${BAD_FAILED[*]}"
}
