#!/usr/bin/env bash
# Downloads the public inputs Ember's tools take, on a machine with internet: enwik8 (and enwik9 on request) and
# GPT-2's tokenizer files, or with `hellaswag` the HellaSwag validation set alone. Each file is fetched to a
# temporary name and renamed when complete.
#
#   scripts/data/download.sh [--enwik9] [hellaswag] [DEST]      (DEST defaults to data/downloads)
#
# Then, for example:
#   ember prep --input data/downloads/enwik8.zip --tokenizer data/downloads/gpt2 --output data/enwik8-gpt2
#   ember prep --input data/downloads/enwik8.zip --output data/enwik8-bytes
#   ember eval --checkpoint CKPT --task hellaswag --data data/downloads/hellaswag_val.jsonl
set -euo pipefail

want_enwik9=0
want_hellaswag=0
dest=data/downloads
usage="scripts/data/download.sh [--enwik9] [hellaswag] [DEST]"
for arg in "$@"; do
  case "$arg" in
    --enwik9) want_enwik9=1 ;;
    hellaswag) want_hellaswag=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $arg" >&2; echo "hint: $usage" >&2; exit 2 ;;
    *) dest=$arg ;;
  esac
done
if [[ $want_enwik9 -eq 1 && $want_hellaswag -eq 1 ]]; then
  echo "error: --enwik9 and hellaswag ask for different downloads (hellaswag fetches the HellaSwag file alone)" >&2
  echo "hint: run the script once for each: $usage" >&2
  exit 2
fi

if command -v curl >/dev/null 2>&1; then
  fetch() { curl -fL --retry 3 -o "$2" "$1"; }
elif command -v wget >/dev/null 2>&1; then
  fetch() { wget -q -O "$2" "$1"; }
else
  echo "error: neither curl nor wget is installed" >&2
  echo "hint: apt-get install curl" >&2
  exit 1
fi

get() {  # URL FILE: skip a file that is already complete
  local url=$1 file=$2
  if [[ -s "$file" ]]; then
    echo "download: $file is already here"
    return
  fi
  echo "download: $url -> $file"
  if ! fetch "$url" "$file.part"; then
    rm -f "$file.part"
    echo "error: download of $url failed" >&2
    echo "hint: check the machine's internet access, then run this script again (finished files are kept)" >&2
    exit 1
  fi
  mv "$file.part" "$file"
}

if [[ $want_hellaswag -eq 1 ]]; then
  mkdir -p "$dest"
  # HellaSwag (Zellers et al., 2019): 10042 validation items, each a context and four endings of which one is right,
  # one JSON object a line; `ember eval --task hellaswag` scores a checkpoint on them.
  get https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl "$dest/hellaswag_val.jsonl"
  echo "download: done; score a checkpoint on it with"
  echo "  ember eval --checkpoint CKPT --task hellaswag --data $dest/hellaswag_val.jsonl"
  exit 0
fi

mkdir -p "$dest/gpt2"
# Matt Mahoney's Large Text Compression Benchmark: the first 10^8 (enwik8) and 10^9 (enwik9) bytes of an English
# Wikipedia dump, zipped. `ember prep` reads the .zip as is and splits it 90% / 5% / 5% by bytes.
get http://mattmahoney.net/dc/enwik8.zip "$dest/enwik8.zip"
if [[ $want_enwik9 -eq 1 ]]; then
  get http://mattmahoney.net/dc/enwik9.zip "$dest/enwik9.zip"
fi
# GPT-2's tokenizer as Hugging Face publishes it: vocab.json + merges.txt (and the same as tokenizer.json).
for f in vocab.json merges.txt tokenizer.json; do
  get "https://huggingface.co/openai-community/gpt2/resolve/main/$f" "$dest/gpt2/$f"
done
echo "download: done; the GPT-2 tokenizer is $dest/gpt2 (pass it as --tokenizer or data.tokenizer)"
