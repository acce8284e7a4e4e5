#!/usr/bin/env bash
# Builds Ember's libFuzzer targets (clang, ASan + UBSan, build-fuzz/), gathers their seed corpora and runs each for
# a given time. A crash, a sanitizer report or a broken property stops that target with its input saved under
# build-fuzz/crashes/; the summary lists every target's runs, corpus and findings, and the exit status is 1 if any.
#
#   scripts/fuzz.sh [--seconds N] [--jobs J] [TARGET...]    (default: 60 s each, every target, one at a time)
#   scripts/fuzz.sh --build-only
#
# Targets: vocab_merges tokenizer_json tiktoken safetensors jsonl openai_request checkpoint_meta. A finding becomes a
# regression test in the unit suite of its reader; docs/testing.md, "Fuzzing", says how to reproduce one.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BUILD=${EMBER_FUZZ_BUILD:-$ROOT/build-fuzz}
ALL=(vocab_merges tokenizer_json tiktoken safetensors jsonl openai_request checkpoint_meta)

fail() {
  echo "error: fuzz: $1" >&2
  echo "hint: $2" >&2
  exit 2
}

seconds=60 jobs=1 build_only=false targets=()
while (($#)); do
  case $1 in
    --seconds) seconds=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --build-only) build_only=true; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) fail "unknown option $1" "see scripts/fuzz.sh --help" ;;
    *) [[ " ${ALL[*]} " == *" $1 "* ]] || fail "no target '$1'" "one of: ${ALL[*]}"; targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${ALL[@]}")
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || fail "--seconds $seconds is not a positive integer" "e.g. --seconds 1800"
[[ $jobs =~ ^[0-9]+$ && $jobs -gt 0 ]] || fail "--jobs $jobs is not a positive integer" "e.g. --jobs 2"

bash scripts/setup.sh
# clang with libFuzzer and its OpenMP runtime: only this script needs them.
missing=()
for p in clang libclang-rt-14-dev libomp-14-dev; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >/dev/null ||
    fail "cannot install ${missing[*]}" "install them by hand (apt-get install ${missing[*]}), then run again"
fi
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DEMBER_FUZZ=ON -DEMBER_CUDA=OFF \
    -DEMBER_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$BUILD.configure.log" 2>&1 ||
    fail "cmake failed (see $BUILD.configure.log)" "check that clang builds C++20 here"
fi
cmake --build "$BUILD" -j"$(nproc)" >"$BUILD/build.log" 2>&1 || fail "the build failed (see $BUILD/build.log)" \
  "fix the error it names; the fuzz build is clang's, the usual build gcc's"
$build_only && { echo "fuzz: built in $BUILD/fuzz"; exit 0; }

# Seed corpora: the hand-made ones in fuzz/seeds, and real files Ember writes (a trained tokenizer, an export).
CORPUS=$BUILD/corpus SEEDS=$BUILD/seeds
mkdir -p "$CORPUS" "$BUILD/crashes" "$BUILD/logs"
if [[ ! -f $SEEDS/.done ]]; then
  rm -rf "$SEEDS" && mkdir -p "$SEEDS"
  cp -r fuzz/seeds/. "$SEEDS/"
  mkdir -p "$SEEDS/vocab_merges" "$SEEDS/tokenizer_json" "$SEEDS/checkpoint_meta" "$BUILD/seed-files"
  ASAN_OPTIONS=detect_leaks=0 "$BUILD/ember" tokenizer train --input src/tokenizer --vocab-size 320 \
    --output "$BUILD/seed-files/tok" --overwrite >/dev/null
  split=$'\n--8<--\n'
  text='int main() { return "the théâtre" + 42; } <|endoftext|> tail'
  { cat "$BUILD/seed-files/tok/vocab.json"; printf '%s' "$split"; cat "$BUILD/seed-files/tok/merges.txt"; printf '%s%s' "$split" "$text"; } \
    >"$SEEDS/vocab_merges/trained"
  { cat "$BUILD/seed-files/tok/tokenizer.json"; printf '%s%s' "$split" "$text"; } >"$SEEDS/tokenizer_json/trained"
  ASAN_OPTIONS=detect_leaks=0 "$BUILD/ember" export --checkpoint tests/fixtures/checkpoint_v1_sync_np2.h5 \
    --output "$BUILD/seed-files/export" --overwrite >/dev/null
  cp "$BUILD/seed-files/export/model.safetensors" "$SEEDS/safetensors/exported.safetensors"
  printf '' >"$SEEDS/checkpoint_meta/keep"
  head -c 256 /dev/urandom >"$SEEDS/checkpoint_meta/random"
  touch "$SEEDS/.done"
fi

run_one() {
  local t=$1 dict=()
  [[ $t == tiktoken || $t == checkpoint_meta ]] || dict=(-dict="$ROOT/fuzz/json.dict")
  mkdir -p "$CORPUS/$t"
  # Leaks are reported at exit only; the readers' own allocations are what matter, so they stay on.
  "$BUILD/fuzz/fuzz_$t" "${dict[@]}" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -max_len=1048576 \
    -print_final_stats=1 -artifact_prefix="$BUILD/crashes/$t-" "$CORPUS/$t" "$SEEDS/$t" >"$BUILD/logs/$t.log" 2>&1
}

echo "fuzz: ${targets[*]}: $seconds s each, $jobs at a time (logs in $BUILD/logs)"
status=()
running=0
declare -A pid_of
for t in "${targets[@]}"; do
  run_one "$t" &
  pid_of[$t]=$!
  running=$((running + 1))
  if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
done
for t in "${targets[@]}"; do
  if wait "${pid_of[$t]}"; then status+=("$t:0"); else status+=("$t:1"); fi
done

found=0
printf '%-16s %12s %10s %8s %s\n' target runs exec/s corpus findings
for entry in "${status[@]}"; do
  t=${entry%%:*} rc=${entry##*:}
  log=$BUILD/logs/$t.log
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  files=$(find "$CORPUS/$t" -type f | wc -l)
  crashes=$(find "$BUILD/crashes" -name "$t-*" -type f | wc -l)
  what="none"
  if [[ $rc != 0 || $crashes != 0 ]]; then
    found=1
    what="$crashes input(s) in $BUILD/crashes/$t-*: $(grep -m1 -E 'ERROR: |SUMMARY: |property broken|runtime error' "$log" || echo "see $log")"
  fi
  printf '%-16s %12s %10s %8s %s\n' "$t" "${runs:-?}" "${rate:-?}" "$files" "$what"
done
exit $found
