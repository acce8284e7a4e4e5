#!/usr/bin/env bash
# Creates the Python virtual environment .venv at the repository root with the pinned tokenizer libraries the
# exactness tests and the tokenizer benchmark compare Ember against, and the server's schema tester. Idempotent and
# safe to run twice at once.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# transformers 4.40 still runs on Debian's torch and needs tokenizers < 0.20. The venv sees Debian's packages, whose
# compiled modules (scipy, h5py, matplotlib; datasets imports scipy) are built for NumPy 1.x: numpy < 2 keeps
# Debian's numpy, and pandas < 2.3 and pyarrow < 17 are the last releases that accept it.
# schemathesis tests `ember serve` against its /openapi.json; its event-stream reader needs urllib3 2 (Debian has 1.26).
PINNED=(tokenizers==0.19.1 tiktoken==0.8.0 transformers==4.40.2 datasets==2.19.2 "numpy<2" "pandas<2.3" "pyarrow<17"
  schemathesis==4.32.5 "urllib3>=2,<3")
VENV=.venv
MARKER=$VENV/ember-pinned.txt
PYTHON=${EMBER_SYSTEM_PYTHON:-/usr/bin/python3}
WANT="${PINNED[*]}"
QUOTED=$(printf "'%s' " "${PINNED[@]}")  # for the hint, as a shell would need them

done_already() { [[ -x $VENV/bin/python && -f $MARKER && "$(cat "$MARKER")" == "$WANT" ]]; }

done_already && exit 0

fail() {
  echo "error: python_env: $1" >&2
  echo "hint: $2" >&2
  exit 1
}

command -v "$PYTHON" >/dev/null 2>&1 || fail "no $PYTHON" "run scripts/setup.sh (python3, python3-venv, python3-pip)"
mkdir -p "$VENV"
# Two test runs may start this at once: the second waits for the first and then finds the marker.
exec 9>"$VENV/.lock"
flock 9
done_already && exit 0

echo "python_env: creating $VENV with ${PINNED[*]}"
log=$VENV/install.log
if ! "$PYTHON" -m venv --system-site-packages "$VENV" >"$log" 2>&1; then
  fail "cannot create the virtual environment $VENV (see $log)" \
    "install python3-venv (scripts/setup.sh), then run scripts/python_env.sh again"
fi
if ! "$VENV/bin/python" -m pip install --disable-pip-version-check -q "${PINNED[@]}" >>"$log" 2>&1; then
  fail "pip could not install ${PINNED[*]} into $VENV (see $log; no network?)" \
    "on a machine with network run: pip download -d wheels ${QUOTED}; copy wheels/ here and run: $VENV/bin/python -m pip install --no-index --find-links wheels ${QUOTED}; then: echo \"$WANT\" > $MARKER"
fi
echo "$WANT" >"$MARKER"
echo "python_env: ready ($VENV/bin/python)"
