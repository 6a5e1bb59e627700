// libFuzzer target: arbitrary bytes as a Hugging Face tokenizer.json (ParseHfTokenizer). A file
// that parses must encode and decode a few texts without crashing; one that does not is an error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/tokenizer/tokenizer_loader.h"
#include "tests/fuzz/exercise_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::model;
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto tok = ParseHfTokenizer(json, "", "fuzz/tokenizer.json");
  if (tok.ok()) laminar::fuzz::ExerciseTokenizer(**tok);
  return 0;
}
