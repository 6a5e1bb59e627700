// libFuzzer target: arbitrary bytes as a llama2.c tokenizer.bin (max token length, then score,
// length and bytes per token). A file that parses must give a tokenizer that encodes and decodes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/tokenizer/tokenizer_loader.h"
#include "tests/fuzz/exercise_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tok = laminar::model::ParseLlama2cTokenizer(std::span<const uint8_t>(data, size),
                                                   "fuzz/tokenizer.bin");
  if (tok.ok()) laminar::fuzz::ExerciseTokenizer(**tok);
  return 0;
}
