// libFuzzer target: arbitrary bytes as a GGUF file's tokenizer (tokenizer.ggml.* metadata: model,
// tokens, scores, types, merges, special ids, pre-tokenizer). A file whose tokenizer loads must
// give one that encodes and decodes; one that does not is an error.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/gguf.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "tests/fuzz/exercise_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::model;
  auto file = GgufFile::ParseBuffer(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  auto tok = GgufTokenizer(*file);
  if (tok.ok()) laminar::fuzz::ExerciseTokenizer(**tok);
  return 0;
}
