// Sampler: exact logprobs, truncation rules, seed determinism and the sampled distribution.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

namespace laminar::engine {
namespace {

std::vector<float> LogitsOf(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Out-of-range and NaN settings are refused with the field named (NaN passes no range check).
TEST(SamplingParamsTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
  EXPECT_TRUE((SamplingParams{0.0f, 5, 0.9f, 0.05f, 1}).Validate().ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    SamplingParams p;
    const char* field;
  };
  for (const Case& c :
       {Case{{nan, 0, 1.0f, 0.0f, 0}, "temperature"}, Case{{inf, 0, 1.0f, 0.0f, 0}, "temperature"},
        Case{{-1.0f, 0, 1.0f, 0.0f, 0}, "temperature"}, Case{{1.0f, 0, nan, 0.0f, 0}, "top_p"},
        Case{{1.0f, 0, 1.5f, 0.0f, 0}, "top_p"}, Case{{1.0f, 0, 1.0f, nan, 0}, "min_p"},
        Case{{1.0f, -2, 1.0f, 0.0f, 0}, "top_k"}}) {
    const Status st = c.p.Validate();
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(st.message().find(c.field), std::string::npos) << st.message();
  }
}

TEST(SamplerTest, GreedyReturnsArgmaxWithItsLogprob) {
  Sampler s({.temperature = 0});
  auto t = s.Sample(LogitsOf({0.2, 0.5, 0.3}));
  EXPECT_EQ(t.id, 1);
  EXPECT_NEAR(t.logprob, std::log(0.5), 1e-6);
}

TEST(SamplerTest, LogprobIsUnderTheTruncatedDistribution) {
  auto logits = LogitsOf({0.1, 0.6, 0.3});
  for (int i = 0; i < 50; ++i) {
    Sampler topk({.temperature = 1, .top_k = 2, .seed = uint64_t(i)});
    auto t = topk.Sample(logits);
    ASSERT_TRUE(t.id == 1 || t.id == 2);
    EXPECT_NEAR(t.logprob, std::log((t.id == 1 ? 0.6 : 0.3) / 0.9), 1e-6);
    Sampler topp({.temperature = 1, .top_p = 0.5f, .seed = uint64_t(i)});
    auto u = topp.Sample(logits);
    EXPECT_EQ(u.id, 1);
    EXPECT_NEAR(u.logprob, 0.0, 1e-6);
    Sampler minp({.temperature = 1, .min_p = 0.4f, .seed = uint64_t(i)});
    auto m = minp.Sample(logits);  // keeps p >= 0.24: ids 1 and 2
    EXPECT_NE(m.id, 0);
  }
  // Temperature: logprob under softmax(logits / T).
  Sampler hot({.temperature = 2.0f, .seed = 3});
  auto t = hot.Sample(logits);
  double z = 0;
  for (float l : logits) z += std::exp(l / 2.0);
  EXPECT_NEAR(t.logprob, logits[t.id] / 2.0 - std::log(z), 1e-6);
}

// -inf logits (a drafter's head over part of the vocabulary, LlamaModel::WithOutputVocab) get
// probability 0 in every path: dense at T = 1, sorted with top-p / top-k / min-p, and greedy.
TEST(SamplerTest, MinusInfinityLogitsGetProbabilityZero) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> logits(40, -inf);
  logits[3] = 0.5f;
  logits[17] = 1.5f;
  logits[38] = -0.5f;
  for (const SamplingParams& p :
       {SamplingParams{.temperature = 1}, SamplingParams{.temperature = 0.7f, .top_p = 0.95f},
        SamplingParams{.temperature = 1, .top_k = 30},
        SamplingParams{.temperature = 1, .min_p = 0.01f}, SamplingParams{.temperature = 0}}) {
    Sampler s(p);
    TokenDistribution dist;
    s.Distribution(logits, &dist);
    if (dist.greedy) {
      EXPECT_EQ(dist.ids[0], 17);
      EXPECT_TRUE(std::isfinite(dist.greedy_logprob));
      continue;
    }
    double total = 0;
    for (size_t i = 0; i < dist.ids.size(); ++i) {
      const int32_t id = dist.ids[i];
      const double prob = dist.probs[i];
      EXPECT_TRUE(std::isfinite(prob)) << "token " << id;
      if (id != 3 && id != 17 && id != 38) {
        EXPECT_EQ(prob, 0.0) << "token " << id << " temperature " << p.temperature;
      }
      total += prob;
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
    for (int i = 0; i < 200; ++i) {
      const int32_t id = s.Sample(logits).id;
      ASSERT_TRUE(id == 3 || id == 17 || id == 38) << id;
    }
  }
}

// A NaN or +inf logit (weights that overflowed) gives no distribution: in every path the token
// recorded carries a NaN logprob, which the rollout engine refuses.
TEST(SamplerTest, NanOrPlusInfinityLogitsGiveANanLogprob) {
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       std::numeric_limits<float>::infinity()};
  for (float b : bad) {
    std::vector<float> logits(40, 0.25f);
    logits[5] = b;
    for (const SamplingParams& p :
         {SamplingParams{.temperature = 1}, SamplingParams{.temperature = 0.7f, .top_p = 0.95f},
          SamplingParams{.temperature = 1, .top_k = 30}, SamplingParams{.temperature = 0}}) {
      Sampler s(p);
      EXPECT_TRUE(std::isnan(s.Sample(logits).logprob)) << b << " at T " << p.temperature;
    }
  }
}

TEST(SamplerTest, SameSeedSameTokens) {
  auto logits = LogitsOf({0.25, 0.25, 0.25, 0.25});
  Sampler a({.seed = 42}), b({.seed = 42}), c({.seed = 43});
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.Sample(logits).id);
    sb.push_back(b.Sample(logits).id);
    sc.push_back(c.Sample(logits).id);
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

// Chi-square goodness of fit of 20000 draws against the softmax at T=0.7 with top-p 0.9.
// The nucleus keeps 3 tokens (df = 2); the critical value at p = 1e-4 is 18.42, so a correct
// sampler fails about 1 seed in 10^4.
TEST(SamplerTest, DrawsFollowTheTruncatedDistribution) {
  auto logits = LogitsOf({0.05, 0.4, 0.3, 0.15, 0.1});
  const double t = 0.7;
  std::vector<double> p(5);
  double z = 0;
  for (int i = 0; i < 5; ++i) z += (p[i] = std::exp(logits[i] / t));
  for (auto& x : p) x /= z;
  // Sorted: 1, 2, 3, 4, 0; nucleus at 0.9 keeps the prefix reaching 0.9.
  std::vector<int> order = {1, 2, 3, 4, 0};
  std::vector<int> kept;
  double cum = 0;
  for (int id : order) {
    kept.push_back(id);
    cum += p[id];
    if (cum >= 0.9) break;
  }
  std::map<int, int> counts;
  Sampler s({.temperature = 0.7f, .top_p = 0.9f, .seed = 2024});
  const int n = 20000;
  for (int i = 0; i < n; ++i) counts[s.Sample(logits).id]++;
  double chi2 = 0;
  for (int id : kept) {
    double expected = n * p[id] / cum;
    chi2 += (counts[id] - expected) * (counts[id] - expected) / expected;
  }
  ASSERT_EQ(kept.size(), 3u);
  int outside = n;
  for (int id : kept) outside -= counts[id];
  EXPECT_EQ(outside, 0);
  EXPECT_LT(chi2, 18.42) << "df " << kept.size() - 1;
}

TEST(SamplerTest, TopLogprobsAreOfTheDistributionSampledFrom) {
  auto logits = LogitsOf({0.1, 0.5, 0.15, 0.25});
  Sampler greedy({.temperature = 0, .logprobs = 3});
  auto g = greedy.Sample(logits);
  ASSERT_EQ(g.top.size(), 3u);
  EXPECT_EQ(g.top[0].id, 1);
  EXPECT_EQ(g.top[1].id, 3);
  EXPECT_EQ(g.top[2].id, 2);
  EXPECT_NEAR(g.top[1].logprob, std::log(0.25), 1e-6);
  EXPECT_EQ(g.top[0].logprob, g.logprob);
  // top-k 2 keeps ids 1 and 3 and renormalizes: fewer entries than asked, same logprobs as the
  // sampled token's.
  for (uint64_t seed = 0; seed < 20; ++seed) {
    Sampler s({.temperature = 1, .top_k = 2, .seed = seed, .logprobs = 5});
    auto t = s.Sample(logits);
    ASSERT_EQ(t.top.size(), 2u);
    EXPECT_EQ(t.top[0].id, 1);
    EXPECT_NEAR(t.top[0].logprob, std::log(0.5 / 0.75), 1e-6);
    EXPECT_NEAR(t.top[1].logprob, std::log(0.25 / 0.75), 1e-6);
    EXPECT_EQ(t.top[t.id == 1 ? 0 : 1].logprob, t.logprob);
  }
  // No truncation: the top of the temperature-scaled softmax.
  Sampler hot({.temperature = 2.0f, .seed = 1, .logprobs = 1});
  auto h = hot.Sample(logits);
  double z = 0;
  for (float l : logits) z += std::exp(l / 2.0);
  ASSERT_EQ(h.top.size(), 1u);
  EXPECT_EQ(h.top[0].id, 1);
  EXPECT_NEAR(h.top[0].logprob, logits[1] / 2.0 - std::log(z), 1e-6);
  Sampler off({.temperature = 1, .seed = 1});
  EXPECT_TRUE(off.Sample(logits).top.empty());
}

TEST(SamplerTest, ASamplerResumedFromItsRngStateContinuesTheStream) {
  auto logits = LogitsOf({0.25, 0.25, 0.25, 0.25});
  SamplingParams params{.temperature = 1, .seed = 9};
  Sampler a(params);
  for (int i = 0; i < 5; ++i) a.Sample(logits);
  Sampler b(params, a.rng_state());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(a.Sample(logits).id, b.Sample(logits).id);
}

}  // namespace
}  // namespace laminar::engine
