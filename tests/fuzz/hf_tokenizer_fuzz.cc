// libFuzzer target: arbitrary bytes as a Hugging Face tokenizer.json (ParseHfTokenizer). A file
// that parses must encode and decode a few texts without crashing; one that does not is an error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/tokenizer/tokenizer_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::model;
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto tok = ParseHfTokenizer(json, "", "fuzz/tokenizer.json");
  if (!tok.ok()) return 0;
  for (const char* text :
       {"", "Hello world", "  12  34\n\tcode()", "日本語 🦙", "<|im_end|>"}) {
    auto ids = (*tok)->Encode(text, {.add_special = true, .parse_special = true});
    if (!ids.ok()) continue;
    (*tok)->Decode(*ids, /*skip_special=*/false).status().IgnoreError();
    (*tok)->Decode(*ids, /*skip_special=*/true).status().IgnoreError();
  }
  return 0;
}
