#!/usr/bin/env bash
# ember tokenizer train: refuses bad input before writing, trains the same files on 1 and 2 threads, and its
# vocabulary encodes exactly as Hugging Face tokenizers, transformers and tiktoken do (tests/tokenizer/check_exactness.py).
source "$(dirname "${BASH_SOURCE[0]}")/support/common.bash"

VENV_PYTHON=${EMBER_VENV_PYTHON:-$SRC/.venv/bin/python}
[ -x "$VENV_PYTHON" ] || fail "no Python virtual environment at $VENV_PYTHON (hint: run scripts/python_env.sh)"
"$VENV_PYTHON" -c 'import tokenizers, tiktoken, transformers' 2>/dev/null ||
  fail "$VENV_PYTHON cannot import tokenizers, tiktoken and transformers (hint: run scripts/python_env.sh)"

# The corpus: the repository's code and docs and the system's licence texts (plain English, many formats).
mkdir -p corpus/licenses
for d in src tests scripts docs; do cp -r "$SRC/$d" corpus/; done
cp -r /usr/share/common-licenses/. corpus/licenses/
mkdir -p empty && touch empty/nothing.txt && : >file.txt

expect_error vocab_too_small "vocab-size" "$EMBER" tokenizer train --input corpus --vocab-size 257 --output tok
expect_error missing_input "does not exist" "$EMBER" tokenizer train --input nowhere --vocab-size 1000 --output tok
expect_error output_is_file "file.txt exists and is not a tokenizer folder" "$EMBER" tokenizer train --input corpus --vocab-size 1000 --output file.txt
expect_error empty_corpus "holds no text" "$EMBER" tokenizer train --input empty --vocab-size 1000 --output tok
[ ! -e tok ] || fail "a refused run created the output folder"

"$EMBER" tokenizer train --input corpus --vocab-size 4000 --output tok --threads 2
"$EMBER" tokenizer train --input corpus --vocab-size 4000 --output tok1 --threads 1
for f in vocab.json merges.txt tokenizer.json tokenizer_config.json; do
  cmp "tok/$f" "tok1/$f" || fail "$f differs between --threads 2 and --threads 1"
done
expect_error no_overwrite "--output tok exists" "$EMBER" tokenizer train --input corpus --vocab-size 4000 --output tok
"$EMBER" tokenizer train --input corpus --vocab-size 4000 --output tok --overwrite --threads 2
cmp tok/merges.txt tok1/merges.txt || fail "--overwrite wrote different merges"

# The check must be able to fail: Ember loading a vocabulary of another size gives other ids.
"$EMBER" tokenizer train --input corpus --vocab-size 3000 --output tok_other
rc=0
"$VENV_PYTHON" "$SRC/tests/tokenizer/check_exactness.py" --ember "$EMBER" --tokenizer tok --ember-tokenizer tok_other \
  --tiktoken-dir tiktoken_other --texts "$SRC/README.md" --generated 2 >other.out 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "^FAIL: .*differ" other.out || { cat other.out >&2; fail "the check passed for another vocabulary"; }
echo "ok: the check fails for another vocabulary: $(grep -m1 '^FAIL' other.out)"

"$VENV_PYTHON" "$SRC/tests/tokenizer/check_exactness.py" --ember "$EMBER" --tokenizer tok --tiktoken-dir tiktoken \
  --texts "$SRC/src" "$SRC/scripts" "$SRC/tests/tokenizer" "$SRC/tests/e2e" /usr/share/common-licenses --generated 60
