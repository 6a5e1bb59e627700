// RoPE layout permutation: the HF `permute` mapping, bit-exact round trips, and equal attention
// scores under a reference RoPE in each layout.
#include "model/rope_permute.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "tests/test_util.h"

namespace laminar::model {
namespace {

Tensor RandomF32(Shape shape, uint32_t seed) {
  Tensor t(DType::kF32, std::move(shape));
  const std::vector<float> v = testing::RandomNormal(static_cast<size_t>(t.num_elements()), seed);
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

bool SameBytes(const TensorView& a, const TensorView& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

TEST(RopePermuteTest, SmallExampleMatchesHfPermute) {
  // One head, D = 4, two columns: interleaved rows r0 r1 r2 r3 -> rotate-half rows r0 r2 r1 r3.
  Tensor w(DType::kF32, Shape({4, 2}));
  for (int i = 0; i < 8; ++i) w.data_as<float>()[i] = static_cast<float>(i);
  auto half = ConvertRopeRows(w.view(), 1, 4, RopeLayout::kInterleaved, RopeLayout::kRotateHalf);
  ASSERT_TRUE(half.ok()) << half.status();
  const float expected[] = {0, 1, 4, 5, 2, 3, 6, 7};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(half->data_as<float>()[i], expected[i]) << i;
}

TEST(RopePermuteTest, MatchesViewTransposeReshapeAndRoundTripsBitExact) {
  const int64_t H = 3, D = 8, C = 5;
  Tensor w = RandomF32(Shape({H * D, C}), 1);
  w.data_as<uint32_t>()[7] = 0x7fc00123u;  // a NaN payload must survive
  auto half = ConvertRopeRows(w.view(), H, D, RopeLayout::kInterleaved, RopeLayout::kRotateHalf);
  ASSERT_TRUE(half.ok()) << half.status();
  // HF: w.view(H, D/2, 2, C).transpose(1, 2).reshape(H*D, C), written out as index arithmetic.
  int64_t out_row = 0;
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t a = 0; a < 2; ++a) {
      for (int64_t b = 0; b < D / 2; ++b, ++out_row) {
        int64_t in_row = (h * (D / 2) + b) * 2 + a;
        EXPECT_EQ(std::memcmp(half->data_as<float>() + out_row * C, w.data_as<float>() + in_row * C,
                              C * sizeof(float)),
                  0)
            << "row " << out_row;
      }
    }
  }
  EXPECT_FALSE(SameBytes(half->view(), w.view()));
  auto back =
      ConvertRopeRows(half->view(), H, D, RopeLayout::kRotateHalf, RopeLayout::kInterleaved);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(SameBytes(back->view(), w.view()));

  // Biases (rank 1) and 2-byte dtypes too.
  Tensor bias(DType::kBF16, Shape({H * D}));
  for (int64_t i = 0; i < H * D; ++i) bias.data_as<uint16_t>()[i] = static_cast<uint16_t>(i * 977);
  auto bias_half =
      ConvertRopeRows(bias.view(), H, D, RopeLayout::kInterleaved, RopeLayout::kRotateHalf);
  ASSERT_TRUE(bias_half.ok());
  EXPECT_EQ(bias_half->data_as<uint16_t>()[1], bias.data_as<uint16_t>()[2]);
  auto bias_back =
      ConvertRopeRows(bias_half->view(), H, D, RopeLayout::kRotateHalf, RopeLayout::kInterleaved);
  ASSERT_TRUE(bias_back.ok());
  EXPECT_TRUE(SameBytes(bias_back->view(), bias.view()));
}

TEST(RopePermuteTest, RejectsBadShapes) {
  Tensor w(DType::kF32, Shape({12, 4}));
  EXPECT_FALSE(
      ConvertRopeRows(w.view(), 2, 8, RopeLayout::kInterleaved, RopeLayout::kRotateHalf).ok());
  EXPECT_FALSE(
      ConvertRopeRows(w.view(), 4, 3, RopeLayout::kInterleaved, RopeLayout::kRotateHalf).ok());
  Tensor cube(DType::kF32, Shape({12, 1, 1}));
  EXPECT_FALSE(
      ConvertRopeRows(cube.view(), 3, 4, RopeLayout::kInterleaved, RopeLayout::kRotateHalf).ok());
}

// Reference RoPE on one head vector `x` [D] at position `pos`, in either layout.
void ApplyRope(float* x, int64_t D, int64_t pos, double theta, RopeLayout layout) {
  for (int64_t i = 0; i < D / 2; ++i) {
    double angle = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / D);
    double c = std::cos(angle), s = std::sin(angle);
    int64_t a = layout == RopeLayout::kInterleaved ? 2 * i : i;
    int64_t b = layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + D / 2;
    double xa = x[a], xb = x[b];
    x[a] = static_cast<float>(xa * c - xb * s);
    x[b] = static_cast<float>(xb * c + xa * s);
  }
}

// y = W x + bias, W [R, C].
std::vector<float> Project(const Tensor& w, const Tensor& bias, const std::vector<float>& x) {
  int64_t R = w.shape()[0], C = w.shape()[1];
  std::vector<float> y(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    double acc = bias.data_as<float>()[r];
    for (int64_t c = 0; c < C; ++c) acc += double{w.data_as<float>()[r * C + c]} * x[c];
    y[r] = static_cast<float>(acc);
  }
  return y;
}

// Scores q_h . k_{h / (H / Hkv)} of one query at `qpos` and one key at `kpos`, per query head.
std::vector<double> Scores(const Tensor& wq, const Tensor& bq, const Tensor& wk, const Tensor& bk,
                           const std::vector<float>& xq, const std::vector<float>& xk, int64_t H,
                           int64_t Hkv, int64_t D, RopeLayout layout) {
  std::vector<float> q = Project(wq, bq, xq), k = Project(wk, bk, xk);
  for (int64_t h = 0; h < H; ++h) ApplyRope(q.data() + h * D, D, 5, 10000.0, layout);
  for (int64_t h = 0; h < Hkv; ++h) ApplyRope(k.data() + h * D, D, 2, 10000.0, layout);
  std::vector<double> scores;
  for (int64_t h = 0; h < H; ++h) {
    const float* kh = k.data() + (h / (H / Hkv)) * D;
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += double{q[h * D + d]} * kh[d];
    scores.push_back(s);
  }
  return scores;
}

TEST(RopePermuteTest, AttentionScoresAgreeAcrossLayouts) {
  const int64_t H = 4, Hkv = 2, D = 8, C = 16;
  Tensor wq = RandomF32(Shape({H * D, C}), 2), bq = RandomF32(Shape({H * D}), 3);
  Tensor wk = RandomF32(Shape({Hkv * D, C}), 4), bk = RandomF32(Shape({Hkv * D}), 5);
  Tensor x = RandomF32(Shape({2, C}), 6);
  std::vector<float> xq(x.data_as<float>(), x.data_as<float>() + C);
  std::vector<float> xk(x.data_as<float>() + C, x.data_as<float>() + 2 * C);
  auto cvt = [](const Tensor& t, int64_t heads) {
    return ConvertRopeRows(t.view(), heads, D, RopeLayout::kInterleaved, RopeLayout::kRotateHalf)
        .value();
  };
  Tensor wq_h = cvt(wq, H), bq_h = cvt(bq, H), wk_h = cvt(wk, Hkv), bk_h = cvt(bk, Hkv);
  auto ref = Scores(wq, bq, wk, bk, xq, xk, H, Hkv, D, RopeLayout::kInterleaved);
  auto hf = Scores(wq_h, bq_h, wk_h, bk_h, xq, xk, H, Hkv, D, RopeLayout::kRotateHalf);
  // Without the permutation the rotate-half scores would differ: the check can fail.
  auto wrong = Scores(wq, bq, wk, bk, xq, xk, H, Hkv, D, RopeLayout::kRotateHalf);
  double max_wrong = 0;
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_NEAR(ref[h], hf[h], 1e-5 * std::max(1.0, std::abs(ref[h]))) << "head " << h;
    max_wrong = std::max(max_wrong, std::abs(ref[h] - wrong[h]));
  }
  EXPECT_GT(max_wrong, 1e-2);
}

TEST(RopePermuteTest, ConvertsAWholeStoreAndBack) {
  ModelConfig config;
  config.num_hidden_layers = 2;
  config.num_attention_heads = 4;
  config.num_key_value_heads = 2;
  config.head_dim = 4;
  config.hidden_size = 16;
  config.rope_layout = RopeLayout::kInterleaved;
  WeightStore store;
  WeightStore original;
  uint32_t seed = 10;
  for (int l = 0; l < 2; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    for (auto [name, rows] :
         {std::pair{"q_proj.weight", 16}, {"k_proj.weight", 8}, {"v_proj.weight", 8}}) {
      Tensor t = RandomF32(Shape({rows, 16}), seed++);
      original.Put(p + name, t.Clone());
      store.Put(p + name, std::move(t));
    }
    Tensor qb = RandomF32(Shape({16}), seed++);
    original.Put(p + "q_proj.bias", qb.Clone());
    store.PutView(p + "q_proj.bias", original.Get(p + "q_proj.bias").value(), nullptr);  // borrowed
  }
  EXPECT_EQ(RopeHeadsOfTensor("model.layers.1.self_attn.k_proj.weight", config), 2);
  EXPECT_EQ(RopeHeadsOfTensor("model.layers.1.self_attn.q_proj.bias", config), 4);
  EXPECT_EQ(RopeHeadsOfTensor("model.layers.1.self_attn.v_proj.weight", config), 0);
  EXPECT_EQ(RopeHeadsOfTensor("model.layers.x.self_attn.q_proj.weight", config), 0);
  EXPECT_EQ(RopeHeadsOfTensor("model.layers..self_attn.q_proj.weight", config), 0);

  ASSERT_TRUE(ConvertRopeLayout(&config, &store, RopeLayout::kRotateHalf).ok());
  EXPECT_EQ(config.rope_layout, RopeLayout::kRotateHalf);
  for (const std::string& name : store.Names()) {
    bool permuted = RopeHeadsOfTensor(name, config) > 0;
    EXPECT_EQ(SameBytes(store.Get(name).value(), original.Get(name).value()), !permuted) << name;
  }
  ASSERT_TRUE(ConvertRopeLayout(&config, &store, RopeLayout::kInterleaved).ok());
  EXPECT_EQ(config.rope_layout, RopeLayout::kInterleaved);
  for (const std::string& name : store.Names()) {
    EXPECT_TRUE(SameBytes(store.Get(name).value(), original.Get(name).value())) << name;
  }
}

}  // namespace
}  // namespace laminar::model
