#!/usr/bin/env bash
# Builds the llama.cpp peer (llama-bench, llama-batched-bench, llama-quantize) from the source that
# PyPI's llama-cpp-python sdist vendors, for benchmarks only (scripts/setup.sh --bench calls it),
# and writes a BF16 GGUF of the default model beside it (llama.cpp's fastest configuration for
# batched decode of this model on CPU; `laminar bench rollout` runs the peer on it). Idempotent.
# Output: $LAMINAR_PEERS/llama.cpp/build/bin/{llama-bench,llama-batched-bench,llama-quantize}
#         $LAMINAR_MODEL_CACHE/SmolLM2-135M-Instruct.BF16.gguf (when the Q4_1 GGUF is installed)
set -euo pipefail
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
PEERS="${LAMINAR_PEERS:-$HOME/.cache/laminar/peers}"
MODELS="${LAMINAR_MODEL_CACHE:-$HOME/.cache/laminar/models}"
BIN="$PEERS/llama.cpp/build/bin"
TARGETS=(llama-bench llama-batched-bench llama-quantize)

have_all() {
  for t in "${TARGETS[@]}"; do [ -x "$BIN/$t" ] || return 1; done
}

if have_all; then
  echo "[bench-setup] llama.cpp peer present: $BIN"
else
  if [ ! -f "$PEERS/llama.cpp/CMakeLists.txt" ]; then
    mkdir -p "$PEERS"
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    echo "[bench-setup] downloading llama-cpp-python $VERSION (sdist) from PyPI"
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp"
    tar -xzf "$tmp"/llama_cpp_python-"$VERSION".tar.gz -C "$tmp"
    rm -rf "$PEERS/llama.cpp"
    mv "$tmp/llama_cpp_python-$VERSION/vendor/llama.cpp" "$PEERS/llama.cpp"
    rm -f "$PEERS/llama.cpp/.git"  # a submodule pointer into the sdist's own tree
  fi
  echo "[bench-setup] building ${TARGETS[*]} (CPU, native ISA)"
  cmake -S "$PEERS/llama.cpp" -B "$PEERS/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON \
    -DLLAMA_BUILD_SERVER=OFF >/dev/null
  cmake --build "$PEERS/llama.cpp/build" -j "$(nproc)" --target "${TARGETS[@]}" >/dev/null
  echo "[bench-setup] built ${TARGETS[*]} in $BIN"
fi

# The BF16 GGUF: every Q4_1 block dequantized and rounded to bf16 (norms stay f32), metadata and
# tokenizer copied; the same weights laminar loads from the Q4_1 file, in llama.cpp's BF16 kernels.
SRC="$MODELS/SmolLM2-135M-Instruct.Q4_1.gguf"
DST="$MODELS/SmolLM2-135M-Instruct.BF16.gguf"
if [ -f "$DST" ]; then
  echo "[bench-setup] BF16 peer model present: $DST"
elif [ -f "$SRC" ]; then
  "$BIN/llama-quantize" --allow-requantize "$SRC" "$DST.tmp" BF16 >/dev/null 2>&1 ||
    { rm -f "$DST.tmp"; echo "[bench-setup] llama-quantize failed on $SRC" >&2; exit 1; }
  mv "$DST.tmp" "$DST"
  echo "[bench-setup] wrote $DST"
else
  echo "[bench-setup] $SRC missing (scripts/setup.sh installs it); no BF16 peer model written"
fi
