#!/usr/bin/env bash
# Fails when a source file includes a header of a higher layer, or of another folder of the same layer, listing each
# such include; scripts/test.sh runs it before the build. The layers (docs/architecture.md, "Layers"), lowest first:
#   0 core
#   1 backend, tokenizer
#   2 data, model, parallel
#   3 checkpoint, cuda (the CUDA backend and the GPU communicators), hf (Hugging Face interop)
#   4 train, infer
#   5 app
# A file may include headers of its own folder and of any lower layer. Tests and benchmarks may include anything.
# Usage: scripts/check-layers.sh [ROOT] (default: the repository this script is in).
set -euo pipefail
ROOT=${1:-"$(dirname "${BASH_SOURCE[0]}")/.."}
cd "$ROOT"

declare -A RANK=([core]=0 [backend]=1 [tokenizer]=1 [data]=2 [model]=2 [parallel]=2 [checkpoint]=3 [cuda]=3 [hf]=3
  [train]=4 [infer]=4 [app]=5)

folder_of() {  # src/<folder>/... or cuda/...
  case "$1" in
    cuda/*) echo cuda ;;
    src/*) local rest=${1#src/}; echo "${rest%%/*}" ;;
  esac
}

bad=()
while IFS= read -r -d '' file; do
  from=$(folder_of "$file")
  [[ -n "${RANK[$from]+x}" ]] || { bad+=("$file: the folder '$from' has no layer (add it to scripts/check-layers.sh)"); continue; }
  while IFS= read -r inc; do
    to=${inc%%/*}
    [[ "$inc" == */* ]] || continue  # a system or same-folder header
    [[ "$to" == "$from" ]] && continue
    [[ -n "${RANK[$to]+x}" ]] || continue  # not one of ours (e.g. "kernel_model/...", only in tests)
    if ((RANK[$to] >= RANK[$from])); then
      bad+=("$file includes \"$inc\": $from (layer ${RANK[$from]}) may not include $to (layer ${RANK[$to]})")
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find src cuda -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)

if ((${#bad[@]} > 0)); then
  echo "error: check-layers: ${#bad[@]} include(s) cross the layers:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "hint: move what the lower layer needs down a layer (docs/architecture.md, \"Layers\")" >&2
  exit 1
fi
echo "check-layers: no source includes a higher layer"
