// libFuzzer target: arbitrary bytes as GPT-2's pair of vocabulary files. The input up to its first
// NUL byte is encoder.json (piece -> id), the rest vocab.bpe (one merge per line). A pair that
// parses must give a tokenizer that encodes and decodes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/tokenizer/tokenizer_loader.h"
#include "tests/fuzz/exercise_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string encoder(input.substr(0, nul));
  const std::string merges(nul == std::string_view::npos ? "" : input.substr(nul + 1));
  auto tok = laminar::model::ParseEncoderJsonTokenizer(encoder, merges, "fuzz/encoder.json",
                                                       "fuzz/vocab.bpe");
  if (tok.ok()) laminar::fuzz::ExerciseTokenizer(**tok);
  return 0;
}
