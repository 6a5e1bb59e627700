// libFuzzer target: arbitrary bytes as tokenizer input. The project's own byte-level BPE
// tokenizer (the synthetic model's, learned from the shipped corpus) encodes them with and
// without special-token parsing; whatever encodes must decode to the same bytes, and the streaming
// decoder must agree with Decode. Invalid UTF-8 is an error, never a crash.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "model/tokenizer/tokenizer.h"
#include "tests/fuzz/synthetic_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::model;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Tokenizer& tok = laminar::fuzz::SyntheticTokenizer();
  for (const bool parse_special : {false, true}) {
    auto ids = tok.Encode(text, {.add_special = false, .parse_special = parse_special});
    if (!ids.ok()) continue;
    auto back = tok.Decode(*ids, /*skip_special=*/false);
    if (!back.ok()) __builtin_trap();                       // ids it produced always decode
    if (!parse_special && *back != text) __builtin_trap();  // byte-level: a lossless round trip
    std::string streamed;
    StreamingDecoder stream = tok.NewStreamingDecoder(/*skip_special=*/false);
    for (int32_t id : *ids) {
      auto piece = stream.Next(id);
      if (!piece.ok()) __builtin_trap();
      streamed += *piece;
    }
    if (streamed + stream.Finish() != *back) __builtin_trap();
  }
  return 0;
}
