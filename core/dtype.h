// Element types and the fp16/bf16 conversions every backend agrees on.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace laminar {

// The dtypes tensors carry. Quantized block formats (GGUF Q4_0 ...) are not DTypes: their raw
// blocks live in model::QuantizedTensor.
enum class DType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kF64,
  kI8,
  kU8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kBool
};

// Bytes per element.
size_t DTypeSize(DType dtype);
// "f32", "bf16", ... (the names used in configs and `laminar inspect`).
std::string_view DTypeName(DType dtype);
// Parses a name from DTypeName(). Returns false if unknown.
bool ParseDType(std::string_view name, DType* out);

// IEEE binary16 <-> binary32, exact for every half value; float -> half rounds to nearest even.
inline float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t FloatToHalf(float f);

// bfloat16 is the top half of a binary32.
inline float BF16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
// Round to nearest even; NaN stays NaN (quiet).
inline uint16_t FloatToBF16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace laminar
