// Dequantization tests on hand-built ggml blocks whose values are worked out from the block
// layouts in ggml-common.h, including the packed 6-bit scales of Q4_K and the split 6-bit quants
// of Q6_K.
#include "model/ggml_quants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

void PutHalf(std::vector<uint8_t>& b, size_t at, float v) {
  uint16_t h = FloatToHalf(v);
  std::memcpy(&b[at], &h, 2);
}

std::vector<float> Dequantize(uint32_t type, const std::vector<uint8_t>& blocks, size_t n) {
  std::vector<float> out(n, -12345.0f);
  Status st = DequantizeGgml(type, blocks, out);
  EXPECT_TRUE(st.ok()) << st;
  return out;
}

TEST(GgmlQuantsTest, TypeTable) {
  struct Known {
    uint32_t id;
    const char* name;
    int64_t elems;
    size_t bytes;
  };
  for (Known k :
       {Known{0, "f32", 1, 4}, Known{1, "f16", 1, 2}, Known{2, "q4_0", 32, 18},
        Known{3, "q4_1", 32, 20}, Known{8, "q8_0", 32, 34}, Known{12, "q4_K", 256, 144},
        Known{14, "q6_K", 256, 210}, Known{30, "bf16", 1, 2}, Known{13, "q5_K", 256, 176}}) {
    const GgmlTypeTraits* t = FindGgmlType(k.id);
    ASSERT_NE(t, nullptr) << k.name;
    EXPECT_EQ(t->name, k.name);
    EXPECT_EQ(t->block_elems, k.elems) << k.name;
    EXPECT_EQ(t->block_bytes, k.bytes) << k.name;
  }
  EXPECT_EQ(FindGgmlType(4), nullptr);  // removed Q4_2
  EXPECT_EQ(FindGgmlType(1000), nullptr);
  EXPECT_EQ(GgmlTypeName(1000), "type 1000");
  EXPECT_EQ(GgmlRowBytes(12, 512).value(), 288u);
  EXPECT_EQ(GgmlRowBytes(1, 7).value(), 14u);
  EXPECT_FALSE(GgmlRowBytes(12, 100).ok());
  EXPECT_FALSE(GgmlRowBytes(2, -32).ok());
  EXPECT_FALSE(GgmlRowBytes(77, 32).ok());
  EXPECT_FALSE(GgmlRowBytes(15, INT64_MAX / 256 * 256).ok());  // bytes overflow int64
}

TEST(GgmlQuantsTest, F32F16BF16) {
  std::vector<uint8_t> f16 = {0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b, 0x01, 0x00, 0x00, 0x80};
  auto v = Dequantize(1, f16, 5);
  EXPECT_EQ(v, (std::vector<float>{1.0f, -2.0f, 65504.0f, 5.9604645e-8f, -0.0f}));
  EXPECT_TRUE(std::signbit(v[4]));
  std::vector<uint8_t> bf16 = {0x80, 0x3f, 0x40, 0xc0, 0x80, 0x7f};
  EXPECT_EQ(Dequantize(30, bf16, 3), (std::vector<float>{1.0f, -3.0f, INFINITY}));
  std::vector<float> f32 = {1.5f, -2.5f};
  std::vector<uint8_t> raw(8);
  std::memcpy(raw.data(), f32.data(), 8);
  EXPECT_EQ(Dequantize(0, raw, 2), f32);
  // Round trip: every finite half converts back to itself.
  for (uint32_t h = 0; h < 0x10000; h += 37) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    std::vector<uint8_t> b = {static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8)};
    EXPECT_EQ(FloatToHalf(Dequantize(1, b, 1)[0]), h);
  }
}

TEST(GgmlQuantsTest, Q8_0) {
  std::vector<uint8_t> b(2 * kQ8_0BlockBytes);
  PutHalf(b, 0, 0.5f);
  PutHalf(b, 34, -2.0f);
  for (int j = 0; j < 32; ++j) {
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 8 - 128));
    b[36 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  }
  auto v = Dequantize(8, b, 64);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(v[j], 0.5f * static_cast<float>(j * 8 - 128)) << j;
    EXPECT_EQ(v[32 + j], -2.0f * static_cast<float>(j - 16)) << j;
  }
  EXPECT_EQ(v[0], -64.0f);
  EXPECT_EQ(v[63], -30.0f);
}

TEST(GgmlQuantsTest, Q4_0AndQ4_1) {
  std::vector<uint8_t> q40(kQ4_0BlockBytes), q41(kQ4_1BlockBytes);
  PutHalf(q40, 0, 2.0f);
  PutHalf(q41, 0, 0.5f);
  PutHalf(q41, 2, -1.0f);
  for (int j = 0; j < 16; ++j) {
    uint8_t byte = static_cast<uint8_t>((j & 0xF) | ((15 - j) << 4));
    q40[2 + j] = byte;
    q41[4 + j] = byte;
  }
  auto a = Dequantize(2, q40, 32);
  auto b = Dequantize(3, q41, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(a[j], 2.0f * static_cast<float>(j - 8)) << j;       // low nibble: element j
    EXPECT_EQ(a[j + 16], 2.0f * static_cast<float>(7 - j)) << j;  // high nibble: j + 16
    EXPECT_EQ(b[j], 0.5f * static_cast<float>(j) - 1.0f) << j;
    EXPECT_EQ(b[j + 16], 0.5f * static_cast<float>(15 - j) - 1.0f) << j;
  }
  EXPECT_EQ(a[0], -16.0f);
  EXPECT_EQ(a[16], 14.0f);
  EXPECT_EQ(b[31], -1.0f);
}

// The reference quantizers: a hand block's exact bytes, and on Gaussian rows each value within
// half a step (plus the f16 rounding of the scale and minimum) of its dequantized value; a block
// of zeros dequantizes to zeros; quantizing the dequantized values again gives the same values
// (the grid is kept: a policy dequantized from such blocks quantizes back to them).
TEST(GgmlQuantsTest, QuantizersRoundTripWithinHalfAStep) {
  std::vector<float> ramp(32);
  for (int j = 0; j < 32; ++j) ramp[j] = static_cast<float>(j % 16) * 0.5f - 1.0f;
  std::vector<uint8_t> q41(kQ4_1BlockBytes), q80(kQ8_0BlockBytes);
  QuantizeQ4_1(ramp.data(), q41.data(), 32);
  EXPECT_EQ(Dequantize(3, q41, 32), ramp);  // d 0.5, m -1: every value on the grid
  EXPECT_EQ(q41[4], 0x00);                  // elements 0 and 16: q 0
  EXPECT_EQ(q41[4 + 15], 0xFF);             // elements 15 and 31: q 15
  QuantizeQ8_0(ramp.data(), q80.data(), 32);
  EXPECT_EQ(static_cast<int8_t>(q80[2 + 15]), 127);  // the largest magnitude, 6.5
  EXPECT_EQ(static_cast<int8_t>(q80[2 + 0]), -20);   // -1 / (6.5 / 127) = -19.54

  const int64_t n = 32 * 64;
  std::vector<float> x = testing::RandomNormal(n, 7, 0.02f);
  std::fill_n(x.begin(), 32, 0.0f);  // one block of zeros
  for (uint32_t type : {3u, 8u}) {
    SCOPED_TRACE(GgmlTypeName(type));
    std::vector<uint8_t> blocks(*GgmlRowBytes(type, n)), again(blocks.size());
    auto quantize = type == 3 ? QuantizeQ4_1 : QuantizeQ8_0;
    quantize(x.data(), blocks.data(), n);
    const std::vector<float> y = Dequantize(type, blocks, static_cast<size_t>(n));
    for (int64_t b = 0; b < n / 32; ++b) {
      float lo = x[b * 32], hi = x[b * 32], amax = 0;
      for (int j = 0; j < 32; ++j) {
        lo = std::min(lo, x[b * 32 + j]);
        hi = std::max(hi, x[b * 32 + j]);
        amax = std::max(amax, std::abs(x[b * 32 + j]));
      }
      const float step = type == 3 ? (hi - lo) / 15 : amax / 127;
      for (int j = 0; j < 32; ++j) {
        const int64_t i = b * 32 + j;
        // Half a step, and the f16 scale's (and minimum's) relative error of 2^-11 on x.
        ASSERT_LE(std::abs(y[i] - x[i]), 0.5f * step + 1e-3f * (std::abs(x[i]) + std::abs(lo)))
            << "element " << i;
      }
    }
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.0f);
    quantize(y.data(), again.data(), n);
    const std::vector<float> z = Dequantize(type, again, static_cast<size_t>(n));
    // Q8_0 exactly (127 d is exact in f32); Q4_1 up to the f16 rounding of its new scale.
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(z[i], y[i], type == 8 ? 0.0f : 1e-4f) << i;
  }
}

TEST(GgmlQuantsTest, Q4_KScalePacking) {
  // Sub-block scales {1, 2, 3, 4, 33, 45, 50, 63} and mins {0, 10, 20, 30, 40, 50, 60, 63},
  // packed by hand: bytes 0-3 hold scales 0-3 plus the top 2 bits of scales 4-7, bytes 4-7 the
  // mins 0-3 plus the top bits of mins 4-7, bytes 8-11 the low nibbles of scale/min 4-7.
  const uint8_t scales[12] = {129, 130, 195, 196, 128, 202, 212, 222, 129, 45, 194, 255};
  std::vector<uint8_t> b(kQ4_KBlockBytes);
  PutHalf(b, 0, 1.0f);  // d
  PutHalf(b, 2, 0.5f);  // dmin
  std::memcpy(&b[4], scales, 12);
  for (int i = 0; i < 128; ++i) b[16 + i] = 0x21;  // low nibble 1, high nibble 2
  auto v = Dequantize(12, b, 256);
  // x = d * scale * q - dmin * min; even sub-blocks see q = 1, odd ones q = 2.
  const float expected[8] = {1.0f, -1.0f, -7.0f, -7.0f, 13.0f, 65.0f, 20.0f, 94.5f};
  for (int e = 0; e < 256; ++e) EXPECT_EQ(v[e], expected[e / 32]) << "element " << e;
}

TEST(GgmlQuantsTest, Q4_KNibbleOrder) {
  std::vector<uint8_t> b(kQ4_KBlockBytes);
  PutHalf(b, 0, 1.0f);
  PutHalf(b, 2, 0.0f);
  const uint8_t unit[12] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};  // every scale 1, every min 0
  std::memcpy(&b[4], unit, 12);
  for (int i = 0; i < 128; ++i) b[16 + i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  auto v = Dequantize(12, b, 256);
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(v[chunk * 64 + l], static_cast<float>(l % 16));
      EXPECT_EQ(v[chunk * 64 + 32 + l], static_cast<float>(15 - l % 16));
    }
  }
}

// Packs 256 6-bit quants the way ggml's quantize_row_q6_K_ref lays them out.
std::vector<uint8_t> PackQ6K(const int q[256], const int8_t scales[16], float d) {
  std::vector<uint8_t> b(kQ6_KBlockBytes);
  for (int half = 0; half < 2; ++half) {
    uint8_t* ql = &b[half * 64];
    uint8_t* qh = &b[128 + half * 32];
    const int* L = q + half * 128;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((L[l] & 0xF) | ((L[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((L[l + 32] & 0xF) | ((L[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((L[l] >> 4) | ((L[l + 32] >> 4) << 2) | ((L[l + 64] >> 4) << 4) |
                                   ((L[l + 96] >> 4) << 6));
    }
  }
  std::memcpy(&b[192], scales, 16);
  PutHalf(b, 208, d);
  return b;
}

TEST(GgmlQuantsTest, Q6_K) {
  int8_t scales[16];
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>(i * 9 - 70);  // -70 .. 65
  // All-zero quants decode to d * scale * -32; all-ones (63) to d * scale * 31.
  std::vector<uint8_t> zeros(kQ6_KBlockBytes, 0), ones(kQ6_KBlockBytes, 0xff);
  for (auto* b : {&zeros, &ones}) {
    std::memcpy(&(*b)[192], scales, 16);
    PutHalf(*b, 208, 0.25f);
  }
  auto z = Dequantize(14, zeros, 256);
  auto o = Dequantize(14, ones, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(z[e], 0.25f * scales[e / 16] * -32.0f) << e;
    EXPECT_EQ(o[e], 0.25f * scales[e / 16] * 31.0f) << e;
  }
  // Random quants through the packer: every element lands at its own position.
  std::mt19937 rng(7);
  int q[256];
  for (int& x : q) x = static_cast<int>(rng() % 64);
  auto v = Dequantize(14, PackQ6K(q, scales, 0.5f), 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(v[e], 0.5f * static_cast<float>(scales[e / 16]) * static_cast<float>(q[e] - 32))
        << "element " << e;
  }
}

TEST(GgmlQuantsTest, MultipleBlocksAreIndependent) {
  std::vector<uint8_t> b(3 * kQ4_KBlockBytes, 0);
  for (int blk = 0; blk < 3; ++blk) {
    PutHalf(b, blk * kQ4_KBlockBytes, static_cast<float>(blk + 1));
    for (int i = 0; i < 4; ++i) b[blk * kQ4_KBlockBytes + 4 + i] = 1;
    for (int i = 8; i < 12; ++i) b[blk * kQ4_KBlockBytes + 4 + i] = 1;
    for (int i = 0; i < 128; ++i) b[blk * kQ4_KBlockBytes + 16 + i] = 0x33;
  }
  auto v = Dequantize(12, b, 768);
  EXPECT_EQ(v[0], 3.0f);
  EXPECT_EQ(v[256], 6.0f);
  EXPECT_EQ(v[767], 9.0f);
}

TEST(GgmlQuantsTest, Errors) {
  std::vector<float> out(32);
  std::vector<uint8_t> short_block(10);
  Status st = DequantizeGgml(8, short_block, out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("q8_0"), std::string::npos) << st;
  std::vector<uint8_t> q5k(176);
  std::vector<float> out256(256);
  st = DequantizeGgml(13, q5k, out256);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("q5_K"), std::string::npos) << st;
  EXPECT_FALSE(DequantizeGgml(77, short_block, out).ok());
  std::vector<float> none;
  EXPECT_TRUE(DequantizeGgml(12, {}, none).ok());  // zero elements
}

}  // namespace
}  // namespace laminar::model
