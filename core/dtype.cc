// DType names and sizes; float -> half conversion.
#include "core/dtype.h"

#include "core/check.h"

namespace laminar {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
    case DType::kU32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
    case DType::kI16:
    case DType::kU16:
      return 2;
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  LAMINAR_CHECK(false) << "unknown dtype " << static_cast<int>(dtype);
  return 0;
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kF64:
      return "f64";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kI16:
      return "i16";
    case DType::kU16:
      return "u16";
    case DType::kI32:
      return "i32";
    case DType::kU32:
      return "u32";
    case DType::kI64:
      return "i64";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

bool ParseDType(std::string_view name, DType* out) {
  static constexpr DType kAll[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF64,
                                   DType::kI8,  DType::kU8,   DType::kI16, DType::kU16,
                                   DType::kI32, DType::kU32,  DType::kI64, DType::kBool};
  for (DType d : kAll) {
    if (DTypeName(d) == name) {
      *out = d;
      return true;
    }
  }
  return false;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {                                      // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // rounds to zero
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 + (113 - exp) ... bring to half subnormal units
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return static_cast<uint16_t>(sign | half_mant);
  }
  uint32_t exp = ((abs >> 23) - 127 + 15) << 10;
  uint32_t mant = (abs >> 13) & 0x3ffu;
  uint32_t rem = abs & 0x1fffu;
  uint32_t h = exp | mant;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return static_cast<uint16_t>(sign | h);
}

}  // namespace laminar
