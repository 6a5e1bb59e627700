#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) in build-fuzz/ and runs each
# for a while on a seed corpus: generated seeds (scripts/make_fuzz_seeds.py), the committed corpus
# of tests/fuzz/corpus/<target>/ and matching real files from ../shared/data when present. Crashes are written to build-fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET=30] [TARGET ...]     (default: every target)
#   JOBS=2 BUILD_DIR=build-fuzz MAX_LEN=65536 scripts/fuzz.sh 60 gguf
#   FUZZ_SEED=1 scripts/fuzz.sh 20       # libFuzzer's seed fixed (CI), so a run repeats its inputs
set -euo pipefail

cd "$(dirname "$0")/.."
SECONDS_PER_TARGET="${1:-30}"
shift || true
BUILD_DIR="${BUILD_DIR:-build-fuzz}"
JOBS="${JOBS:-1}"
MAX_LEN="${MAX_LEN:-65536}"
SHARED="${LAMINAR_SHARED_DATA:-../shared/data}"

if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -DLAMINAR_FUZZ=ON -DLAMINAR_BUILD_TESTS=OFF \
      -DLAMINAR_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
TARGETS=("$@")
if [[ ${#TARGETS[@]} -eq 0 ]]; then
  TARGETS=()
  for f in tests/fuzz/*_fuzz.cc; do
    name="$(basename "$f" _fuzz.cc)"
    TARGETS+=("$name")
  done
fi
for t in "${TARGETS[@]}"; do
  nice cmake --build "$BUILD_DIR" -j"$JOBS" --target "${t}_fuzz"
done

SEEDS="$BUILD_DIR/seeds"
python3 scripts/make_fuzz_seeds.py "$SEEDS"
# Real files from the shared data, by target (only small ones: MAX_LEN truncates the rest).
declare -A REAL=(
  [gguf]="models/stories260K/stories260K.gguf tokenizers/llama2-spm/ggml-vocab-llama-spm.gguf"
  [llama2c]=""
  [llama2c_tokenizer]="models/stories260K/tok512.bin"
  [safetensors]="safetensors/overall.safetensors safetensors/B.safetensors safetensors/d.safetensors safetensors/e.safetensors"
)

status=0
for t in "${TARGETS[@]}"; do
  corpus="$BUILD_DIR/corpus/$t"
  artifacts="$BUILD_DIR/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  [[ -d "$SEEDS/$t" ]] && cp -n "$SEEDS/$t"/* "$corpus"/ 2>/dev/null || true
  [[ -d "tests/fuzz/corpus/$t" ]] && cp -n "tests/fuzz/corpus/$t"/* "$corpus"/ 2>/dev/null || true
  for f in ${REAL[$t]:-}; do
    [[ -f "$SHARED/$f" ]] && cp -n "$SHARED/$f" "$corpus"/ 2>/dev/null || true
  done
  echo "== fuzzing $t for ${SECONDS_PER_TARGET}s (corpus $corpus)"
  # The outer timeout bounds a fuzzer that wedges itself (its out-of-memory report can hang).
  if ! timeout -s KILL $((SECONDS_PER_TARGET + 120)) \
      "$BUILD_DIR/tests/fuzz/${t}_fuzz" "$corpus" -max_total_time="$SECONDS_PER_TARGET" \
      -max_len="$MAX_LEN" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$artifacts/" ${FUZZ_SEED:+-seed="$FUZZ_SEED"}; then
    echo "!! $t: fuzzer found a failure; see $artifacts/" >&2
    status=1
  fi
done
exit $status
