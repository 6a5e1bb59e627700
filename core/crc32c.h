// CRC-32C (Castagnoli), the checksum of iSCSI (RFC 3720 §12.1, test vectors in its Appendix B.4)
// and of TFRecord files (TensorBoard event logs), with TFRecord's masking. Table-driven, one byte
// at a time: no Debian package provides CRC-32C for C++, and our uses checksum kilobytes, not
// gigabytes, so the hardware instruction is not worth a dependency.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace laminar {

// The CRC-32C of `n` bytes at `data` continuing from `crc` (the value returned for the bytes
// before; 0 to start): reflected polynomial 0x82F63B78, initial value and final XOR 0xFFFFFFFF,
// so Crc32cExtend(Crc32c(a), b) == Crc32c(a + b). "123456789" gives 0xE3069283.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(std::string_view data) { return Crc32cExtend(0, data.data(), data.size()); }

// TFRecord's masked CRC (tensorflow/core/lib/hash/crc32c.h): rotate right by 15 bits and add a
// constant, because a CRC of data that itself holds CRCs is weak.
constexpr uint32_t kCrc32cMaskDelta = 0xa282ead8u;
constexpr uint32_t MaskCrc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kCrc32cMaskDelta;
}
constexpr uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - kCrc32cMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace laminar
