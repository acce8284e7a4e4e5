#!/usr/bin/env bash
# OpenBLAS's kernels: on a CPU with AVX2 or AVX-512, ember runs OpenBLAS's kernels for it, never the Prescott (SSE3)
# fallback that Debian 12's OpenBLAS takes on CPUs newer than itself (ember then runs itself again with
# OPENBLAS_CORETYPE set: backend/cpu/blas_kernels.h). OPENBLAS_VERBOSE=2 makes the library print its choice as it
# loads, once per start; a user's own OPENBLAS_CORETYPE is kept. Skipped (77) on a CPU without AVX2.
source "$(dirname "$0")/support/common.bash"

grep -qw avx2 /proc/cpuinfo || { echo "SKIP: this CPU has no AVX2"; exit 77; }
OPENBLAS_VERBOSE=2 "$EMBER" --version >version.out 2>&1 || { cat version.out >&2; fail "ember --version failed"; }
grep -q '^ember ' version.out || fail "no version line"
last=$(sed -n 's/^Core: //p' version.out | tail -n 1)
[ -n "$last" ] || { cat version.out >&2; fail "OpenBLAS printed no core"; }
[ "$last" != Prescott ] || { cat version.out >&2; fail "ember runs OpenBLAS's Prescott kernels on an AVX2 CPU"; }
echo "OpenBLAS kernels: $(sed -n 's/^Core: //p' version.out | paste -sd' ')"
# A core the user names stays, whatever it is.
OPENBLAS_VERBOSE=2 OPENBLAS_CORETYPE=Haswell "$EMBER" --version >forced.out 2>&1
[ "$(sed -n 's/^Core: //p' forced.out | paste -sd' ')" = Haswell ] || { cat forced.out >&2; fail "OPENBLAS_CORETYPE ignored"; }
echo PASS
