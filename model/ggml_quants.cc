// ggml type table and reference dequantization loops. Arithmetic follows ggml's
// dequantize_row_* order of operations (in f32) so results match llama.cpp bit for bit.
#include "model/ggml_quants.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace laminar::model {
namespace {

// ggml_type ids and block sizes from ggml.h / ggml-common.h. Ids 4, 5, 31-33 and 36-38 were
// removed from ggml and are absent here.
constexpr std::array<GgmlTypeTraits, 32> kGgmlTypes = {{
    {0, "f32", 1, 4, true},          {1, "f16", 1, 2, true},
    {2, "q4_0", 32, 18, true},       {3, "q4_1", 32, 20, true},
    {6, "q5_0", 32, 22, false},      {7, "q5_1", 32, 24, false},
    {8, "q8_0", 32, 34, true},       {9, "q8_1", 32, 36, false},
    {10, "q2_K", 256, 84, false},    {11, "q3_K", 256, 110, false},
    {12, "q4_K", 256, 144, true},    {13, "q5_K", 256, 176, false},
    {14, "q6_K", 256, 210, true},    {15, "q8_K", 256, 292, false},
    {16, "iq2_xxs", 256, 66, false}, {17, "iq2_xs", 256, 74, false},
    {18, "iq3_xxs", 256, 98, false}, {19, "iq1_s", 256, 50, false},
    {20, "iq4_nl", 32, 18, false},   {21, "iq3_s", 256, 110, false},
    {22, "iq2_s", 256, 82, false},   {23, "iq4_xs", 256, 136, false},
    {24, "i8", 1, 1, false},         {25, "i16", 1, 2, false},
    {26, "i32", 1, 4, false},        {27, "i64", 1, 8, false},
    {28, "f64", 1, 8, false},        {29, "iq1_m", 256, 56, false},
    {30, "bf16", 1, 2, true},        {34, "tq1_0", 256, 54, false},
    {35, "tq2_0", 256, 66, false},   {39, "mxfp4", 32, 17, false},
}};

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float LoadHalf(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }
void StoreU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// The 6-bit scale and min of sub-block j (0..7) from Q4_K's 12 packed bytes: sub-blocks 0-3 keep
// theirs in the low 6 bits of bytes j and j+4; sub-blocks 4-7 combine a nibble of byte j+4 with
// the top 2 bits of bytes j-4 (scale) and j (min).
void Q4KScaleMin(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

}  // namespace

const GgmlTypeTraits* FindGgmlType(uint32_t id) {
  for (const GgmlTypeTraits& t : kGgmlTypes) {
    if (t.id == id) return &t;
  }
  return nullptr;
}

std::string GgmlTypeName(uint32_t id) {
  const GgmlTypeTraits* t = FindGgmlType(id);
  return t != nullptr ? std::string(t->name) : "type " + std::to_string(id);
}

StatusOr<size_t> GgmlRowBytes(uint32_t type, int64_t num_elements) {
  const GgmlTypeTraits* t = FindGgmlType(type);
  if (t == nullptr) return InvalidArgumentError("unknown ggml type " + std::to_string(type));
  if (num_elements < 0 || num_elements % t->block_elems != 0) {
    return InvalidArgumentError(std::to_string(num_elements) + " elements of " +
                                std::string(t->name) + " are not a whole number of " +
                                std::to_string(t->block_elems) + "-element blocks");
  }
  uint64_t blocks = static_cast<uint64_t>(num_elements / t->block_elems);
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(t->block_bytes), &bytes) ||
      bytes > static_cast<uint64_t>(INT64_MAX)) {
    return OutOfRangeError(std::to_string(num_elements) + " elements of " + std::string(t->name) +
                           " overflow the byte count");
  }
  return static_cast<size_t>(bytes);
}

void DequantizeF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadHalf(src + 2 * i);
}

void DequantizeBF16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(LoadU16(src + 2 * i));
}

// block_q8_0: f16 d, int8 qs[32]; x = d * q.
void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += kQ8_0BlockBytes, dst += 32) {
    const float d = LoadHalf(src);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(static_cast<int8_t>(src[2 + j])) * d;
  }
}

// block_q4_0: f16 d, qs[16]; element j is the low nibble of qs[j], element j+16 the high one;
// x = (q - 8) * d.
void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += kQ4_0BlockBytes, dst += 32) {
    const float d = LoadHalf(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
      dst[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
    }
  }
}

// block_q4_1: f16 d, f16 m, qs[16] (nibbles as in Q4_0); x = q * d + m.
void DequantizeQ4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += kQ4_1BlockBytes, dst += 32) {
    const float d = LoadHalf(src);
    const float m = LoadHalf(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
      dst[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
    }
  }
}

void QuantizeQ8_0(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 32, dst += kQ8_0BlockBytes) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    // 0 for a block of zeros, and for one so small that 1 / d overflows (its f16 d is 0 anyway).
    const float id = d != 0.0f && std::isfinite(1.0f / d) ? 1.0f / d : 0.0f;
    StoreU16(dst, FloatToHalf(d));
    for (int j = 0; j < 32; ++j) {
      dst[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(src[j] * id)));
    }
  }
}

void QuantizeQ4_1(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 32, dst += kQ4_1BlockBytes) {
    float lo = src[0], hi = src[0];
    for (int j = 1; j < 32; ++j) {
      lo = std::min(lo, src[j]);
      hi = std::max(hi, src[j]);
    }
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f && std::isfinite(1.0f / d) ? 1.0f / d : 0.0f;
    StoreU16(dst, FloatToHalf(d));
    StoreU16(dst + 2, FloatToHalf(lo));
    uint8_t* qs = dst + 4;
    auto nibble = [&](float x) {
      return static_cast<uint8_t>(std::min(15, static_cast<int>((x - lo) * id + 0.5f)));
    };
    for (int j = 0; j < 16; ++j)
      qs[j] = static_cast<uint8_t>(nibble(src[j]) | nibble(src[j + 16]) << 4);
  }
}

// block_q4_K: f16 d, f16 dmin, scales[12] (8 x 6-bit scale + 6-bit min), qs[128]. Each 64
// elements use 32 bytes of qs: low nibbles for sub-block 2i, high nibbles for 2i+1;
// x = (d * scale) * q - (dmin * min).
void DequantizeQ4_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += kQ4_KBlockBytes) {
    const float d = LoadHalf(src);
    const float dmin = LoadHalf(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* q = src + 16;
    for (int sub = 0; sub < 8; sub += 2, q += 32) {
      uint8_t sc = 0, m = 0;
      Q4KScaleMin(sub, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      Q4KScaleMin(sub + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// block_q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16] (one per 16
// elements), f16 d. Each half of 128 elements uses 64 bytes of ql and 32 of qh; element l + 32k
// (k = 0..3) takes its low nibble from ql[l + 32 (k & 1)] (low nibble for k < 2, high for
// k >= 2) and its high bits from qh[l] >> 2k; x = d * scale * (q - 32).
void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 256; ++b, src += kQ6_KBlockBytes) {
    const uint8_t* ql = src;
    const uint8_t* qh = src + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
    const float d = LoadHalf(src + 208);
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        dst[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        dst[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        dst[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

Status DequantizeGgml(uint32_t type, std::span<const uint8_t> src, std::span<float> dst) {
  const int64_t n = static_cast<int64_t>(dst.size());
  LAMINAR_ASSIGN_OR_RETURN(size_t want, GgmlRowBytes(type, n));
  if (src.size() != want) {
    return InvalidArgumentError("dequantize " + GgmlTypeName(type) + ": " +
                                std::to_string(src.size()) + " bytes given, " + std::to_string(n) +
                                " elements need " + std::to_string(want));
  }
  const uint8_t* s = src.data();
  float* d = dst.data();
  switch (type) {
    case 0:
      if (n > 0) std::memcpy(d, s, want);
      return OkStatus();
    case 1:
      DequantizeF16(s, d, n);
      return OkStatus();
    case 2:
      DequantizeQ4_0(s, d, n);
      return OkStatus();
    case 3:
      DequantizeQ4_1(s, d, n);
      return OkStatus();
    case 8:
      DequantizeQ8_0(s, d, n);
      return OkStatus();
    case 12:
      DequantizeQ4_K(s, d, n);
      return OkStatus();
    case 14:
      DequantizeQ6_K(s, d, n);
      return OkStatus();
    case 30:
      DequantizeBF16(s, d, n);
      return OkStatus();
    default:
      break;
  }
  return UnimplementedError("dequantizing ggml type " + GgmlTypeName(type) +
                            " is not supported (supported: f32, f16, bf16, q8_0, q4_0, q4_1, "
                            "q4_K, q6_K)");
}

}  // namespace laminar::model
