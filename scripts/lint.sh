#!/usr/bin/env bash
# Style checks that are cheap enough for every CI run: clang-format (.clang-format) on all C++ and
# CUDA sources. `scripts/lint.sh --fix` rewrites the files instead. clang-tidy (.clang-tidy) needs a
# build's compile commands: scripts/tidy.py build (CI runs it after the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h' '*.inc' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
if ! clang-format --dry-run --Werror "${files[@]}"; then
  echo "lint: formatting differs from .clang-format; run scripts/lint.sh --fix" >&2
  exit 1
fi
echo "lint: ${#files[@]} files formatted as .clang-format says"
