#!/usr/bin/env bash
# Fetches the test data a user can get but the project does not make: llama.cpp's tokenizer
# vocabularies with their expected encodings, and two real Jinja chat templates, from the
# llama.cpp sources in PyPI's llama-cpp-python sdist (pinned by version and sha256). The files
# listed in tests/data/llama_cpp_files.sha256 go to $LAMINAR_TEST_DATA (default
# ~/.cache/laminar/test-data)/llama.cpp/; each is checked against its sha256, and a missing or
# corrupted one is fetched again. Idempotent; nothing is written into the repository.
#
#   scripts/fetch_test_data.sh           # fetch what is missing or corrupted
#   scripts/fetch_test_data.sh --check   # only verify; exit 1 naming each bad file
set -euo pipefail
cd "$(dirname "$0")/.."
check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  "") ;;
  *) echo "fetch_test_data.sh: unknown option '$1' (--check or nothing)" >&2; exit 2 ;;
esac

SDIST_VERSION=0.3.36
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
MANIFEST=tests/data/llama_cpp_files.sha256
DEST="${LAMINAR_TEST_DATA:-$HOME/.cache/laminar/test-data}/llama.cpp"
say() { printf '[test-data] %s\n' "$*"; }

# Prints the files of the manifest that are missing or whose sha256 differs, with the expected one.
bad_files() {
  grep -v '^#' "$MANIFEST" | while read -r sha rel; do
    if [ ! -f "$DEST/$rel" ] || ! echo "$sha  $DEST/$rel" | sha256sum -c --status; then
      echo "$rel (expected sha256 $sha)"
    fi
  done
}

bad="$(bad_files)"
if [ -z "$bad" ]; then
  say "all $(grep -vc '^#' "$MANIFEST") files present and verified in $DEST"
  exit 0
fi
if [ "$check_only" = 1 ]; then
  echo "fetch_test_data.sh: missing or corrupted in $DEST:" >&2
  echo "$bad" | sed 's/^/  /' >&2
  exit 1
fi

say "fetching llama-cpp-python $SDIST_VERSION (sdist, ~77 MB) for $(echo "$bad" | wc -l) file(s)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The sdist itself, not a wheel: only the sources carry llama.cpp's models/ folder.
python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation --dest "$tmp" \
  "llama-cpp-python==$SDIST_VERSION" 2>"$tmp/pip.log" ||
  python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$tmp" \
    "llama-cpp-python==$SDIST_VERSION" 2>>"$tmp/pip.log" || {
  echo "fetch_test_data.sh: pip could not download llama-cpp-python==$SDIST_VERSION:" >&2
  tail -5 "$tmp/pip.log" >&2
  exit 1
}
archive="$tmp/llama_cpp_python-$SDIST_VERSION.tar.gz"
if ! echo "$SDIST_SHA256  $archive" | sha256sum -c --status; then
  echo "fetch_test_data.sh: $archive does not have the pinned sha256 $SDIST_SHA256" >&2
  exit 1
fi
prefix="llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp/models"
mapfile -t rels < <(grep -v '^#' "$MANIFEST" | awk '{print $2}')
tar -xzf "$archive" -C "$tmp" "${rels[@]/#/$prefix/}"
mkdir -p "$DEST"
for rel in "${rels[@]}"; do
  mkdir -p "$DEST/$(dirname "$rel")"
  mv "$tmp/$prefix/$rel" "$DEST/$rel.partial"
  mv "$DEST/$rel.partial" "$DEST/$rel"
done
bad="$(bad_files)"
if [ -n "$bad" ]; then
  echo "fetch_test_data.sh: after fetching, still wrong in $DEST:" >&2
  echo "$bad" | sed 's/^/  /' >&2
  exit 1
fi
say "installed ${#rels[@]} files in $DEST (sha256 verified)"
