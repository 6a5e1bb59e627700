// AdamW and SGD against hand-worked steps, a plain scalar loop and PyTorch; clipping; LR schedules;
// skipped non-finite steps; config validation.
#include "trainer/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "tests/test_util.h"

namespace laminar::trainer {
namespace {

OptimizerConfig AdamConfig(double lr, double weight_decay, double grad_clip) {
  OptimizerConfig c;
  c.name = "adamw";
  c.lr = lr;
  c.weight_decay = weight_decay;
  c.grad_clip = grad_clip;
  return c;
}

std::unique_ptr<Optimizer> Make(const OptimizerConfig& config, const ParameterSet& params,
                                ThreadPool* pool = nullptr) {
  auto opt = CreateOptimizer(config, params.num_elements(), pool);
  LAMINAR_CHECK(opt.ok()) << opt.status();
  return std::move(opt).value();
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Several parameters of awkward sizes (1, primes, one above a vector block, one large enough to
// be split across threads), alternating decay, with normal(0, 1) values.
ParameterSet MixedParams(uint32_t seed) {
  ParameterSet set;
  set.Add("a.weight", Shape({1}), true);
  set.Add("b.bias", Shape({17}), false);
  set.Add("c.weight", Shape({3, 11}), true);
  set.Add("d.norm", Shape({16}), false);
  set.Add("e.weight", Shape({70001}), true);
  set.Add("f.bias", Shape({5}), false);
  const std::vector<float> v = testing::RandomNormal(set.num_elements(), seed);
  std::copy(v.begin(), v.end(), set.values().begin());
  return set;
}

void RandomGrads(ParameterSet* set, uint32_t seed, float stddev) {
  const std::vector<float> g = testing::RandomNormal(set->num_elements(), seed, stddev);
  std::copy(g.begin(), g.end(), set->grads().begin());
}

// ---------------------------------------------------------------------------------------------
// AdamW

// One parameter p = 1 (decayed), lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, no
// clipping; gradients 0.5 then -0.25.
//   step 1: p = 1 * (1 - 0.1*0.01) = 0.999
//           m = 0.1*0.5 = 0.05, v = 0.001*0.25 = 0.00025
//           m_hat = 0.05/(1-0.9) = 0.5, v_hat = 0.00025/(1-0.999) = 0.25, sqrt = 0.5
//           p = 0.999 - 0.1 * 0.5/(0.5 + 1e-8) = 0.899000002
//   step 2: p = 0.899000002 * 0.999 = 0.898101002
//           m = 0.9*0.05 + 0.1*(-0.25) = 0.02, v = 0.999*0.00025 + 0.001*0.0625 = 0.00031225
//           m_hat = 0.02/(1-0.81) = 0.105263158, v_hat = 0.00031225/(1-0.998001) = 0.156203102
//           p = 0.898101002 - 0.1 * 0.105263158/(0.395225382 + 1e-8) = 0.871467299
TEST(AdamWTest, TwoStepsWorkedByHand) {
  ParameterSet set;
  set.Add("w", Shape({1}), true);
  set.values()[0] = 1.f;
  auto opt = Make(AdamConfig(0.1, 0.01, 0.0), set);
  set.grads()[0] = 0.5f;
  StepResult r1 = opt->Step(&set, 0);
  EXPECT_TRUE(r1.applied);
  EXPECT_DOUBLE_EQ(r1.grad_norm, 0.5);
  EXPECT_DOUBLE_EQ(r1.lr, 0.1);
  EXPECT_NEAR(set.values()[0], 0.899000002, 1e-7);
  EXPECT_NEAR(opt->buffer("exp_avg")[0], 0.05, 1e-9);
  EXPECT_NEAR(opt->buffer("exp_avg_sq")[0], 0.00025, 1e-10);  // f32: ulp 2.7e-11
  set.grads()[0] = -0.25f;
  ASSERT_TRUE(opt->Step(&set, 1).applied);
  EXPECT_NEAR(set.values()[0], 0.871467299, 1e-7);
  EXPECT_NEAR(opt->buffer("exp_avg")[0], 0.02, 1e-9);
  EXPECT_NEAR(opt->buffer("exp_avg_sq")[0], 0.00031225, 1e-10);
  EXPECT_EQ(opt->step(), 2);
  EXPECT_EQ(opt->skipped_steps(), 0);
}

// torch.optim.AdamW's single-tensor update of one element, in the same f32 operations, written
// as plainly as possible: the reference the blocked, segmented, threaded loop must equal.
void ReferenceAdamWElement(const OptimizerConfig& c, double lr, int64_t t, bool decay, float scale,
                           float grad, float* p, float* m, float* v) {
  const float g = grad * scale;
  if (decay && c.weight_decay != 0) *p = *p * static_cast<float>(1.0 - lr * c.weight_decay);
  const float w = static_cast<float>(1.0 - c.beta1);
  if (w < 0.5f) {
    const float d = w * (g - *m);
    *m = *m + d;
  } else {
    const float d = (g - *m) * (1.f - w);
    *m = g - d;
  }
  const float kept = *v * static_cast<float>(c.beta2);
  const float added = static_cast<float>(1.0 - c.beta2) * g;
  *v = kept + added * g;
  const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(t));
  const float denom =
      std::sqrt(*v) / static_cast<float>(std::sqrt(bc2)) + static_cast<float>(c.eps);
  const float num = static_cast<float>(-(lr / bc1)) * *m;
  *p = *p + num / denom;
}

TEST(AdamWTest, EqualsScalarLoopBitForBitWithAndWithoutThreads) {
  for (double beta1 : {0.9, 0.3}) {  // both branches of torch's lerp
    OptimizerConfig c = AdamConfig(3e-3, 0.1, 1.0);
    c.beta1 = beta1;
    c.lr_schedule = "constant_with_warmup";
    c.warmup_steps = 3;
    ParameterSet serial = MixedParams(1), threaded = MixedParams(1), ref = MixedParams(1);
    ThreadPool pool(3);
    auto opt = Make(c, serial);
    auto opt_threaded = Make(c, threaded, &pool);
    std::vector<float> m(ref.num_elements(), 0.f), v(ref.num_elements(), 0.f);
    for (int64_t step = 0; step < 5; ++step) {
      // Large gradients in odd steps so clipping is exercised, small ones in even steps.
      const float stddev = step % 2 ? 1.f : 1e-3f;
      RandomGrads(&serial, 100 + step, stddev);
      RandomGrads(&threaded, 100 + step, stddev);
      RandomGrads(&ref, 100 + step, stddev);
      StepResult r = opt->Step(&serial, step + 1);
      StepResult rt = opt_threaded->Step(&threaded, step + 1);
      ASSERT_TRUE(r.applied && rt.applied);
      EXPECT_EQ(r.grad_norm, rt.grad_norm);
      EXPECT_EQ(r.lr, LearningRateAt(c, step + 1));
      if (step % 2) {
        EXPECT_GT(r.grad_norm, c.grad_clip) << "clipping not exercised";
      }
      const auto scale = static_cast<float>(ClipCoefficient(r.grad_norm, c.grad_clip));
      for (const ParamInfo& info : ref.params()) {
        for (size_t i = info.offset; i < info.offset + info.numel; ++i) {
          ReferenceAdamWElement(c, r.lr, step + 1, info.decay, scale, ref.grads()[i],
                                &ref.values()[i], &m[i], &v[i]);
        }
      }
      ASSERT_TRUE(SameBits(serial.values(), ref.values())) << "beta1 " << beta1 << " step " << step;
      ASSERT_TRUE(SameBits(opt->buffer("exp_avg"), m));
      ASSERT_TRUE(SameBits(opt->buffer("exp_avg_sq"), v));
      ASSERT_TRUE(SameBits(threaded.values(), serial.values()));
      ASSERT_TRUE(SameBits(opt_threaded->buffer("exp_avg_sq"), v));
    }
  }
}

// Golden values from PyTorch 2.15 (CPU), which this implementation follows operation by operation:
//   import torch
//   p = torch.tensor([(i - 3.5) / 4 for i in range(8)], requires_grad=True)
//   opt = torch.optim.AdamW([p], lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
//   for t in range(1, 4):
//       p.grad = torch.tensor([((i * t) % 7 - 3) / 8 for i in range(8)]); opt.step()
//   print([x.hex() for x in p.tolist()], opt.state[p]['exp_avg'].tolist(), ...)
// These inputs are dyadic and agree bit for bit today; PyTorch's vectorized lerp fuses a
// multiply-add, which can differ in the last bit, so the comparison allows two ulps.
TEST(AdamWTest, MatchesPyTorch) {
  static constexpr float kValues[8] = {-0x1.af501p-1f,  -0x1.31794ep-1f, -0x1.7b436ap-2f,
                                       -0x1.157e6cp-3f, 0x1.dbc186p-4f,  0x1.6ea784p-2f,
                                       0x1.306484p-1f,  0x1.ce0082p-1f};
  static constexpr float kExpAvg[8] = {-0x1.a0418ap-4f, -0x1.020c4ap-5f, 0x1.3c6a8p-5f,
                                       0x1.5c28f8p-6f,  0x1.9db22ep-7f,  -0x1.374bc8p-8f,
                                       0x1.0bc6a8p-4f,  -0x1.a0418ap-4f};
  static constexpr float kExpAvgSq[8] = {0x1.b9ecfep-12f, 0x1.471728p-14f, 0x1.685988p-13f,
                                         0x1.476294p-13f, 0x1.26b728p-13f, 0x1.05e1ccp-13f,
                                         0x1.ca080ap-13f, 0x1.b9ecfep-12f};
  ParameterSet set;
  set.Add("p.weight", Shape({8}), true);
  for (int i = 0; i < 8; ++i) set.values()[i] = (static_cast<float>(i) - 3.5f) / 4.f;
  auto opt = Make(AdamConfig(0.01, 0.1, 0.0), set);
  for (int t = 1; t <= 3; ++t) {
    for (int i = 0; i < 8; ++i) set.grads()[i] = static_cast<float>((i * t) % 7 - 3) / 8.f;
    ASSERT_TRUE(opt->Step(&set, t - 1).applied);
  }
  auto two_ulps = [](float x) {
    return 2 * (std::nextafter(std::abs(x), std::numeric_limits<float>::infinity()) - std::abs(x));
  };
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(set.values()[i], kValues[i], two_ulps(kValues[i])) << i;
    EXPECT_NEAR(opt->buffer("exp_avg")[i], kExpAvg[i], two_ulps(kExpAvg[i])) << i;
    EXPECT_NEAR(opt->buffer("exp_avg_sq")[i], kExpAvgSq[i], two_ulps(kExpAvgSq[i])) << i;
  }
}

TEST(AdamWTest, WeightDecaySkipsParametersWithoutDecay) {
  ParameterSet set;
  set.Add("m.weight", Shape({4}), true);
  set.Add("m.bias", Shape({4}), false);
  for (size_t i = 0; i < 8; ++i) set.values()[i] = 0.25f * static_cast<float>(i + 1);
  const std::vector<float> before(set.values().begin(), set.values().end());
  auto opt = Make(AdamConfig(0.5, 0.2, 1.0), set);
  set.ZeroGrad();  // zero moments: the Adam term is 0/(0 + eps) = 0, only decay moves p
  ASSERT_TRUE(opt->Step(&set, 0).applied);
  const auto factor = static_cast<float>(1.0 - 0.5 * 0.2);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(set.values()[i], before[i] * factor) << i;
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(set.values()[i], before[i]) << i;
}

// ---------------------------------------------------------------------------------------------
// Non-finite steps

TEST(NonFiniteStepTest, NanOrInfGradientOrLossSkipsTheStepAndCountsIt) {
  const float kBad[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  for (const char* name : {"adamw", "sgd"}) {
    OptimizerConfig c = AdamConfig(1e-2, 0.01, 1.0);
    c.name = name;
    c.momentum = 0.9;  // SGD only
    ParameterSet set = MixedParams(3);
    auto opt = Make(c, set);
    RandomGrads(&set, 4, 0.1f);
    ASSERT_TRUE(opt->Step(&set, 0).applied);  // non-zero moments to compare
    const std::vector<float> values(set.values().begin(), set.values().end());
    std::map<std::string, std::vector<float>> buffers;
    for (const auto& b : opt->buffer_names()) {
      buffers[b].assign(opt->buffer(b).begin(), opt->buffer(b).end());
    }
    int64_t expected_skips = 0;
    auto expect_untouched = [&](const std::string& what) {
      EXPECT_TRUE(SameBits(set.values(), values)) << name << " " << what;
      for (const auto& [b, data] : buffers) EXPECT_TRUE(SameBits(opt->buffer(b), data)) << b;
      EXPECT_EQ(opt->step(), 1) << what;
      EXPECT_EQ(opt->skipped_steps(), expected_skips) << what;
    };
    for (float bad : kBad) {
      RandomGrads(&set, 5, 0.1f);
      set.grads()[70000] = bad;
      StepResult r = opt->Step(&set, 1);
      ++expected_skips;
      EXPECT_FALSE(r.applied);
      EXPECT_FALSE(std::isfinite(r.grad_norm));
      expect_untouched("gradient " + std::to_string(bad));
    }
    RandomGrads(&set, 6, 0.1f);
    for (double loss : {std::nan(""), std::numeric_limits<double>::infinity()}) {
      StepResult r = opt->Step(&set, 1, loss);
      ++expected_skips;
      EXPECT_FALSE(r.applied);
      EXPECT_TRUE(std::isfinite(r.grad_norm));
      expect_untouched("loss " + std::to_string(loss));
    }
    EXPECT_TRUE(opt->Step(&set, 1, 0.7).applied);
    EXPECT_EQ(opt->step(), 2);
    EXPECT_FALSE(SameBits(set.values(), values));
  }
}

TEST(NonFiniteStepTest, OneBadGradientIsCountedOnce) {
  ParameterSet set;
  set.Add("w", Shape({3}), true);
  auto opt = Make(AdamConfig(0.1, 0.0, 0.0), set);
  set.grads()[1] = std::numeric_limits<float>::quiet_NaN();
  StepResult r = opt->Step(&set, 0);
  EXPECT_FALSE(r.applied);
  EXPECT_EQ(opt->skipped_steps(), 1);
  EXPECT_EQ(opt->step(), 0);
  for (float x : set.values()) EXPECT_EQ(x, 0.f);
  for (float x : opt->buffer("exp_avg")) EXPECT_EQ(x, 0.f);
}

// ---------------------------------------------------------------------------------------------
// Clipping

TEST(ClipTest, ScalesToTheMaxNormAndReturnsThePreClipNorm) {
  std::vector<float> g = {3.f, 0.f, -4.f};  // norm 5
  EXPECT_DOUBLE_EQ(ClipGradNorm(g, 1.0), 5.0);
  const auto coef = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_EQ(g[0], 3.f * coef);
  EXPECT_EQ(g[2], -4.f * coef);
  const double after = GlobalGradNorm(g);
  EXPECT_NEAR(after, 1.0, 1e-6);
  EXPECT_LE(after, 1.0 + 1e-7);
  // Below the max, or clipping off: untouched.
  std::vector<float> small = {0.3f, 0.4f};
  EXPECT_NEAR(ClipGradNorm(small, 1.0), 0.5, 1e-7);
  EXPECT_EQ(small[0], 0.3f);
  EXPECT_EQ(small[1], 0.4f);
  std::vector<float> off = {30.f, 40.f};
  EXPECT_DOUBLE_EQ(ClipGradNorm(off, 0.0), 50.0);
  EXPECT_EQ(off[0], 30.f);
  // A non-finite gradient is reported and left alone.
  std::vector<float> bad = {1.f, std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(std::isinf(ClipGradNorm(bad, 1.0)));
  EXPECT_EQ(bad[0], 1.f);
}

TEST(ClipTest, NormIsF64AndTheSameWithThreads) {
  const std::vector<float> g = testing::RandomNormal(300007, 9, 1e3f);
  long double exact = 0;
  for (float x : g) exact += static_cast<long double>(x) * x;
  ThreadPool pool(4);
  const double serial = GlobalGradNorm(g);
  EXPECT_EQ(serial, GlobalGradNorm(g, &pool));
  EXPECT_NEAR(serial, std::sqrt(static_cast<double>(exact)), 1e-12 * serial);
  // f32 squares would overflow here; f64 does not.
  std::vector<float> huge = {3e30f, 4e30f};
  const double a = huge[0], b = huge[1];
  EXPECT_DOUBLE_EQ(GlobalGradNorm(huge), std::sqrt(a * a + b * b));
  EXPECT_EQ(GlobalGradNorm(std::vector<float>{}), 0.0);
}

TEST(ClipTest, OptimizerStepUsesTheClippedGradientAndLeavesGradsAlone) {
  ParameterSet set;
  set.Add("w", Shape({2}), true);
  OptimizerConfig c;
  c.name = "sgd";
  c.lr = 1.0;
  c.weight_decay = 0;
  c.grad_clip = 2.0;
  auto opt = Make(c, set);
  set.grads()[0] = 6.f;
  set.grads()[1] = 8.f;  // norm 10 -> scaled by 0.2
  StepResult r = opt->Step(&set, 0);
  EXPECT_DOUBLE_EQ(r.grad_norm, 10.0);
  const auto coef = static_cast<float>(2.0 / (10.0 + 1e-6));
  EXPECT_EQ(set.values()[0], -(6.f * coef));
  EXPECT_EQ(set.values()[1], -(8.f * coef));
  EXPECT_EQ(set.grads()[0], 6.f);
}

// ---------------------------------------------------------------------------------------------
// SGD

TEST(SgdTest, PlainMomentumAndWeightDecayAsTorch) {
  ParameterSet set;
  set.Add("w", Shape({2}), true);
  set.Add("b", Shape({1}), false);
  OptimizerConfig c;
  c.name = "sgd";
  c.lr = 0.5;
  c.weight_decay = 0;
  c.grad_clip = 0;
  {
    auto opt = Make(c, set);
    EXPECT_TRUE(opt->buffer_names().empty());
    set.grads()[0] = 1.f;
    set.grads()[1] = -2.f;
    set.grads()[2] = 4.f;
    ASSERT_TRUE(opt->Step(&set, 0).applied);
    EXPECT_EQ(set.values()[0], -0.5f);
    EXPECT_EQ(set.values()[1], 1.f);
    EXPECT_EQ(set.values()[2], -2.f);
  }
  // Momentum 0.5, weight decay 0.25 (L2, decay params only), from p = (1, 1, 1), g = (1, 1, 1):
  //   step 1: g' = (1.25, 1.25, 1); buf = g'; p = 1 - 0.5 * buf = (0.375, 0.375, 0.5)
  //   step 2: g' = (1.09375, 1.09375, 1); buf = 0.5 * buf + g' = (1.71875, 1.71875, 1.5)
  //           p = p - 0.5 * buf = (-0.484375, -0.484375, -0.25)
  c.momentum = 0.5;
  c.weight_decay = 0.25;
  auto opt = Make(c, set);
  EXPECT_EQ(opt->buffer_names(), std::vector<std::string>{"momentum_buffer"});
  for (float& v : set.values()) v = 1.f;
  for (float& g : set.grads()) g = 1.f;
  ASSERT_TRUE(opt->Step(&set, 0).applied);
  EXPECT_EQ(set.values()[0], 0.375f);
  EXPECT_EQ(set.values()[2], 0.5f);
  ASSERT_TRUE(opt->Step(&set, 1).applied);
  EXPECT_EQ(opt->buffer("momentum_buffer")[1], 1.71875f);
  EXPECT_EQ(opt->buffer("momentum_buffer")[2], 1.5f);
  EXPECT_EQ(set.values()[1], -0.484375f);
  EXPECT_EQ(set.values()[2], -0.25f);
}

// ---------------------------------------------------------------------------------------------
// Schedules

TEST(LrScheduleTest, ConstantIsFlat) {
  OptimizerConfig c;
  c.lr = 2e-6;
  for (int64_t step : {0, 1, 500}) EXPECT_EQ(LearningRateAt(c, step), 2e-6);
}

TEST(LrScheduleTest, ConstantWithWarmupRampsLinearlyFromZero) {
  OptimizerConfig c;
  c.lr = 1.0;
  c.lr_schedule = "constant_with_warmup";
  c.warmup_steps = 10;
  EXPECT_EQ(LearningRateAt(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 5), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 9), 0.9);
  EXPECT_EQ(LearningRateAt(c, 10), 1.0);
  EXPECT_EQ(LearningRateAt(c, 1000), 1.0);
  c.warmup_steps = 0;
  EXPECT_EQ(LearningRateAt(c, 0), 1.0);
}

TEST(LrScheduleTest, CosineWarmsUpThenDecaysToTheFloor) {
  OptimizerConfig c;
  c.lr = 2.0;
  c.lr_schedule = "cosine";
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.min_lr_ratio = 0.1;
  ASSERT_TRUE(c.Validate().ok());
  EXPECT_EQ(LearningRateAt(c, 0), 0.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 5), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(c, 10), 2.0);           // end of warm-up: the peak
  EXPECT_NEAR(LearningRateAt(c, 60), 2.0 * 0.55, 1e-12);  // middle: (1 + 0.1) / 2
  EXPECT_NEAR(LearningRateAt(c, 35), 2.0 * (0.55 + 0.45 * std::cos(M_PI / 4)), 1e-12);
  EXPECT_NEAR(LearningRateAt(c, 110), 2.0 * 0.1, 1e-12);  // end: the floor
  EXPECT_NEAR(LearningRateAt(c, 500), 2.0 * 0.1, 1e-12);  // stays there
  c.min_lr_ratio = 0;
  EXPECT_NEAR(LearningRateAt(c, 110), 0.0, 1e-15);
  EXPECT_GE(LearningRateAt(c, 110), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Config and registry

TEST(OptimizerConfigTest, UnknownNamesListTheValidOnes) {
  OptimizerConfig c;
  c.name = "lion";
  auto bad = CreateOptimizer(c, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("lion"), std::string::npos);
  EXPECT_NE(bad.status().message().find("adamw, sgd"), std::string::npos);
  c.name = "adamw";
  c.lr_schedule = "linear";
  Status st = c.Validate();
  EXPECT_NE(st.message().find("constant, constant_with_warmup, cosine"), std::string::npos) << st;
}

TEST(OptimizerConfigTest, InconsistentFieldsAreNamed) {
  auto message = [](auto mutate) {
    OptimizerConfig c;
    mutate(c);
    return c.Validate().message();
  };
  EXPECT_NE(message([](OptimizerConfig& c) { c.warmup_steps = 5; }).find("constant_with_warmup"),
            std::string::npos);
  EXPECT_NE(message([](OptimizerConfig& c) { c.lr_schedule = "cosine"; }).find("total_steps"),
            std::string::npos);
  EXPECT_NE(message([](OptimizerConfig& c) { c.beta2 = 1.0; }).find("beta2"), std::string::npos);
  EXPECT_NE(message([](OptimizerConfig& c) { c.lr = std::nan(""); }).find("lr"), std::string::npos);
  EXPECT_NE(message([](OptimizerConfig& c) { c.min_lr_ratio = 2; }).find("min_lr_ratio"),
            std::string::npos);
  EXPECT_NE(message([](OptimizerConfig& c) { c.grad_clip = -1; }).find("grad_clip"),
            std::string::npos);
  EXPECT_TRUE(OptimizerConfig().Validate().ok());
}

TEST(OptimizerConfigTest, JsonRoundTripAndUnknownKeys) {
  OptimizerConfig c;
  c.name = "sgd";
  c.lr = 0.25;
  c.momentum = 0.5;
  c.lr_schedule = "cosine";
  c.warmup_steps = 3;
  c.total_steps = 30;
  c.min_lr_ratio = 0.125;
  auto back = OptimizerConfig::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), c.ToJson());
  auto unknown = OptimizerConfig::FromJson({{"lr", 0.1}, {"betas", 0.9}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'betas'"), std::string::npos);
  auto mistyped = OptimizerConfig::FromJson({{"warmup_steps", "ten"}});
  ASSERT_FALSE(mistyped.ok());
  EXPECT_NE(mistyped.status().message().find("warmup_steps"), std::string::npos);
}

TEST(OptimizerConfigTest, RegistryBuildsEachOptimizerWithItsBuffers) {
  ASSERT_EQ(OptimizerRegistry().size(), 2u);
  OptimizerConfig c;
  auto adam = CreateOptimizer(c, 7);
  ASSERT_TRUE(adam.ok());
  EXPECT_EQ((*adam)->buffer_names(), (std::vector<std::string>{"exp_avg", "exp_avg_sq"}));
  EXPECT_EQ((*adam)->buffer("exp_avg").size(), 7u);
  EXPECT_EQ((*adam)->config().name, "adamw");
}

}  // namespace
}  // namespace laminar::trainer
