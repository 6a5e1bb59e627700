#!/usr/bin/env bash
# The main job on the default model, on this machine. Until the RL loop lands (see the open issues)
# it is the most useful thing that works end to end: build, inspect SmolLM2-135M-Instruct, render
# a chat prompt and tokenize it with the model's own tokenizer.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build}"
if [ ! -x "$BUILD_DIR/cli/laminar" ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target laminar
fi
LAMINAR="$BUILD_DIR/cli/laminar"
MODEL="${1:-smollm2-135m-instruct}"
"$LAMINAR" inspect "$MODEL"
echo
echo "--- chat prompt for 'What is the capital of France?', as token ids:"
"$LAMINAR" chat-template --model "$MODEL" --user "What is the capital of France?" | "$LAMINAR" tokenize --model "$MODEL"
