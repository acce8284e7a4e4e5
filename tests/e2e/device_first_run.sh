#!/usr/bin/env bash
# The GPU machine's first run, rehearsed here without a GPU: scripts/device/pack.sh makes a bundle from this build
# (binaries, ctest files, the Debian packages they load, shards, the ledger), a copy of the source tree elsewhere runs
# scripts/device/first-run.sh from it: the packages unpack into a private prefix, the ctest files point at the new
# places, the gpu tests run there and skip, the steps that need a GPU say "no GPU", a step over its time limit fails
# with that reason and leaves nothing running, and the results come back as the few files the device tool returns.
# Needs a CUDA build (exit 77, skipped, otherwise) and Debian's apt for the packages.
source "$2/tests/e2e/support/common.bash"
BUILD=$(cd "$(dirname "$EMBER")" && pwd)
if [[ ! -x "$BUILD/tests/gpu/test_cuda_ops" ]]; then
  echo "SKIP: $BUILD is not a CUDA build (no tests/gpu/test_cuda_ops): nothing to pack"
  exit 77
fi

# Bad input first: each a one-line error with a hint, before any work.
tree=$WORK/tree  # another checkout of the sources, as the GPU machine has
mkdir -p "$tree"
(cd "$SRC" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tree")
expect_error no_bundle "no bundle at" env OUT="$WORK/out0" bash "$tree/scripts/device/first-run.sh"
expect_error bad_step "unknown step 'warp'" bash "$tree/scripts/device/first-run.sh" info warp
expect_error bad_limit "FIRST_RUN_LIMIT_train='soon'" env FIRST_RUN_LIMIT_train=soon \
  bash "$tree/scripts/device/first-run.sh"
expect_error pack_arg "unknown argument '--fast'" bash "$SRC/scripts/device/pack.sh" --fast
expect_error pack_no_cuda "is missing" bash "$SRC/scripts/device/pack.sh" --no-build --build-dir "$WORK/empty"

# The bundle, from this build (no CPU reference run: minutes, and the train step needs a GPU anyway).
bash "$SRC/scripts/device/pack.sh" --build-dir "$BUILD" --no-build --no-reference --dest "$tree/.device/first-run" \
  >pack.log 2>&1 || { cat pack.log >&2; fail "pack.sh failed"; }
cat pack.log
grep -q "^build_root=$BUILD\$" "$tree/.device/first-run/MANIFEST" || fail "MANIFEST does not name the build root"
for f in build.tar.xz debs/MANIFEST data ledger.txt ledger_train.txt; do
  [[ -e "$tree/.device/first-run/$f" ]] || fail "the bundle lacks $f"
done

# The run, every step, the whole-model step limited to 1 s so that it must time out.
fr=$WORK/first-run
rc=0
OUT=$WORK/out EMBER_FIRST_RUN_WORK=$fr FIRST_RUN_LIMIT_whole_model=1 bash "$tree/scripts/device/first-run.sh" \
  >run.log 2>&1 || rc=$?
cat run.log
[[ $rc -eq 1 ]] || fail "first-run.sh exited $rc, expected 1 (the whole-model step over its limit)"
summary=$WORK/out/summary.txt
check_line() { grep -Eq "$1" "$summary" || { cat "$summary" >&2; fail "summary.txt has no line matching '$1'"; }; }
check_line "^prefix: unpacked [0-9]+ packages into $fr/prefix\$"
check_line '^gpu: none visible'
check_line '^info: skipped: no GPU$'
check_line '^ctest-gpu: ok \([0-9]+s\): 100% tests passed, 0 tests failed out of [1-9][0-9]*, [1-9][0-9]* skipped$'
check_line '^whole-model: FAILED: timed out after 1s'
for step in memcheck racecheck train bench kernels; do check_line "^$step: skipped: no GPU\$"; done
# Every gpu test ran from the moved build tree, none from the one the bundle was made from.
# (The test's folders lie inside the build tree here, so their paths are taken out before looking for the old ones.)
if cat "$fr"/build/*.cmake "$fr"/build/tests/gpu/*.cmake | sed "s|$WORK/||g" | grep -F "$BUILD/"; then
  fail "ctest files still name $BUILD"
fi
ctest --test-dir "$fr/build" -N -L '^gpu$' | grep -q 'Total Tests: [1-9]' || fail "the moved tree lists no gpu tests"
# The timed-out step left nothing running.
sleep 1
if pgrep -af "$fr/build" | grep -v pgrep; then fail "processes of the timed-out step still run"; fi
# What comes back: at most 8 files, none deeper than the device tool returns.
(cd "$WORK/out" && find . -type f | sort) >returned.txt
cat returned.txt
[[ $(wc -l <returned.txt) -le 8 ]] || fail "more than 8 files in OUT"
tar -tzf "$WORK/out/logs.tar.gz" >logs.txt
for step in info ctest-gpu whole-model memcheck racecheck train bench kernels; do
  grep -qx "logs/$step.log" logs.txt || fail "logs.tar.gz lacks logs/$step.log"
done

# A rerun of one step: the prefix is reused, only that step runs.
OUT=$WORK/out2 EMBER_FIRST_RUN_WORK=$fr bash "$tree/scripts/device/first-run.sh" info >rerun.log 2>&1 ||
  { cat rerun.log >&2; fail "rerunning the info step failed"; }
grep -q "^prefix: reusing $fr/prefix" "$WORK/out2/summary.txt" || fail "the rerun unpacked the packages again"
[[ $(grep -Ec '^(info|ctest-gpu|whole-model|memcheck|racecheck|train|bench|kernels):' "$WORK/out2/summary.txt") -eq 1 ]] ||
  { cat "$WORK/out2/summary.txt" >&2; fail "the rerun ran other steps than info"; }
# The report's tables, which need a GPU's outputs, from made-up ones in the tools' formats: a loss off by more than
# the tolerance fails the train table; ncu's raw page (with its units row) and nsys's summary give a kernel table.
report=$SRC/scripts/device/first_run_report.py
"$PYTHON" - <<'PY'
import json
ref = {s: 10.9 - 0.2 * s for s in range(1, 21)}
with open("ref.txt", "w") as f:
    f.write("# step loss\n" + "".join(f"{s} {l}\n" for s, l in ref.items()))
def run(path, losses):
    with open(path, "w") as f:
        f.writelines(json.dumps({"step": s, "loss": l, "lr": 1e-4}) + "\n" for s, l in losses.items())
gpu = {s: 10.9 - 0.2 * s + 1e-3 for s in range(1, 25)}
run("gpu.jsonl", gpu)
run("swap.jsonl", {s: l * (1 + 2e-3) for s, l in gpu.items()})
run("bad.jsonl", {s: l + (0.5 if s == 7 else 0) for s, l in gpu.items()})
PY
: >report_ok.md
"$PYTHON" "$report" train ref.txt gpu.jsonl swap.jsonl 20 24 1e-2 report_ok.md result_ok.txt >train_ok.log ||
  { cat train_ok.log >&2; fail "the train table failed on losses within the tolerance"; }
grep -q '^| 24 (GPU after the swap) |' report_ok.md || fail "the train table lacks step 24"
rc=0
"$PYTHON" "$report" train ref.txt bad.jsonl swap.jsonl 20 24 1e-2 report_bad.md result_bad.txt >train_bad.log || rc=$?
[[ $rc -eq 1 ]] && grep -q 'FAILED' report_bad.md || fail "a loss 0.5 off at step 7 passed the train table"
cat >ncu.csv <<'CSV'
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","gpu__time_duration.sum"
"","","","","","","","","","","","usecond"
"0","7","ember","h","void layernorm_forward_kernel<float>(const float *, float *)","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0","12.5"
"1","7","ember","h","sm90_xmma_gemm_bf16bf16_bf16f32","1","7","(384, 1, 1)","(132, 1, 1)","0","9.0","1,250.0"
"2","7","ember","h","void layernorm_forward_kernel<float>(const float *, float *)","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0","13.5"
CSV
printf 'by launch:\n  %-34s %6s\n  layernorm_forward_kernel  24  0.1  0.1  0.0  0.021  0.03\n\n' launch count >ledger.txt
"$PYTHON" "$report" kernels ncu ncu.csv 2 ledger.txt report_k.md result_k.txt >kernels.log ||
  { cat kernels.log >&2; fail "the kernel table failed on ncu's format"; }
grep -q '^| `sm90_xmma_gemm_bf16bf16_bf16f32` | 0.5 | 0.625 | 98.0% |' report_k.md ||
  { cat report_k.md >&2; fail "the kernel table does not rank the GEMM first at 0.625 ms a step"; }
grep -q '^| `void layernorm_forward_kernel<float>` | 1.0 | 0.013 | 2.0% | layernorm_forward_kernel | 0.021 |' report_k.md ||
  { cat report_k.md >&2; fail "the kernel table does not match layernorm with its ledger row"; }
cat >nsys.csv <<'CSV'
Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
80.0,4000,2,2000,2000,1000,3000,1414,sm90_xmma_gemm
20.0,1000,4,250,250,250,250,0,"void gelu_forward<__nv_bfloat16>(int)"
CSV
"$PYTHON" "$report" kernels nsys nsys.csv 2 ledger.txt report_n.md result_n.txt >nsys.log ||
  { cat nsys.log >&2; fail "the kernel table failed on nsys's format"; }
grep -q '^| `void gelu_forward<__nv_bfloat16>` | 2.0 | 0.001 | 20.0% |' report_n.md ||
  { cat report_n.md >&2; fail "the kernel table misread nsys's summary"; }
echo PASS
