// libFuzzer target: arbitrary bytes as a llama2.c checkpoint header. A header that parses must
// describe exactly the input's size.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto h = laminar::model::ParseLlama2cHeader(std::span<const uint8_t>(data, size), "fuzz.bin");
  if (h.ok() && h->expected_bytes != size) __builtin_trap();
  return 0;
}
