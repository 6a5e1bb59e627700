// Vectorized row ops against the reference, on every ISA path this CPU has.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/vec_ops.h"
#include "kernels/reference/ops.h"
#include "kernels/tolerance.h"
#include "tests/test_util.h"

namespace laminar::kernels {
namespace {

using laminar::testing::RandomNormal;

std::vector<cpu::Isa> AvailableIsas() {
  std::vector<cpu::Isa> isas = {cpu::Isa::kScalar};
  if (cpu::GetCpuFeatures().avx2) isas.push_back(cpu::Isa::kAvx2);
  if (cpu::GetCpuFeatures().avx512) isas.push_back(cpu::Isa::kAvx512);
  return isas;
}
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, Tolerance tol,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::abs(double(got[i]) - want[i]), tol.abs + tol.rel * std::abs(want[i]))
        << what << " at " << i << ": got " << got[i] << " want " << want[i];
  }
}

const int64_t kWidths[] = {1, 7, 17, 576, 1000, 49152};

TEST(CpuVecOpsTest, RmsNormAndSwiGlu) {
  for (cpu::Isa isa : AvailableIsas()) {
    for (int64_t c : kWidths) {
      std::string what = cpu::IsaName(isa) + " C=" + std::to_string(c);
      auto x = RandomNormal(3 * c, 1, 2.f), w = RandomNormal(c, 2, 1.f);
      std::vector<float> want(3 * c), got(3 * c);
      ref::RmsNorm(x, w, 3, c, 1e-5, want);
      cpu::RmsNorm(x, w, 3, c, 1e-5, got, isa);
      ExpectClose(got, want, kRmsNormF32, "rmsnorm " + what);
      auto g = RandomNormal(c, 3, 6.f), u = RandomNormal(c, 4, 1.f);
      std::vector<float> sw_want(c), sw_got(c);
      ref::SwiGlu(g, u, sw_want);
      cpu::SwiGlu(g, u, sw_got, isa);
      ExpectClose(sw_got, sw_want, kSwiGluF32, "swiglu " + what);
    }
  }
}

TEST(CpuVecOpsTest, EmbeddingEqualsReference) {
  for (int64_t c : {1, 7, 64}) {
    const int64_t v = 13;
    auto table = RandomNormal(v * c, 5, 1.f);
    const std::vector<int32_t> ids = {0, 12, 3, 3, 7};
    std::vector<float> want(ids.size() * c), got(want.size());
    ref::Embedding(table, ids, c, want);
    cpu::Embedding(table, ids, c, got);
    EXPECT_EQ(got, want) << "C=" << c;
  }
  std::vector<float> table(4 * 2), out(2);
  const std::vector<int32_t> bad = {4};
  EXPECT_DEATH(cpu::Embedding(table, bad, 2, out), "token id 4 at index 0 outside the vocabulary");
}

TEST(CpuVecOpsTest, SoftmaxLogSumExpLogprobs) {
  for (cpu::Isa isa : AvailableIsas()) {
    for (int64_t v : kWidths) {
      std::string what = cpu::IsaName(isa) + " V=" + std::to_string(v);
      auto logits = RandomNormal(2 * v, 5, 8.f);
      logits[0] = 1000.f;  // extreme values must stay finite
      if (v > 1) logits[v + 1] = -1e30f;
      std::vector<float> want(2), got(2), p_want(2 * v), p_got(2 * v);
      ref::LogSumExp(logits, 2, v, want);
      cpu::LogSumExp(logits, 2, v, got, isa);
      ExpectClose(got, want, kLogSumExpF32, "logsumexp " + what);
      ref::Softmax(logits, 2, v, p_want);
      cpu::Softmax(logits, 2, v, p_got, isa);
      ExpectClose(p_got, p_want, kSoftmaxF32, "softmax " + what);
      std::vector<int32_t> targets = {static_cast<int32_t>(v - 1), 0};
      std::vector<float> lp_want(2), lp_got(2);
      ref::TokenLogprobs(logits, targets, 2, v, lp_want);
      cpu::TokenLogprobs(logits, targets, 2, v, lp_got, isa);
      ExpectClose(lp_got, lp_want, kLogSumExpF32, "logprobs " + what);
    }
  }
}

}  // namespace
}  // namespace laminar::kernels

namespace laminar::kernels {
namespace {

// The sampler's f64 exponentials: within 2 ulp of std::exp over the whole range a logit row
// reaches, 0 below -708.39, and the returned sum is the sum of the outputs.
TEST(CpuVecOpsTest, ExpScaledShiftedF64IsWithinTwoUlpOfStdExp) {
  std::vector<float> x;
  for (int i = 0; i <= 20000; ++i) x.push_back(-800.f + 0.04f * static_cast<float>(i));  // -800..0
  for (float v : {0.f, -0.f, -1e-30f, -1e-8f, -0.34657f, -0.34658f, -708.3f, -708.4f, -745.2f}) {
    x.push_back(v);
  }
  x.push_back(3.f);  // odd length: the tail path too
  for (cpu::Isa isa : AvailableIsas()) {
    for (double scale : {1.0, 1.0 / 0.7}) {
      const double shift = 2.5;
      std::vector<double> out(x.size());
      const double sum = cpu::ExpScaledShiftedF64(x, scale, shift, out, isa);
      double want_sum = 0, max_ulp = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        // The argument is rounded once where x · scale − shift is a fused multiply-add (the
        // AVX2 and AVX-512 builds), twice otherwise: the closer of the two exponentials counts.
        const double arg = static_cast<double>(x[i]) * scale - shift;
        const double fused = std::fma(static_cast<double>(x[i]), scale, -shift);
        if (std::max(arg, fused) < -708.39) {
          ASSERT_EQ(out[i], 0.0) << cpu::IsaName(isa) << " at " << arg;
          continue;
        }
        double err = INFINITY;
        for (double a : {arg, fused}) {
          const double want = std::exp(a);
          err = std::min(err, std::abs(out[i] - want) / (std::nextafter(want, INFINITY) - want));
        }
        max_ulp = std::max(max_ulp, err);
        want_sum += out[i];
      }
      EXPECT_LE(max_ulp, 2.0) << cpu::IsaName(isa);
      EXPECT_NEAR(sum, want_sum, 1e-12 * want_sum) << cpu::IsaName(isa);
    }
  }
}

TEST(CpuMatMulBF16Test, EqualsReferenceOnRoundedWeights) {
  ThreadPool pool(2);
  struct Case {
    int64_t m, n, k;
  };
  for (cpu::Isa isa : AvailableIsas()) {
    for (Case c : {Case{1, 1, 1}, Case{1, 7, 13}, Case{3, 17, 31}, Case{1, 1536, 576},
                   Case{8, 577, 1536}, Case{64, 67, 129}}) {
      auto x = RandomNormal(c.m * c.k, 1, 1.f), wf = RandomNormal(c.n * c.k, 2, 1.f);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) {
        wb[i] = FloatToBF16(wf[i]);
        wf[i] = BF16ToFloat(wb[i]);
      }
      std::vector<float> want(c.m * c.n), got(c.m * c.n);
      ref::MatMul(x, wf, {}, c.m, c.n, c.k, want);
      cpu::MatMulBF16(x, wb, c.m, c.n, c.k, got, c.n > 100 ? &pool : nullptr, isa);
      ExpectClose(got, want, kMatMulBF16,
                  cpu::IsaName(isa) + " M=" + std::to_string(c.m) + " N=" + std::to_string(c.n));
    }
  }
}

// The batch-invariant f32 matmul: every ISA, 1..9 rows, K and N tails, bias, with and
// without the pool; a row's outputs are the same bits whatever M is.
TEST(CpuMatMulF32BatchInvariantTest, EqualsReferenceAndIsIndependentOfM) {
  ThreadPool pool(2);
  struct Case {
    int64_t n, k;
  };
  for (cpu::Isa isa : AvailableIsas()) {
    for (Case c : {Case{1, 1}, Case{7, 13}, Case{17, 31}, Case{577, 64}, Case{1536, 576}}) {
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
        for (bool with_bias : {false, true}) {
          auto x = RandomNormal(m * c.k, 1, 1.f), w = RandomNormal(c.n * c.k, 2, 1.f);
          auto bias = with_bias ? RandomNormal(c.n, 3, 1.f) : std::vector<float>{};
          std::vector<float> want(m * c.n), got(m * c.n);
          ref::MatMul(x, w, bias, m, c.n, c.k, want);
          cpu::MatMulF32BatchInvariant(x, w, bias, m, c.n, c.k, got, c.n > 100 ? &pool : nullptr,
                                       isa);
          const std::string what = cpu::IsaName(isa) + " M=" + std::to_string(m) +
                                   " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k);
          ExpectClose(got, want, kMatMulF32, what);
          // Each row alone gives the same bits (rows go in groups of up to 4 that share loads).
          std::vector<float> alone(c.n);
          for (int64_t i = 0; i < m; ++i) {
            cpu::MatMulF32BatchInvariant(std::span<const float>(x).subspan(i * c.k, c.k), w, bias,
                                         1, c.n, c.k, alone, nullptr, isa);
            for (int64_t j = 0; j < c.n; ++j) {
              ASSERT_EQ(alone[j], got[i * c.n + j]) << what << " row " << i << " column " << j;
            }
          }
        }
      }
    }
  }
  // oneDNN's f32 matmul reuses its cached primitives with other pointers: alternate shapes and
  // buffers.
  for (int64_t m : {1, 5, 4, 5, 9, 5}) {
    auto x = RandomNormal(m * 96, static_cast<uint32_t>(m), 1.f), w = RandomNormal(67 * 96, 7, 1.f);
    std::vector<float> want(m * 67), got(m * 67);
    ref::MatMul(x, w, {}, m, 67, 96, want);
    ASSERT_TRUE(cpu::OnednnMatMulF32(x, w, {}, m, 67, 96, got, &pool).ok());
    ExpectClose(got, want, kMatMulF32, "oneDNN MatMul M=" + std::to_string(m));
  }
}

// The tabulated RoPE equals the reference bit for bit, in both layouts, with Llama-3 scaling,
// for positions inside the table and past it.
TEST(CpuRopeTest, EqualsReferenceBitForBit) {
  const int64_t h = 3, t = 5;
  // Head dims: stories260K's 8, a small non-power of two, SmolLM2's 64, and 128.
  for (int64_t d : {2, 8, 10, 64, 128}) {
    std::vector<double> inv_freq(d / 2);
    RopeScalingParams scaling;
    scaling.type = "llama3";
    scaling.factor = 8;
    scaling.low_freq_factor = 1;
    scaling.high_freq_factor = 4;
    scaling.original_max_position_embeddings = 64;
    ref::RopeInvFreq(d, 500000.0, scaling, inv_freq);
    const cpu::RopeTable table(inv_freq, 100);
    const std::vector<int32_t> positions = {0, 1, 99, 100, 4097};
    for (auto layout : {RopeLayout::kInterleaved, RopeLayout::kRotateHalf}) {
      auto want = RandomNormal(t * h * d, 5, 1.f);
      auto got = want;
      ref::Rope(want, positions, t, h, d, inv_freq, layout);
      table.Apply(got, positions, t, h, d, layout);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "D=" << d << " at " << i;
      }
    }
  }
}

// The vectorized rounding equals core/dtype.h FloatToBF16 on every kind of value: ties to even,
// carries into the exponent, overflow to infinity, denormals, signed zeros, NaNs (kept quiet).
TEST(CpuRoundToBF16Test, EqualsTheScalarRounding) {
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x3f808000u,
                                0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                                0xff800000u, 0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu};
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> x(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) std::memcpy(&x[i], &bits[i], 4);
  std::vector<uint16_t> got(x.size());
  cpu::RoundToBF16(x, got);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(got[i], FloatToBF16(x[i])) << "bits 0x" << std::hex << bits[i];
  }
}

// The engine's entry point for bf16 weights, on both sides of the decode/prefill switch, with a
// bias: f32 activations on every CPU, bf16 activations where the CPU has the dot product.
TEST(CpuMatMulBF16Test, WeightsEntryPointWithBiasAroundTheRowSwitch) {
  ThreadPool pool(2);
  const int64_t n = 70, k = 96;
  auto wf = RandomNormal(n * k, 2, 1.f), bias = RandomNormal(n, 3, 1.f);
  std::vector<uint16_t> wb(wf.size());
  cpu::RoundToBF16(wf, wb);
  for (size_t i = 0; i < wf.size(); ++i) wf[i] = BF16ToFloat(wb[i]);
  std::vector<bool> modes = {false};
  if (cpu::HasBF16Dot()) modes.push_back(true);
  for (int64_t m : {cpu::kBF16DirectMaxRows, cpu::kBF16DirectMaxRows + 1}) {
    for (bool bf16_x : modes) {
      auto x = RandomNormal(m * k, 1, 1.f);
      if (bf16_x) {
        std::vector<uint16_t> xb(x.size());
        cpu::RoundToBF16(x, xb);
        for (size_t i = 0; i < x.size(); ++i) x[i] = BF16ToFloat(xb[i]);
      }
      std::vector<float> want(m * n), got(m * n, -1.f);
      ref::MatMul(x, wf, bias, m, n, k, want);
      cpu::MatMulBF16Weights(x, wb, bias, m, n, k, got, &pool, bf16_x);
      ExpectClose(got, want, kMatMulBF16,
                  "M=" + std::to_string(m) + (bf16_x ? " bf16 activations" : " f32 activations"));
    }
  }
}

// Activations and weights rounded to bf16: the bf16 dot product (ours at decode shapes, oneDNN's
// at prefill shapes) against the f64 reference on the same rounded values.
TEST(CpuMatMulBF16DotTest, EqualsReferenceOnRoundedOperands) {
  ThreadPool pool(2);
  struct Case {
    int64_t m, n, k;
  };
  std::vector<cpu::Isa> isas = {cpu::Isa::kScalar};
  if (cpu::GetCpuFeatures().avx512_bf16) isas.push_back(cpu::Isa::kAvx512);
  for (Case c : {Case{1, 1, 1}, Case{1, 7, 13}, Case{3, 17, 31}, Case{1, 1536, 576}, Case{5, 6, 33},
                 Case{8, 577, 1536}, Case{16, 67, 129}, Case{64, 9, 64}}) {
    auto xf = RandomNormal(c.m * c.k, 1, 1.f), wf = RandomNormal(c.n * c.k, 2, 1.f);
    std::vector<uint16_t> xb(xf.size()), wb(wf.size());
    cpu::RoundToBF16(xf, xb);
    cpu::RoundToBF16(wf, wb);
    for (size_t i = 0; i < xf.size(); ++i) xf[i] = BF16ToFloat(xb[i]);
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = BF16ToFloat(wb[i]);
    std::vector<float> want(c.m * c.n), got(c.m * c.n);
    ref::MatMul(xf, wf, {}, c.m, c.n, c.k, want);
    const std::string shape =
        " M=" + std::to_string(c.m) + " N=" + std::to_string(c.n) + " K=" + std::to_string(c.k);
    for (cpu::Isa isa : isas) {
      std::fill(got.begin(), got.end(), -1.f);
      cpu::MatMulBF16Dot(xb, wb, c.m, c.n, c.k, got, c.n > 100 ? &pool : nullptr, isa);
      ExpectClose(got, want, kMatMulBF16, "dot " + cpu::IsaName(isa) + shape);
    }
    std::fill(got.begin(), got.end(), -1.f);
    Status st = cpu::OnednnMatMulBF16(xb, wb, {}, c.m, c.n, c.k, got, &pool);
    if (st.code() == StatusCode::kUnimplemented) continue;  // oneDNN 2.6 on AVX2
    ASSERT_TRUE(st.ok()) << st.ToString();
    ExpectClose(got, want, kMatMulBF16, "oneDNN" + shape);
  }
  std::vector<float> out(4);
  std::vector<uint16_t> two(2);
  EXPECT_DEATH(cpu::MatMulBF16Dot(two, two, 2, 2, 2, out, nullptr, cpu::Isa::kScalar), "sizes");
  EXPECT_FALSE(cpu::OnednnMatMulBF16(two, two, {}, 2, 2, 2, out).ok());
}

}  // namespace
}  // namespace laminar::kernels

namespace laminar::kernels {
namespace {

// No tokens is nothing to do, on both paths (head dims up to 16 and above).
TEST(CpuAttentionTest, NoTokensIsANoOp) {
  for (int64_t d : {8, 64}) {
    const std::vector<float> cache(4 * 2 * d, 1.0f);
    std::vector<float> q, out;
    cpu::CausalAttention(q, cache, cache, std::span<const int32_t>(), 0, 4, 2, d, 4, out);
  }
}

TEST(CpuAttentionTest, EqualsReference) {
  ThreadPool pool(2);
  struct Case {
    int64_t t, h, hkv, d, s;
  };
  for (cpu::Isa isa : AvailableIsas()) {
    // t · hkv >= 8 runs each token's group of heads as one job (g = 3, 7 and 3 with d = 72 here;
    // AVX-512 takes up to 4 heads per pass over the keys).
    // Head dims up to 16 attend over transposed keys and values (1, 7, 8, 16 here), shared by
    // all of a call's tokens; 64 tokens of d = 8 run on the pool.
    for (Case c : {Case{1, 1, 1, 1, 1}, Case{3, 4, 2, 7, 5}, Case{5, 9, 3, 64, 37},
                   Case{1, 9, 3, 64, 300}, Case{8, 14, 2, 64, 40}, Case{8, 6, 2, 72, 21},
                   Case{64, 8, 4, 8, 300}, Case{6, 4, 1, 16, 33}}) {
      auto q = RandomNormal(c.t * c.h * c.d, 1, 1.f), k = RandomNormal(c.s * c.hkv * c.d, 2, 1.f),
           v = RandomNormal(c.s * c.hkv * c.d, 3, 1.f);
      std::vector<int32_t> pos(c.t);
      for (int64_t i = 0; i < c.t; ++i) pos[i] = static_cast<int32_t>(c.s - c.t + i);  // the last t
      std::vector<float> want(q.size()), got(q.size());
      ref::CausalAttention(q, k, v, pos, c.t, c.h, c.hkv, c.d, c.s, want);
      cpu::CausalAttention(q, k, v, pos, c.t, c.h, c.hkv, c.d, c.s, got,
                           c.s > 100 ? &pool : nullptr, isa);
      ExpectClose(got, want, kAttentionF32, cpu::IsaName(isa) + " S=" + std::to_string(c.s));
      // A token alone (one head per job) gives the same bits as in the batch (grouped jobs).
      for (int64_t i = 0; i < c.t && c.t > 1; ++i) {
        std::vector<float> qi(q.begin() + i * c.h * c.d, q.begin() + (i + 1) * c.h * c.d);
        std::vector<float> alone(qi.size());
        cpu::CausalAttention(qi, k, v, {&pos[i], 1}, 1, c.h, c.hkv, c.d, c.s, alone, nullptr, isa);
        for (size_t e = 0; e < alone.size(); ++e) {
          ASSERT_EQ(alone[e], got[i * c.h * c.d + e]) << cpu::IsaName(isa) << " token " << i;
        }
      }
      // Each head alone (its own query against its KV head's rows) gives the bits its group gave.
      for (int64_t i = 0; i < c.t; ++i) {
        for (int64_t hh = 0; hh < c.h; ++hh) {
          const int64_t kvh = hh / (c.h / c.hkv);
          std::vector<float> qh(q.begin() + (i * c.h + hh) * c.d,
                                q.begin() + (i * c.h + hh + 1) * c.d);
          std::vector<float> kh, vh, one(c.d);
          for (int64_t p = 0; p < c.s; ++p) {
            kh.insert(kh.end(), k.begin() + (p * c.hkv + kvh) * c.d,
                      k.begin() + (p * c.hkv + kvh + 1) * c.d);
            vh.insert(vh.end(), v.begin() + (p * c.hkv + kvh) * c.d,
                      v.begin() + (p * c.hkv + kvh + 1) * c.d);
          }
          cpu::CausalAttention(qh, kh, vh, {&pos[i], 1}, 1, 1, 1, c.d, c.s, one, nullptr, isa);
          for (int64_t e = 0; e < c.d; ++e) {
            ASSERT_EQ(one[e], got[(i * c.h + hh) * c.d + e])
                << cpu::IsaName(isa) << " token " << i << " head " << hh;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace laminar::kernels
