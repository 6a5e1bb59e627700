// Reference ops against hand-computed values and the mathematical properties that define them.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "kernels/reference/ops.h"
#include "tests/test_util.h"

namespace laminar::kernels {
namespace {

using laminar::testing::RandomNormal;
TEST(ReferenceOpsTest, MatMulWithBias) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};         // [2, 3]
  std::vector<float> w = {1, 0, -1, 0.5f, 0.5f, 0};  // [2, 3]
  std::vector<float> b = {10, 20};
  std::vector<float> out(4);
  ref::MatMul(x, w, b, 2, 2, 3, out);
  EXPECT_EQ(out, (std::vector<float>{8, 21.5f, 8, 24.5f}));
}

TEST(ReferenceOpsTest, RmsNorm) {
  std::vector<float> x = {3, 4}, w = {1, 2}, out(2);
  ref::RmsNorm(x, w, 1, 2, 0.0, out);
  float rms = std::sqrt(12.5f);
  EXPECT_FLOAT_EQ(out[0], 3 / rms);
  EXPECT_FLOAT_EQ(out[1], 8 / rms);
}

TEST(ReferenceOpsTest, RopeIsARelativeRotation) {
  const int64_t d = 8;
  std::vector<double> inv(d / 2);
  ref::RopeInvFreq(d, 10000.0, {}, inv);
  EXPECT_DOUBLE_EQ(inv[0], 1.0);
  EXPECT_NEAR(inv[1], std::pow(10000.0, -0.25), 1e-15);
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kRotateHalf}) {
    auto q = RandomNormal(d, 1), k = RandomNormal(d, 2);
    // q at position m and k at position n: q.k depends only on m - n.
    auto dot_at = [&](int32_t m, int32_t n) {
      std::vector<float> qm = q, kn = k;
      std::vector<int32_t> pm = {m}, pn = {n};
      ref::Rope(qm, pm, 1, 1, d, inv, layout);
      ref::Rope(kn, pn, 1, 1, d, inv, layout);
      double s = 0;
      for (int64_t i = 0; i < d; ++i) s += double(qm[i]) * kn[i];
      return s;
    };
    EXPECT_NEAR(dot_at(7, 3), dot_at(104, 100), 1e-4);
    std::vector<float> q0 = q;
    std::vector<int32_t> zero = {0};
    ref::Rope(q0, zero, 1, 1, d, inv, layout);
    EXPECT_EQ(q0, q);  // position 0 is the identity
  }
}

TEST(ReferenceOpsTest, RopeLayoutsDifferByAPermutation) {
  const int64_t d = 6;
  std::vector<double> inv(d / 2);
  ref::RopeInvFreq(d, 500000.0, {}, inv);
  auto x = RandomNormal(d, 3);
  // Interleaved index 2i <-> rotate-half index i; 2i+1 <-> i + D/2.
  std::vector<float> half(d);
  for (int64_t i = 0; i < d / 2; ++i) {
    half[i] = x[2 * i];
    half[i + d / 2] = x[2 * i + 1];
  }
  std::vector<int32_t> pos = {5};
  ref::Rope(x, pos, 1, 1, d, inv, RopeLayout::kInterleaved);
  ref::Rope(half, pos, 1, 1, d, inv, RopeLayout::kRotateHalf);
  for (int64_t i = 0; i < d / 2; ++i) {
    EXPECT_FLOAT_EQ(half[i], x[2 * i]);
    EXPECT_FLOAT_EQ(half[i + d / 2], x[2 * i + 1]);
  }
}

TEST(ReferenceOpsTest, Llama3RopeScaling) {
  const int64_t d = 128;
  std::vector<double> plain(d / 2), scaled(d / 2);
  RopeScalingParams s{"llama3", 8.0, 1.0, 4.0, 8192};
  ref::RopeInvFreq(d, 500000.0, {}, plain);
  ref::RopeInvFreq(d, 500000.0, s, scaled);
  EXPECT_EQ(scaled[0], plain[0]);                 // short wavelengths unchanged
  EXPECT_DOUBLE_EQ(scaled[63], plain[63] / 8.0);  // long wavelengths divided by factor
  for (int64_t i = 0; i < d / 2; ++i) {
    EXPECT_LE(scaled[i], plain[i]);
    EXPECT_GE(scaled[i], plain[i] / 8.0 * (1 - 1e-12));
  }
}

TEST(ReferenceOpsTest, SoftmaxLogSumExpAndLogprobsAreStable) {
  std::vector<float> logits = {1000, 1000, 999, -1e30f, 0, 1};  // [2, 3]
  std::vector<float> lse(2), probs(6), lp(2);
  ref::LogSumExp(logits, 2, 3, lse);
  EXPECT_NEAR(lse[0], 1000 + std::log(2 + std::exp(-1.0)), 1e-3);
  EXPECT_TRUE(std::isfinite(lse[1]));
  ref::Softmax(logits, 2, 3, probs);
  EXPECT_NEAR(probs[0] + probs[1] + probs[2], 1.0, 1e-6);
  EXPECT_EQ(probs[3], 0.0f);
  std::vector<int32_t> targets = {2, 2};
  ref::TokenLogprobs(logits, targets, 2, 3, lp);
  EXPECT_NEAR(lp[0], std::log(probs[2]), 1e-5);
  EXPECT_NEAR(lp[1], std::log(probs[5]), 1e-5);
}

TEST(ReferenceOpsTest, SwiGluAndEmbedding) {
  std::vector<float> g = {0, 2}, u = {5, 3}, out(2);
  ref::SwiGlu(g, u, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], 2 / (1 + std::exp(-2.f)) * 3);
  std::vector<float> table = {0, 1, 10, 11, 20, 21};  // [3, 2]
  std::vector<int32_t> ids = {2, 0};
  std::vector<float> e(4);
  ref::Embedding(table, ids, 2, e);
  EXPECT_EQ(e, (std::vector<float>{20, 21, 0, 1}));
}

TEST(ReferenceOpsTest, CausalGroupedQueryAttention) {
  const int64_t h = 4, hkv = 2, d = 3, s = 3;
  auto k = RandomNormal(s * hkv * d, 4), v = RandomNormal(s * hkv * d, 5),
       q = RandomNormal(2 * h * d, 6);
  std::vector<int32_t> pos = {0, 2};
  std::vector<float> out(2 * h * d);
  ref::CausalAttention(q, k, v, pos, 2, h, hkv, d, s, out);
  // The token at position 0 sees only itself: the output is its value vector.
  for (int64_t head = 0; head < h; ++head) {
    for (int64_t e = 0; e < d; ++e) EXPECT_FLOAT_EQ(out[head * d + e], v[(head / 2) * d + e]);
  }
  // Position 2 for head 3 (kv head 1): softmax-weighted values, computed by hand.
  double w[3], sum = 0;
  for (int p = 0; p < 3; ++p) {
    double dot = 0;
    for (int e = 0; e < d; ++e) dot += q[(1 * h + 3) * d + e] * k[(p * hkv + 1) * d + e];
    sum += (w[p] = std::exp(dot / std::sqrt(3.0)));
  }
  for (int e = 0; e < d; ++e) {
    double want = 0;
    for (int p = 0; p < 3; ++p) want += w[p] / sum * v[(p * hkv + 1) * d + e];
    EXPECT_NEAR(out[(1 * h + 3) * d + e], want, 1e-5);
  }
}

}  // namespace
}  // namespace laminar::kernels
