#!/usr/bin/env bash
# Checks the formatting (scripts/check-format.sh), builds Ember (Release, into build/) and runs every ctest suite:
# unit, mpi (np 1/2/4), e2e, cluster, gpu. With --quick, only the unit and mpi tests not labelled `slow` (a few
# minutes, for the edit-and-test loop; CI runs everything).
# The exit code is ctest's, so CI and people see the same verdict; ctest prints its own summary at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=false
for arg in "$@"; do
  case "$arg" in
    --quick) quick=true ;;
    -h | --help)
      echo "usage: scripts/test.sh [--quick]"
      exit 0
      ;;
    *)
      echo "error: scripts/test.sh: unknown argument '$arg'" >&2
      echo "hint: scripts/test.sh runs every test; scripts/test.sh --quick the fast ones" >&2
      exit 2
      ;;
  esac
done

bash scripts/setup.sh

# A formatting difference fails the run before the build, with the files and the command that fixes them.
bash scripts/check-format.sh
# So does an include that crosses the layers (docs/architecture.md, "Layers").
bash scripts/check-layers.sh

# The test suites start mpirun; in containers and CI that often happens as root, which Open MPI refuses by default.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Debian's python has numpy and h5py (python3-numpy, python3-h5py); a python earlier on PATH (pyenv, venv) may not.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3
cmake --build build -j"$(nproc)"

# The tokenizer exactness tests compare against Hugging Face tokenizers/transformers and tiktoken in .venv.
$quick || bash scripts/python_env.sh

status=0
# Each test program's MPI_Init starts a singleton that makes, and removes again when empty, the session folder
# $TMPDIR/ompi.<host>.<uid>; Open MPI 4.1 can fail with "mkdir ... File exists" when two tests race on it under
# ctest -j2. A subfolder of ours keeps it from ever being empty.
host=$(uname -n)
session_top=${TMPDIR:-/tmp}/ompi.${host%%.*}.$(id -u)
[[ -d "$session_top" ]] || mkdir -m 700 "$session_top"
mkdir -p "$session_top/ember-keep"
if $quick; then
  ctest --test-dir build --output-on-failure -j2 --timeout 900 -L 'unit|mpi' -LE slow || status=$?
else
  ctest --test-dir build --output-on-failure -j2 --timeout 900 || status=$?
fi
exit "$status"
