#!/usr/bin/env bash
# Every command's outputs (prep, export, import, eval --logits-out, tokenizer train, the run and checkpoint folders,
# plot_metrics' picture) under one rule (core/output.h): never a special file (/dev/null, /dev/full, a FIFO, each
# with and without --overwrite); an existing output replaced only with --overwrite, only when it is what the command
# writes, and moved aside rather than deleted; a new output swapped in whole, so a failure (here a full disk) leaves
# the earlier one intact; one writer per output at a time (two racing runs of each command).
here=$(cd "$(dirname "$0")" && pwd)
source "$here/support/common.bash"
source "$here/support/bad_input.bash"
export OMP_NUM_THREADS=1

"$EMBER" prep --input "$SRC/src/core" --output data --val-fraction 0.1 > /dev/null || fail "the first prep failed"
"$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run --eval.every=0 --training.steps=4 \
  --checkpoint.interval=4 > train.log 2>&1 || { cat train.log >&2; fail "the training run failed"; }
ckpt=run/checkpoints/step_00000004.h5
"$EMBER" export --checkpoint $ckpt --output export > /dev/null || fail "the first export failed"
protect data run export

eval=("$EMBER" eval --checkpoint $ckpt --data data --batch-size 1 --seq-len 8 --max-batches 1)
bad_case logits_over_checkpoint 1 "--logits-out $ckpt exists and is not a NumPy \.npy file" -- \
  "${eval[@]}" --logits-out $ckpt --overwrite
bad_case logits_dev_full 1 "/dev/full is a device" -- "${eval[@]}" --logits-out /dev/full --overwrite
[ -c /dev/full ] || fail "logits_dev_full: /dev/full is no longer a device"
bad_case export_over_run_folder 1 "--output run exists and is not an export folder" -- \
  "$EMBER" export --checkpoint $ckpt --output run --overwrite
bad_case export_over_checkpoint 1 "--output $ckpt exists and is not an export folder" -- \
  "$EMBER" export --checkpoint $ckpt --output $ckpt --overwrite
bad_case export_exists 1 "--output export exists" -- "$EMBER" export --checkpoint $ckpt --output export
bad_case prep_over_run_folder 1 "--output run exists and is not a prep output" -- \
  "$EMBER" prep --input "$SRC/src/core" --output run --overwrite
bad_case import_over_manifest 1 "--output data/prep.json exists and is not an HDF5 checkpoint" -- \
  "$EMBER" import --hf export --output data/prep.json --overwrite
bad_case import_over_run_folder 1 "--output run exists and is not an HDF5 checkpoint" -- \
  "$EMBER" import --hf export --output run --overwrite
bad_case tokenizer_over_run_folder 1 "--output run exists and is not a tokenizer folder" -- \
  "$EMBER" tokenizer train --input "$SRC/src/core" --vocab-size 300 --output run --overwrite
# Every output option onto a device or a FIFO, with and without --overwrite: refused naming the path, the special
# file left as it was (a FIFO must not block the command, a device must not be renamed over).
mkfifo out.fifo
for target in /dev/null /dev/full out.fifo; do
  for ow in "" --overwrite; do
    n=$(basename $target)${ow:+_ow}
    kind=$([ -p $target ] && echo FIFO || echo device)
    bad_case prep_$n 1 "--output $target is a $kind" -- \
      "$EMBER" prep --input "$SRC/src/core" --output $target $ow
    bad_case export_$n 1 "--output $target is a $kind" -- "$EMBER" export --checkpoint $ckpt --output $target $ow
    bad_case import_$n 1 "--output $target is a $kind" -- "$EMBER" import --hf export --output $target $ow
    bad_case tokenizer_$n 1 "--output $target is a $kind" -- \
      "$EMBER" tokenizer train --input "$SRC/src/core" --vocab-size 300 --output $target $ow
    bad_case logits_$n 1 "--logits-out $target is a $kind" -- "${eval[@]}" --logits-out $target $ow
    bad_case run_dir_$n 1 "$target exists and is not a folder" -- "$EMBER" train --config "$SRC/configs/tiny.ini" \
      --data.dir=data --run.dir=$target --training.steps=1 $ow
    bad_case checkpoint_folder_$n 1 "$target exists and is not a folder" -- \
      "$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=data --run.dir=run_$n \
      --checkpoint.folder=$target --training.steps=1 $ow
  done
done
[ -c /dev/null ] && [ -c /dev/full ] && [ -p out.fifo ] || fail "a special file was replaced"
# plot_metrics' picture (its own error lines, from Python).
for target in /dev/null out.fifo; do
  rc=0
  timeout 60 "$PYTHON" "$SRC/scripts/plot_metrics.py" run --output $target --overwrite > plot.out 2> plot.err || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "^error: output $target" plot.err ||
    { cat plot.err >&2; fail "plot_metrics --output $target: exit $rc"; }
done
ln -s /dev/null devnull.png
rc=0
timeout 60 "$PYTHON" "$SRC/scripts/plot_metrics.py" run --output devnull.png --overwrite > plot.out 2> plot.err || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat plot.err >&2; fail "plot_metrics onto a link to /dev/null: exit $rc"; }
[ -c /dev/null ] && [ -p out.fifo ] || fail "plot_metrics replaced a special file"
echo "ok: every output option refuses /dev/null, /dev/full and a FIFO, with and without --overwrite"

mkdir -p corpus && cp "$SRC"/src/core/*.h corpus/
bad_case prep_inside_input 1 "--output corpus/shards lies inside --input corpus" -- \
  "$EMBER" prep --input corpus --output corpus/shards
[ ! -e corpus/shards ] || fail "prep_inside_input: corpus/shards was created"

# --overwrite of what the command wrote: the old output moved aside whole.
"${eval[@]}" --logits-out l.npy > /dev/null || fail "eval --logits-out failed"
cp l.npy l.first
"${eval[@]}" --logits-out l.npy > /dev/null 2>&1 && fail "a second --logits-out without --overwrite succeeded"
"${eval[@]}" --logits-out l.npy --overwrite > /dev/null || fail "eval --logits-out --overwrite failed"
aside=(l.npy.previous-*)
cmp "${aside[0]}" l.first || fail "the earlier logits were not moved aside intact"
"$EMBER" export --checkpoint $ckpt --output export2 > /dev/null && cp -a export export.first
"$EMBER" export --checkpoint $ckpt --output export --overwrite > /dev/null || fail "export --overwrite failed"
aside=(export.previous-*)
diff -r "${aside[0]}" export.first > /dev/null || fail "the earlier export was not moved aside intact"

# Two preps into one folder at once: one takes the lock, the other is refused naming it (or, started after the first
# ended, finds its output); the folder ends as one whole prep.
"$EMBER" prep --input "$SRC/src" --output race --overwrite > race1.log 2>&1 &
p1=$!
"$EMBER" prep --input "$SRC/src" --output race --overwrite > race2.log 2>&1 &
p2=$!
rc1=0 rc2=0
wait $p1 || rc1=$?
wait $p2 || rc2=$?
[ $rc1 -eq 0 ] || [ $rc2 -eq 0 ] || { cat race1.log race2.log >&2; fail "neither racing prep succeeded"; }
for n in 1 2; do
  rc=$([ $n -eq 1 ] && echo $rc1 || echo $rc2)
  [ "$rc" -eq 0 ] || grep -q "error: ember prep output race is in use by another job" race$n.log ||
    { cat race$n.log >&2; fail "racing prep $n failed without naming the holder"; }
done
"$EMBER" train --config "$SRC/configs/tiny.ini" --data.dir=race --run.dir=race_run --eval.every=0 \
  --training.steps=2 > race_train.log 2>&1 || { cat race_train.log >&2; fail "the raced prep output does not train"; }
echo "ok: two racing preps (exits $rc1 and $rc2) left one whole output"

# The same race for every other output folder: export, import and tokenizer train, each twice at once with
# --overwrite; each ends with exit 0 or the lock's error naming the folder, and the folder holds one whole output.
race_pair() {  # NAME OUTPUT CHECK-COMMAND... -- COMMAND...
  local name=$1 out=$2 rc1=0 rc2=0
  shift 2
  local check=()
  while [ "$1" != "--" ]; do check+=("$1"); shift; done
  shift
  "$@" --output $out --overwrite > $name.1.log 2>&1 &
  local p1=$!
  "$@" --output $out --overwrite > $name.2.log 2>&1 &
  local p2=$!
  wait $p1 || rc1=$?
  wait $p2 || rc2=$?
  for n in 1 2; do
    local rc=$([ $n -eq 1 ] && echo $rc1 || echo $rc2)
    [ "$rc" -eq 0 ] || grep -q "error: .*$out is in use by another job" $name.$n.log ||
      { cat $name.$n.log >&2; fail "racing $name $n failed without naming the holder"; }
  done
  "${check[@]}" > $name.check.log 2>&1 || { cat $name.check.log >&2; fail "racing $name: the output is not whole"; }
  echo "ok: two racing ${name}s (exits $rc1 and $rc2) left one whole output"
}
race_pair export race_export "$EMBER" import --hf race_export --output race_import_check.h5 -- \
  "$EMBER" export --checkpoint $ckpt
race_pair import race_import.h5 "$EMBER" inspect race_import.h5 -- "$EMBER" import --hf export
race_pair tokenizer race_tok "$EMBER" prep --input "$SRC/src/core" --tokenizer race_tok --output race_tok_data -- \
  "$EMBER" tokenizer train --input "$SRC/src/core" --vocab-size 300

# A full disk (tmpfs, mounted by root) during a second prep: the earlier one is untouched. Skipped with the reason
# where the mount is refused.
mkdir -p full
if mount -t tmpfs -o size=1m tmpfs full 2> mount.err; then
  trap 'umount "$WORK/full" 2>/dev/null || true' EXIT
  "$EMBER" prep --input "$SRC/src/core/error.h" --output full/data > /dev/null || fail "the small prep failed"
  cp -a full/data data.small
  head -c 3000000 /dev/urandom | base64 > big.txt
  bad_case prep_full_disk nonzero "full/data" -- "$EMBER" prep --input big.txt --output full/data --overwrite
  diff -r full/data data.small > /dev/null || fail "prep_full_disk: the earlier prep changed"
  [ -z "$(ls -d full/data.tmp-* 2>/dev/null)" ] || fail "prep_full_disk: the temporary folder was left behind"
  # An export onto the full disk: one error naming the file once, nothing left behind.
  cat /dev/zero > full/filler 2>/dev/null || true
  bad_case export_full_disk nonzero "full/exp" -- "$EMBER" export --checkpoint $ckpt --output full/exp
  [ "$(grep '^error: ' cases/export_full_disk.err | grep -o 'full/exp[^ :]*' | sort | uniq -d)" = "" ] ||
    { cat cases/export_full_disk.err >&2; fail "export_full_disk: the error names a path twice"; }
  [ -z "$(ls -d full/exp* 2>/dev/null)" ] || fail "export_full_disk: $(ls -d full/exp*) left behind"
  umount full
  trap - EXIT
else
  echo "skipped: prep_full_disk: cannot mount a tmpfs here ($(head -1 mount.err))"
fi

bad_case_summary
