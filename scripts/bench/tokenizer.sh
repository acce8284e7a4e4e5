#!/usr/bin/env bash
# Tokenizer benchmark: Ember's BPE encode against tiktoken and Hugging Face tokenizers on the same text and the same
# vocabulary (trained here with `ember tokenizer train`), ids checked equal first; prints tokens/s, MB/s and ratios.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

# Knobs (environment): text (default: the repository and licence texts repeated to BENCH_MB), vocabulary size,
# threads for the parallel variants, timed rounds per variant; EMBER_BUILD_DIR.
TEXT=$([[ -n "${BENCH_TEXT:-}" ]] && from_caller "$BENCH_TEXT" || echo "")
MB=${BENCH_MB:-50}
VOCAB=${BENCH_VOCAB:-32768}
THREADS=${BENCH_THREADS:-$(nproc)}
ROUNDS=${BENCH_ROUNDS:-3}
PYTHON=$ROOT/.venv/bin/python

require_positive MB VOCAB THREADS ROUNDS
[[ -z "$TEXT" || -f "$TEXT" ]] || die "BENCH_TEXT=$TEXT is not a file" "give a UTF-8 text file, or leave it unset"
bash scripts/python_env.sh

build_targets ember bench_tokenizer
EMBER=$(built ember)
work_folder tokenizer-bench

# The default text: every UTF-8 text file of the repository and the licence texts, repeated up to BENCH_MB.
if [[ -z "$TEXT" ]]; then
  TEXT=$WORK/text.txt
  "$PYTHON" - "$TEXT" "$MB" src tests scripts docs README.md /usr/share/common-licenses <<'PY'
import os, sys
out, mb, roots = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
parts = []
for root in roots:
    paths = [root] if os.path.isfile(root) else sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)
    for p in paths:
        data = open(p, "rb").read()
        try:
            if b"\0" not in data:
                parts.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            pass
base = "\n".join(parts)
with open(os.path.join(os.path.dirname(out), "base.txt"), "w", encoding="utf-8") as f:
    f.write(base)
with open(out, "w", encoding="utf-8") as f:
    f.write((base * (mb * 10**6 // len(base.encode()) + 1))[: mb * 10**6])
PY
fi

# The vocabulary is trained on the text once over (a repeated text adds nothing but time).
[[ -f $WORK/base.txt ]] || cp "$TEXT" "$WORK/base.txt"
"$EMBER" tokenizer train --input "$WORK/base.txt" --vocab-size "$VOCAB" --output "$WORK/tok" --threads "$THREADS" >&2
"$(built tests/bench/bench_tokenizer)" --tokenizer "$WORK/tok" --text "$TEXT" --threads "$THREADS" \
  --rounds "$ROUNDS" --ids-out "$WORK/ids.bin" | tee "$WORK/ember.txt"
RAYON_NUM_THREADS=$THREADS "$PYTHON" tests/bench/tokenizer_reference.py --tokenizer "$WORK/tok" --text "$TEXT" \
  --ember-ids "$WORK/ids.bin" --ember-results "$WORK/ember.txt" --threads "$THREADS" --rounds "$ROUNDS"

# Prep throughput: the same text and vocabulary through `ember prep` (reader, THREADS encoders, shard writer), end to
# end with the process start; peak memory from GNU time.
"$EMBER" prep --input "$TEXT" --tokenizer "$WORK/tok" --output "$WORK/prep" --threads "$THREADS" >/dev/null 2>&1
t0=$(date +%s.%N)
/usr/bin/time -v "$EMBER" prep --input "$TEXT" --tokenizer "$WORK/tok" --output "$WORK/prep" --threads "$THREADS" \
  --overwrite >"$WORK/prep.log" 2>"$WORK/prep_time.log" || { cat "$WORK/prep.log" "$WORK/prep_time.log" >&2; die "prep failed" \
  "run the prep command above by hand"; }
t1=$(date +%s.%N)
rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/prep_time.log")
"$PYTHON" -c "import os; b = os.path.getsize('$TEXT'); s = $t1 - $t0
print(f'ember prep ({b / 1e6:.1f} MB, {$THREADS} threads): {s:.2f} s, {b / 1e6 / s:.1f} MB/s, peak RSS {$rss_kb / 1024:.0f} MB')"
