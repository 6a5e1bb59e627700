#!/usr/bin/env bash
# Builds the llama.cpp peer (llama-bench, llama-batched-bench) from the source that PyPI's
# llama-cpp-python sdist vendors, for benchmarks only (scripts/setup.sh --bench calls it).
# Output: $LAMINAR_PEERS/llama.cpp/build/bin/{llama-bench,llama-batched-bench}.
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
PEERS="${LAMINAR_PEERS:-$HOME/.cache/laminar/peers}"
BIN="$PEERS/llama.cpp/build/bin"
if [ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-batched-bench" ]; then
  echo "[bench-setup] llama.cpp peer present: $BIN"
  exit 0
fi
mkdir -p "$PEERS"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "[bench-setup] downloading llama-cpp-python $VERSION (sdist) from PyPI"
python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp"
tar -xzf "$tmp"/llama_cpp_python-"$VERSION".tar.gz -C "$tmp"
rm -rf "$PEERS/llama.cpp"
mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$PEERS/llama.cpp"
rm -f "$PEERS/llama.cpp/.git"  # a submodule pointer into the sdist's own tree
echo "[bench-setup] building llama-bench and llama-batched-bench (CPU, native ISA)"
cmake -S "$PEERS/llama.cpp" -B "$PEERS/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
  -DLLAMA_BUILD_SERVER=OFF >/dev/null
cmake --build "$PEERS/llama.cpp/build" -j "$(nproc)" --target llama-bench llama-batched-bench >/dev/null
echo "[bench-setup] built $BIN/llama-bench and $BIN/llama-batched-bench"
