// libFuzzer target for the safetensors parser: any input must give a Status or a file whose every
// tensor lies inside the input; ASan/UBSan catch out-of-bounds reads and overflow.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/check.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> bytes(data, size);
  auto file = laminar::model::SafetensorsFile::Parse(bytes, "fuzz.safetensors");
  if (!file.ok()) return 0;
  uint64_t covered = 0;
  for (const auto& t : file->tensors()) {
    LAMINAR_CHECK(t.data >= data && t.data + t.size_bytes <= data + size) << t.name;
    LAMINAR_CHECK_EQ(static_cast<int64_t>(t.size_bytes),
                     t.shape.num_elements() * static_cast<int64_t>(laminar::DTypeSize(t.dtype)));
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < t.size_bytes; ++i) sink = sink ^ t.data[i];  // touch every byte
    covered += t.size_bytes;
  }
  LAMINAR_CHECK_EQ(covered + 8 + file->header_bytes(), static_cast<uint64_t>(size));
  return 0;
}
