#!/usr/bin/env bash
# Streaming prep: a 300 MB generated text file is prepped with bounded memory, and the shards read back by a reader
# written from llm.c's format description alone (256 little-endian int32 header, then uint16 tokens).
here=$(cd "$(dirname "$0")" && pwd)
source "$here/support/common.bash"

# 300 MB of text from a fast generator: a 1 MiB block of random words, each repeat with its letters shifted, so the
# file does not repeat itself exactly.
MB=300
"$PYTHON" - "$MB" <<'PY'
import sys, numpy as np
mb = int(sys.argv[1])
rng = np.random.default_rng(7)
block = rng.integers(97, 123, size=1 << 20, dtype=np.uint8)
block[rng.random(1 << 20) < 0.15] = 32
block[rng.random(1 << 20) < 0.01] = 10
with open("big.txt", "wb") as f:
    for i in range(mb * 10**6 // (1 << 20)):
        f.write(((block - 97 + i) % 26 + 97).astype(np.uint8) * (block >= 97) + block * (block < 97))
    f.write(block[: mb * 10**6 % (1 << 20)].tobytes())
PY
bytes=$(stat -c %s big.txt)

# The bound is on what prep adds to the process's resting size, measured first with a tiny input: a build with CUDA
# maps its GPU libraries and kernel images at start (about 200 MB of RSS), one without does not (about 25 MB).
# The pipeline holds about threads + 4 pieces of 1 MiB text and their tokens (2 MiB as uint16), 4 MiB of int32 ids
# per encoder thread, 1 MiB of write buffer per open shard and the reader's few-MiB buffer: well under 100 MB even at
# 16 threads. 128 MB leaves headroom and still fails if anything grows with the 300 MB input or the 100M-token shards.
printf 'a few words\n' > tiny.txt
/usr/bin/time -v "$EMBER" prep --input tiny.txt --output tiny --val-fraction 0 > /dev/null 2> time_tiny.log ||
  { cat time_tiny.log >&2; fail "prep of a tiny file failed"; }
base_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' time_tiny.log)
LIMIT_KB=$((base_kb + 128 * 1024))
# Under AddressSanitizer (scripts/sanitize.sh sets ASAN_OPTIONS) freed memory waits in a quarantine of 256 MB before
# reuse, which shows in the peak RSS: the bound grows by that much there, and still fails if prep held its input.
if [ -n "${ASAN_OPTIONS:-}" ]; then LIMIT_KB=$((LIMIT_KB + 256 * 1024)); fi
t0=$(date +%s.%N)
/usr/bin/time -v "$EMBER" prep --input big.txt --output data --val-fraction 0.01 --shard-tokens 100000000 \
  > prep.log 2> time.log || { cat prep.log time.log >&2; fail "prep failed"; }
t1=$(date +%s.%N)
rm -f big.txt
rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' time.log)
mbps=$("$PYTHON" -c "print(f'{$bytes / 1e6 / ($t1 - $t0):.1f}')")
echo "prep of $((bytes / 1000000)) MB: ${mbps} MB/s, peak RSS $((rss_kb / 1024)) MB (at rest $((base_kb / 1024)) MB, bound $((LIMIT_KB / 1024)) MB)"
# A progress line every 5 s: there must be one when the prep ran for longer than that (with margin).
if "$PYTHON" -c "import sys; sys.exit(0 if $t1 - $t0 > 6 else 1)"; then
  grep -q "MB/s" prep.log || { cat prep.log >&2; fail "no progress line in the prep log"; }
fi
[ "$rss_kb" -lt "$LIMIT_KB" ] || fail "peak RSS ${rss_kb} kB is over the ${LIMIT_KB} kB bound"

# Read every shard from the format description: header[0] = 20240520, [1] = 1, [2] = token count, then uint16.
"$PYTHON" - "$bytes" <<'PY' || fail "shards do not read back as llm.c's format"
import sys, glob, os, numpy as np
total = 0
for split in ("train", "val"):
    paths = sorted(glob.glob(f"data/{split}_*.bin"))
    assert paths, f"no {split} shards"
    for p in paths:
        header = np.fromfile(p, dtype="<i4", count=256)
        assert header[0] == 20240520 and header[1] == 1, (p, header[:3])
        assert os.path.getsize(p) == 1024 + 2 * int(header[2]), p
        tokens = np.memmap(p, dtype="<u2", mode="r", offset=1024)
        assert len(tokens) == header[2] and tokens.max() < 256, p
        total += int(header[2])
want = int(sys.argv[1])
assert total == want, f"{total} tokens in the shards, {want} bytes in the input"
print(f"ok: {total} tokens in {len(glob.glob('data/*.bin'))} shards, as many as input bytes")
PY
