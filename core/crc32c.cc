// CRC-32C with a 256-entry table built at compile time; see crc32c.h.
#include "core/crc32c.h"

#include <array>

namespace laminar {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;

// kTable[b]: the CRC register after shifting byte b through it, LSB first (reflected form).
constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r & 1) ? (r >> 1) ^ kCastagnoliReflected : r >> 1;
    t[b] = r;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t r = ~crc;
  for (size_t i = 0; i < n; ++i) r = kTable[(r ^ p[i]) & 0xFFu] ^ (r >> 8);
  return ~r;
}

}  // namespace laminar
