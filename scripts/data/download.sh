#!/usr/bin/env bash
# Downloads the public inputs Ember's data tools take, on a machine with internet: enwik8 (and enwik9 on request)
# and GPT-2's tokenizer files. Each file is fetched to a temporary name and renamed when complete.
#
#   scripts/data/download.sh [--enwik9] [DEST]      (DEST defaults to data/downloads)
#
# Then, for example:
#   ember prep --input data/downloads/enwik8.zip --tokenizer data/downloads/gpt2 --output data/enwik8-gpt2
#   ember prep --input data/downloads/enwik8.zip --output data/enwik8-bytes
set -euo pipefail

want_enwik9=0
dest=data/downloads
for arg in "$@"; do
  case "$arg" in
    --enwik9) want_enwik9=1 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $arg" >&2; echo "hint: scripts/data/download.sh [--enwik9] [DEST]" >&2; exit 2 ;;
    *) dest=$arg ;;
  esac
done

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
