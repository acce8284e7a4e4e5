#!/usr/bin/env bash
# Fails when a tracked C++ or CUDA source differs from what the repository's .clang-format makes of it, listing the
# files; scripts/test.sh runs it before the build, so CI fails on a formatting difference too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "error: check-format: $CLANG_FORMAT not found" >&2
  echo "hint: run scripts/setup.sh (it installs Debian's clang-format package)" >&2
  exit 1
fi

differ=()
while IFS= read -r -d '' file; do
  if ! "$CLANG_FORMAT" --style=file "$file" | cmp -s - "$file"; then
    differ+=("$file")
  fi
done < <(git ls-files -z -- '*.cpp' '*.h' '*.cu' '*.cuh')

if [[ ${#differ[@]} -gt 0 ]]; then
  echo "error: check-format: ${#differ[@]} file(s) differ from the repository's .clang-format:" >&2
  printf '  %s\n' "${differ[@]}" >&2
  echo "hint: clang-format -i ${differ[*]}" >&2
  exit 1
fi
echo "check-format: every tracked .cpp/.h/.cu/.cuh file is formatted"
