#!/usr/bin/env bash
# Damaged newest checkpoint (bytes flipped mid-file, cut to half, one tensor failing its checksum): `--resume auto`
# warns, falls back to the previous valid checkpoint and trains on; naming the damaged file is an error with a hint.
source "$(dirname "$0")/support/common.bash"
export OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src" --output data --val-fraction 0.1 >/dev/null
train=("$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --eval.every=0 --checkpoint.interval=10
       --checkpoint.keep_latest_k=3)

# damage_middle FILE: inverts 4 KiB in the middle of FILE in place (chunk data of a dense checkpoint, whatever the
# layout), keeping its size.
damage_middle() {
  "$PYTHON" -c 'import os, sys
path = sys.argv[1]; size = os.path.getsize(path); off = size // 2 - 2048
with open(path, "r+b") as f:
    f.seek(off); data = f.read(4096); f.seek(off); f.write(bytes(b ^ 0xFF for b in data))' "$1"
}

# explicit_resume NAME DIR: `--resume DIR/checkpoints/step_00000020.h5` (damaged) exits 1 with an error naming the
# file and a hint.
explicit_resume() {
  local name=$1 dir=$2 rc=0
  local cmd=("${train[@]}" --run.dir="$dir" --training.steps=30 --resume "$dir/checkpoints/step_00000020.h5")
  expect_error "$name" "step_00000020.h5" "${cmd[@]}"
  "${cmd[@]}" >/dev/null 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || fail "$name: exit $rc, expected 1"
}

# damage_dataset FILE DATASET: inverts 16 bytes inside the first chunk of DATASET, so only its Fletcher32 checksum
# can tell (the file's structure stays intact).
damage_dataset() {
  "$PYTHON" -c 'import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    info = f[sys.argv[2]].id.get_chunk_info(0)
off = info.byte_offset + info.size // 2
with open(sys.argv[1], "r+b") as f:
    f.seek(off); data = f.read(16); f.seek(off); f.write(bytes(b ^ 0xFF for b in data))' "$1" "$2"
}

# fallback_case DIR: the run in DIR has checkpoints 10 and 20 (latest) and 20 is damaged; auto resume uses 10.
fallback_case() {
  local dir=$1 rc=0
  "${train[@]}" --run.dir="$dir" --training.steps=30 --resume auto >"$dir.log" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || { cat "$dir.log" >&2; fail "$dir: --resume auto exited $rc, expected 0 after falling back"; }
  grep -q "falling back" "$dir.log" || { cat "$dir.log" >&2; fail "$dir: no 'falling back' warning"; }
  grep -q "step_00000020.h5.*falling back" "$dir.log" ||
    { cat "$dir.log" >&2; fail "$dir: the warning does not name step_00000020.h5"; }
  grep -q "resumed from .*step_00000010.h5 at step 10" "$dir.log" ||
    { cat "$dir.log" >&2; fail "$dir: did not resume from step_00000010.h5"; }
  [ "$(cat "$dir/checkpoints/latest")" = step_00000030.h5 ] || fail "$dir: did not reach step 30"
  "$EMBER" inspect "$dir/checkpoints/step_00000020.h5" >/dev/null || fail "$dir: step 20 was not rewritten whole"
  echo "ok: $dir: $(grep -m1 "falling back" "$dir.log")"
}

# 1. Corrupted bytes in the newest checkpoint.
"${train[@]}" --run.dir=flipped --training.steps=20 >/dev/null 2>&1 || fail "first run failed"
[ "$(cat flipped/checkpoints/latest)" = step_00000020.h5 ] || fail "first run did not checkpoint step 20"
[ -f flipped/checkpoints/step_00000010.h5 ] || fail "first run did not checkpoint step 10"
damage_middle flipped/checkpoints/step_00000020.h5
# Naming the damaged file is an error (no silent substitution), and nothing is written.
find flipped -type f -print0 | sort -z | xargs -0 md5sum >before.md5
explicit_resume explicit_corrupt flipped
find flipped -type f -print0 | sort -z | xargs -0 md5sum >after.md5
diff before.md5 after.md5 || fail "the failed explicit resume changed the run directory"
fallback_case flipped

# 2. The newest checkpoint cut to half its size (an interrupted copy).
"${train[@]}" --run.dir=truncated --training.steps=20 >/dev/null 2>&1 || fail "first run (truncated case) failed"
[ "$(cat truncated/checkpoints/latest)" = step_00000020.h5 ] || fail "first run did not checkpoint step 20"
truncate -s $(($(stat -c %s truncated/checkpoints/step_00000020.h5) / 2)) truncated/checkpoints/step_00000020.h5
explicit_resume explicit_truncated truncated
fallback_case truncated

# 3. A few bytes of one tensor flipped: only the checksum sees it.
"${train[@]}" --run.dir=checksum --training.steps=20 >/dev/null 2>&1 || fail "first run (checksum case) failed"
[ "$(cat checksum/checkpoints/latest)" = step_00000020.h5 ] || fail "first run did not checkpoint step 20"
damage_dataset checksum/checkpoints/step_00000020.h5 /model/transformer/wte/weight
explicit_resume explicit_checksum checksum
grep -q "checksum" explicit_checksum.err || fail "the error does not mention the checksum: $(cat explicit_checksum.err)"
fallback_case checksum
echo PASS
