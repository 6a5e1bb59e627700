// Quantized matmuls (kernels/reference/quant.h, kernels/cpu/quant_gemm.h): LiquidQuant lanes never
// overflow (exhaustive), every dispatch path on this CPU equals the reference bit for bit (odd
// shapes, K not a multiple of the group, M = 1 and 64), the formats match f32 within stated
// tolerances, GGUF blocks match dequantize-then-f32, and bad input gets clear errors.
#include "kernels/cpu/quant_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/quant.h"
#include "kernels/tolerance.h"
#include "tests/test_util.h"

namespace laminar::kernels {
namespace {

using laminar::testing::RandomGgmlBlocks;
using laminar::testing::RandomNormal;
struct Shape3 {
  int64_t m, n, k;
};

// Shapes: 1s, primes, K not a multiple of 32 or of the group, M = 1 and 64, SmolLM2 projections.
const std::vector<Shape3>& Shapes() {
  static const std::vector<Shape3> shapes = {
      {1, 1, 1},     {1, 7, 13},     {3, 17, 31},    {2, 5, 100},    {1, 9, 200},    {64, 67, 129},
      {1, 576, 576}, {64, 192, 576}, {5, 1536, 576}, {1, 576, 1536}, {64, 13, 1536}, {7, 3, 4097}};
  return shapes;
}

// The first bitwise difference, or "" when equal.
std::string FirstDifference(const std::vector<float>& want, const std::vector<float>& got) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&want[i], &got[i], sizeof(float)) != 0) {
      return "element " + std::to_string(i) + ": want " + std::to_string(want[i]) + ", got " +
             std::to_string(got[i]);
    }
  }
  return "";
}

// ||got - want|| / ||want|| over all outputs.
double RelativeError(const std::vector<float>& want, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    den += double{want[i]} * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(LiquidQuantTest, PackedLanesNeverOverflow) {
  // Every allowed (s2, a) and every pair of 4-bit values in two lanes, at every lane position; the
  // 32-bit form (LiquidQuant's IMAD + XOR) and the 16-bit form the x86 kernels use.
  int64_t checked = 0;
  for (uint32_t s2 = 1; s2 <= kW4A8MaxGroupScale; ++s2) {
    for (uint32_t a = 1; a + 15 * s2 <= 255; ++a) {
      for (uint32_t lo = 0; lo < 16; ++lo) {
        for (uint32_t hi = 0; hi < 16; ++hi) {
          const int want_lo = static_cast<int>(lo * s2 + a) - 128;
          const int want_hi = static_cast<int>(hi * s2 + a) - 128;
          ASSERT_GE(want_lo, -127);
          ASSERT_LE(want_hi, 127);
          for (int shift : {0, 8, 16}) {
            const uint32_t packed = (lo << shift) | (hi << (shift + 8));
            const uint32_t out = DequantizeW4Lanes32(packed, s2, a);
            for (int lane = 0; lane < 4; ++lane) {
              const int8_t got = static_cast<int8_t>((out >> (8 * lane)) & 0xFF);
              const int want = lane * 8 == shift       ? want_lo
                               : lane * 8 == shift + 8 ? want_hi
                                                       : int(a) - 128;
              ASSERT_EQ(got, want) << "s2 " << s2 << " a " << a << " q4 " << lo << "," << hi;
            }
          }
          const uint16_t lane16 = static_cast<uint16_t>((lo | (hi << 8)) * s2);
          ASSERT_EQ(static_cast<uint8_t>(lane16 & 0xFF) + a, lo * s2 + a);
          ASSERT_EQ(static_cast<uint8_t>(lane16 >> 8) + a, hi * s2 + a);
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100000);
  // All 16^4 four-lane words at the extreme parameters.
  for (auto [s2, a] :
       {std::pair<uint32_t, uint32_t>{16, 1}, {16, 15}, {1, 1}, {1, 240}, {8, 135}}) {
    for (uint32_t word = 0; word < 65536; ++word) {
      const uint32_t packed = (word & 0xF) | ((word >> 4 & 0xF) << 8) | ((word >> 8 & 0xF) << 16) |
                              ((word >> 12 & 0xF) << 24);
      const uint32_t out = DequantizeW4Lanes32(packed, s2, a);
      for (int lane = 0; lane < 4; ++lane) {
        const int q4 = (word >> (4 * lane)) & 0xF;
        ASSERT_EQ(static_cast<int8_t>((out >> (8 * lane)) & 0xFF), q4 * int(s2) + int(a) - 128);
      }
    }
  }
}

TEST(QuantFormatTest, QuantizersStayInsideTheirBounds) {
  for (int64_t group : {64, 128}) {
    auto w = RandomNormal(37 * 300, 5);
    w[17] = 40.f;  // an outlier channel
    auto q = QuantizeW4A8(w, 37, 300, group);
    ASSERT_TRUE(q.ok()) << q.status();
    for (int64_t r = 0; r < q->n; ++r) {
      for (int64_t g = 0; g < q->num_groups(); ++g) {
        ASSERT_GE(q->Scale(r, g), 1);
        ASSERT_LE(q->Scale(r, g), kW4A8MaxGroupScale);
        ASSERT_GE(q->Offset(r, g), 1);
        ASSERT_LE(q->Offset(r, g) + 15 * q->Scale(r, g), 255);
      }
    }
  }
  auto q8 = QuantizeW8A8(RandomNormal(11 * 70, 6), 11, 70);
  ASSERT_TRUE(q8.ok());
  for (int64_t r = 0; r < 11; ++r) {
    for (int64_t c = 0; c < q8->k_padded; ++c) ASSERT_GE(q8->U(r, c), 1);
  }
  Int8Activations x;
  QuantizeActivationsPerToken(RandomNormal(3 * 45, 7), 3, 45, &x);
  for (int8_t v : x.q) ASSERT_GE(v, -127);
  for (int64_t i = 0; i < 3; ++i) {
    int32_t s = 0;
    for (int64_t p = 0; p < x.k_padded; ++p) s += x.q[i * x.k_padded + p];
    EXPECT_EQ(s, x.sum[i]);
  }
}

// On AVX512-VNNI CPUs, M >= 17 runs oneDNN's int8 matmul on W unpacked to s8, or on W packed once
// (PackManyRowInt8; packed for the pool's split, so a call without the pool unpacks instead). The
// last shape has more than 256 tiles: several parts per call even without the pool.
TEST(QuantGemmTest, EveryPathEqualsTheReferenceBitForBit) {
  const int64_t onednn_before = cpu::OnednnInt8MatMuls();
  const int64_t packed_before = cpu::OnednnInt8PackedMatMuls();
  std::vector<Shape3> shapes = Shapes();
  shapes.push_back({20, 1030, 70});
  for (const Shape3& s : shapes) {
    auto x = RandomNormal(s.m * s.k, 11), w = RandomNormal(s.n * s.k, 12, 0.05f),
         bias = RandomNormal(s.n, 13);
    Int8Activations xq;
    QuantizeActivationsPerToken(x, s.m, s.k, &xq);
    auto w8 = QuantizeW8A8(w, s.n, s.k);
    ASSERT_TRUE(w8.ok());
    std::vector<W4A8Weights> w4s;
    for (int64_t group : {64, 128}) w4s.push_back(*QuantizeW4A8(w, s.n, s.k, group));
    for (bool with_bias : {false, true}) {
      std::span<const float> b =
          with_bias ? std::span<const float>(bias) : std::span<const float>();
      std::vector<float> want8(s.m * s.n), want4(s.m * s.n);
      ref::MatMulW8A8(xq, *w8, b, want8);
      ThreadPool pool(2);
      for (cpu::QuantIsa isa : cpu::AvailableQuantIsas()) {
        SCOPED_TRACE(cpu::QuantIsaName(isa) + " m " + std::to_string(s.m) + " n " +
                     std::to_string(s.n) + " k " + std::to_string(s.k) +
                     (with_bias ? " bias" : ""));
        std::vector<float> got(s.m * s.n, -1.f);
        auto reset = [&] { std::fill(got.begin(), got.end(), -1.f); };
        cpu::MatMulW8A8(xq, *w8, b, got, nullptr, isa);
        EXPECT_EQ(FirstDifference(want8, got), "") << "w8a8";
        reset();
        cpu::MatMulW8A8(xq, *w8, b, got, &pool, isa);
        EXPECT_EQ(FirstDifference(want8, got), "") << "w8a8, pool";
        const auto packed8 = cpu::PackManyRowInt8(*w8, pool.num_threads() + 1);
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          reset();
          cpu::MatMulW8A8(xq, *w8, b, got, p, isa, packed8.get());
          EXPECT_EQ(FirstDifference(want8, got), "") << "w8a8 packed, pool " << (p != nullptr);
        }
        for (const W4A8Weights& w4 : w4s) {
          ref::MatMulW4A8(xq, w4, b, want4);
          reset();
          cpu::MatMulW4A8(xq, w4, b, got, nullptr, isa);
          EXPECT_EQ(FirstDifference(want4, got), "") << "w4a8 group " << w4.group;
          reset();
          cpu::MatMulW4A8(xq, w4, b, got, &pool, isa);
          EXPECT_EQ(FirstDifference(want4, got), "") << "w4a8 group " << w4.group << ", pool";
          const auto packed4 = cpu::PackManyRowInt8(w4, pool.num_threads() + 1);
          EXPECT_EQ(packed4 != nullptr, cpu::BestQuantIsa() == cpu::QuantIsa::kAvx512Vnni);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            reset();
            cpu::MatMulW4A8(xq, w4, b, got, p, isa, packed4.get());
            EXPECT_EQ(FirstDifference(want4, got), "")
                << "w4a8 group " << w4.group << " packed, pool " << (p != nullptr);
          }
        }
      }
    }
  }
  if (cpu::BestQuantIsa() == cpu::QuantIsa::kAvx512Vnni) {  // LAMINAR_ISA may cap it below
    EXPECT_GT(cpu::OnednnInt8MatMuls(), onednn_before) << "the oneDNN int8 path never ran";
    EXPECT_GT(cpu::OnednnInt8PackedMatMuls(), packed_before) << "packed weights never served";
  }
}

TEST(QuantGemmTest, MatchesF32WithinTheFormatsError) {
  // Relative Frobenius error of the output against the f32 matmul, Gaussian x and W: int8 per
  // token / per channel costs ~1%, the 4-bit groups ~8%. Stated bounds with margin.
  for (const Shape3& s : {Shape3{1, 576, 576}, Shape3{64, 1536, 576}, Shape3{8, 576, 1536}}) {
    auto x = RandomNormal(s.m * s.k, 21), w = RandomNormal(s.n * s.k, 22, 0.05f);
    std::vector<float> want(s.m * s.n), got(s.m * s.n);
    ref::MatMul(x, w, {}, s.m, s.n, s.k, want);
    Int8Activations xq;
    QuantizeActivationsPerToken(x, s.m, s.k, &xq);
    cpu::MatMulW8A8(xq, *QuantizeW8A8(w, s.n, s.k), {}, got);
    EXPECT_LT(RelativeError(want, got), 0.02) << "w8a8";
    for (int64_t group : {64, 128}) {
      cpu::MatMulW4A8(xq, *QuantizeW4A8(w, s.n, s.k, group), {}, got);
      EXPECT_LT(RelativeError(want, got), 0.12) << "w4a8 group " << group;
    }
  }
}

TEST(QuantGemmTest, GgufBlocksMatchDequantizeThenF32) {
  for (uint32_t type : {2u, 3u, 8u}) {
    for (const Shape3& s :
         {Shape3{1, 1, 32}, Shape3{3, 7, 96}, Shape3{64, 67, 576}, Shape3{1, 576, 1536}}) {
      SCOPED_TRACE("type " + std::to_string(type) + " m " + std::to_string(s.m) + " n " +
                   std::to_string(s.n) + " k " + std::to_string(s.k));
      auto raw = RandomGgmlBlocks(type, s.n, s.k, 31);
      auto w = PackGgufWeights(type, raw, s.n, s.k);
      ASSERT_TRUE(w.ok()) << w.status();
      auto x = RandomNormal(s.m * s.k, 32), bias = RandomNormal(s.n, 33);
      Q8BlockActivations xq;
      QuantizeActivationsQ8Blocks(x, s.m, s.k, &xq);
      std::vector<float> want(s.m * s.n), f32(s.m * s.n), got(s.m * s.n);
      ref::MatMulGguf(xq, *w, bias, want);
      ref::MatMul(x, Dequantize(*w), bias, s.m, s.n, s.k, f32);
      // The Q8 activations cost ~0.5% of the output's size.
      EXPECT_LT(RelativeError(f32, want), 0.02);
      const cpu::GgufRowGroups groups = cpu::PackGgufRowGroups(*w);
      ThreadPool pool(2);
      std::vector<float> avx2;  // the AVX2 result, for the VNNI one
      for (cpu::QuantIsa isa : cpu::AvailableQuantIsas()) {
        cpu::MatMulGguf(xq, groups, bias, got, &pool, isa);
        // The SIMD builds take the same exact int32 row sums through the same f32 operations.
        if (isa == cpu::QuantIsa::kAvx2) avx2 = got;
        if (isa == cpu::QuantIsa::kAvx512Vnni && !avx2.empty()) {
          for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], avx2[i]) << "element " << i;
        }
        float scale = 0;
        for (float v : want) scale = std::max(scale, std::abs(v));
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], kMatMulGgufQuant.abs + kMatMulGgufQuant.rel * scale)
              << cpu::QuantIsaName(isa) << " element " << i;
        }
        // Batch invariance: the first row alone (the decode path) gives the bits it got among M
        // rows.
        Q8BlockActivations x0;
        QuantizeActivationsQ8Blocks(std::span<const float>(x).first(s.k), 1, s.k, &x0);
        std::vector<float> alone(s.n);
        cpu::MatMulGguf(x0, groups, bias, alone, &pool, isa);
        for (int64_t j = 0; j < s.n; ++j) {
          ASSERT_EQ(alone[j], got[j]) << cpu::QuantIsaName(isa) << " column " << j;
        }
      }
    }
  }
}

// A drafter's head over part of the vocabulary: the gathered rows are the source rows, bit for bit,
// in any order and with repeats, in both row formats with their own layouts.
TEST(QuantFormatTest, GatherRowsKeepsTheRowsBitForBit) {
  const std::vector<int32_t> rows = {66, 0, 5, 5, 31, 64};
  const int64_t n = 67;
  // Row r of `got` [rows, K] is row rows[r] of `all` [n, K].
  auto expect_rows = [&](const std::vector<float>& all, const std::vector<float>& got, int64_t k,
                         const std::string& what) {
    ASSERT_EQ(got.size(), rows.size() * static_cast<size_t>(k)) << what;
    for (size_t r = 0; r < rows.size(); ++r) {
      for (int64_t c = 0; c < k; ++c) {
        ASSERT_EQ(got[r * k + c], all[rows[r] * k + c]) << what << " row " << r;
      }
    }
  };
  for (const int64_t k : {int64_t{96}, int64_t{129}}) {
    auto w8 = QuantizeW8A8(RandomNormal(static_cast<size_t>(n * k), 41), n, k);
    ASSERT_TRUE(w8.ok()) << w8.status();
    expect_rows(Dequantize(*w8), Dequantize(GatherRows(*w8, rows)), k,
                "w8a8 k " + std::to_string(k));
  }
  for (uint32_t type : {2u, 3u, 8u}) {
    const int64_t k = 96;
    auto w = PackGgufWeights(type, RandomGgmlBlocks(type, n, k, 43), n, k);
    ASSERT_TRUE(w.ok()) << w.status();
    expect_rows(Dequantize(*w), Dequantize(GatherRows(*w, rows)), k,
                "ggml type " + std::to_string(type));
    // The kernels' row groups: packing keeps every value, and so does gathering from them.
    const cpu::GgufRowGroups groups = cpu::PackGgufRowGroups(*w);
    const GgufQuantWeights back = cpu::UnpackGgufRowGroups(groups);
    EXPECT_EQ(back.qs, w->qs);
    EXPECT_EQ(back.d, w->d);
    EXPECT_EQ(back.m, w->m);
    expect_rows(Dequantize(*w), Dequantize(cpu::UnpackGgufRowGroups(cpu::GatherRows(groups, rows))),
                k, "rows gathered from groups of ggml type " + std::to_string(type));
  }
}

TEST(QuantGemmTest, GgufDequantizationAgreesWithTheModelLoader) {
  // Q4_1 block: d = 0.5, m = -1, q4 = i % 16 for element i.
  std::vector<uint8_t> raw(20);
  const uint16_t d = FloatToHalf(0.5f), m = FloatToHalf(-1.f);
  std::memcpy(raw.data(), &d, 2);
  std::memcpy(raw.data() + 2, &m, 2);
  for (int j = 0; j < 16; ++j) raw[4 + j] = static_cast<uint8_t>((j % 16) | ((j + 16) % 16) << 4);
  auto w = PackGgufWeights(3, raw, 1, 32);
  ASSERT_TRUE(w.ok());
  auto f = Dequantize(*w);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(f[i], 0.5f * static_cast<float>(i % 16) - 1.f) << i;
}

TEST(QuantGemmTest, BadInputIsRefusedWithClearErrors) {
  std::vector<uint8_t> raw(20 * 3);
  auto bad_k = PackGgufWeights(3, raw, 2, 48);
  ASSERT_FALSE(bad_k.ok());
  EXPECT_NE(bad_k.status().message().find("multiple of the block size 32"), std::string::npos)
      << bad_k.status();
  auto bad_type = PackGgufWeights(12, raw, 1, 256);
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("ggml type 12"), std::string::npos);
  auto bad_size = PackGgufWeights(3, raw, 1, 32);
  ASSERT_FALSE(bad_size.ok());
  EXPECT_NE(bad_size.status().message().find("60 bytes, expected 20"), std::string::npos)
      << bad_size.status();
  auto w = RandomNormal(4 * 64, 41);
  auto bad_group = QuantizeW4A8(w, 4, 64, 32);
  ASSERT_FALSE(bad_group.ok());
  EXPECT_NE(bad_group.status().message().find("group size 32"), std::string::npos);
  w[70] = std::nanf("");
  auto nan = QuantizeW8A8(w, 4, 64);
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("weight [1, 6] is not finite"), std::string::npos)
      << nan.status();
  EXPECT_FALSE(QuantizeW8A8(w, 5, 64).ok());  // size mismatch
}

TEST(QuantGemmTest, NonFiniteActivationsGiveNaNNotGarbage) {
  auto w = QuantizeW8A8(RandomNormal(8 * 64, 51), 8, 64);
  auto x = RandomNormal(3 * 64, 52);
  x[3] = INFINITY;
  x[64 + 9] = std::nanf("");
  Int8Activations xq;
  QuantizeActivationsPerToken(x, 3, 64, &xq);
  std::vector<float> out(24);
  cpu::MatMulW8A8(xq, *w, {}, out);
  for (int j = 0; j < 16; ++j) EXPECT_TRUE(std::isnan(out[j])) << j;
  for (int j = 16; j < 24; ++j) EXPECT_TRUE(std::isfinite(out[j])) << j;
  Q8BlockActivations xb;
  QuantizeActivationsQ8Blocks(x, 3, 64, &xb);
  EXPECT_TRUE(std::isnan(xb.d[0]) && std::isnan(xb.d[2]) && std::isfinite(xb.d[4]));
}

}  // namespace
}  // namespace laminar::kernels
