// Helpers of the speculation tests (tests/rollout/speculation/*_test.cc): chi-square tests, a
// synthetic Markov "model" whose next-token logits depend on the last token only, tiny random
// models, and the engine configurations and runs the engine tests compare.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <tuple>

#include "engine/llama_model.h"
#include "model/llama2c.h"
#include "rollout/engine/rollout_engine.h"
#include "rollout/speculation/speculation.h"
#include "tests/model/random_weights.h"
#include "tests/test_util.h"

namespace laminar::rollout::spec_test {

// Regularized upper incomplete gamma Q(a, x) (series for x < a + 1, continued fraction
// otherwise; Numerical Recipes §6.2), so the chi-square p-value of statistic s with k degrees of
// freedom is Q(k / 2, s / 2).
inline double GammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_front = a * std::log(x) - x - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::abs(term) < std::abs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(log_front);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < 1e-15) break;
  }
  return std::exp(log_front) * h;
}

// Goodness of fit of `observed` counts to probabilities `expected` (same keys). Categories with an
// expected count under 5 are pooled. Returns the p-value; a zero-probability category that was
// observed fails the test.
template <typename K>
double ChiSquarePValue(const std::map<K, int64_t>& observed, const std::map<K, double>& expected,
                       int64_t n) {
  double stat = 0, pooled_e = 0;
  int64_t pooled_o = 0, bins = 0;
  for (const auto& [k, o] : observed) {
    auto it = expected.find(k);
    EXPECT_TRUE(it != expected.end() && it->second > 0) << "observed an impossible outcome";
  }
  for (const auto& [k, p] : expected) {
    const double e = p * static_cast<double>(n);
    auto it = observed.find(k);
    const int64_t o = it == observed.end() ? 0 : it->second;
    if (e < 5) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++bins;
  }
  if (pooled_e > 0) {
    stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-9);
    ++bins;
  }
  return GammaQ(static_cast<double>(bins - 1) / 2, stat / 2);
}

inline constexpr int64_t kV = 6;

inline std::vector<std::vector<float>> RandomLogits(uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.f, scale);
  std::vector<std::vector<float>> m(kV, std::vector<float>(kV));
  for (auto& row : m) {
    for (float& x : row) x = n(rng);
  }
  return m;
}

// The verification logits of `tree` rooted at token `root`: row j is M[token of node j].
inline std::vector<float> TreeLogits(const std::vector<std::vector<float>>& m, int32_t root,
                                     const DraftTree& tree) {
  std::vector<float> out = m[root];
  for (int32_t t : tree.tokens) out.insert(out.end(), m[t].begin(), m[t].end());
  return out;
}

inline engine::TokenDistribution Dist(const engine::SamplingParams& params,
                                      std::span<const float> row) {
  engine::Sampler s(params);
  engine::TokenDistribution d;
  s.Distribution(row, &d);
  return d;
}

using TreeBuilder = std::function<DraftTree(int32_t root, std::mt19937& rng)>;

// Emits at least two tokens after `root` by repeated draft-and-verify; checks every recorded
// logprob is the target's.
inline std::vector<int32_t> Emit(const std::vector<std::vector<float>>& m, int32_t root,
                                 const TreeBuilder& build, engine::Sampler& sampler,
                                 std::mt19937& rng) {
  std::vector<int32_t> out;
  int32_t last = root;
  while (out.size() < 2) {
    const DraftTree tree = build(last, rng);
    EXPECT_TRUE(tree.Validate(kV).ok());
    const std::vector<float> logits = TreeLogits(m, last, tree);
    const VerifiedPath path = VerifyTree(tree, logits, kV, sampler);
    EXPECT_EQ(path.tokens.size(), path.accepted_nodes.size() + 1);
    for (size_t i = 0; i < path.tokens.size(); ++i) {
      const int32_t id = path.tokens[i].id;
      if (i < path.accepted_nodes.size()) {
        EXPECT_EQ(id, tree.tokens[path.accepted_nodes[i] - 1]);
      }
      const auto d = Dist(sampler.params(), m[last]);
      if (!d.greedy) {
        EXPECT_NEAR(path.tokens[i].logprob, std::log(d.Prob(id)), 1e-6);
      }
      out.push_back(id);
      last = id;
    }
  }
  return out;
}

// A deterministic tree: root -> {a, b}, a -> {c}, c -> {a} with a, b, c fixed per root.
inline DraftTree FixedTree(int32_t root, std::mt19937& /*rng*/) {
  DraftTree t;
  const int32_t a = (root + 1) % kV, b = (root + 3) % kV, c = (root * 5 + 2) % kV;
  t.tokens = {a, b, c, a};
  t.parents = {0, 0, 1, 3};
  return t;
}

// A sampling drafter with its own Markov logits q: two children of the root drawn i.i.d. from q,
// and one child of the first drawn from q given it.
inline TreeBuilder SampledTree(const std::vector<std::vector<float>>& q_logits,
                               const engine::SamplingParams& params) {
  return [q_logits, params](int32_t root, std::mt19937& rng) {
    auto q_of = [&](int32_t t) {
      const auto d = Dist(params, q_logits[t]);
      std::vector<float> q(kV, 0.f);
      for (size_t i = 0; i < d.ids.size(); ++i) q[d.ids[i]] = static_cast<float>(d.probs[i]);
      return q;
    };
    auto draw = [&](const std::vector<float>& q) {
      std::discrete_distribution<int32_t> pick(q.begin(), q.end());
      return pick(rng);
    };
    DraftTree t;
    const auto q0 = q_of(root);
    const int32_t x = draw(q0), y = draw(q0);
    const auto q1 = q_of(x);
    const int32_t z = draw(q1);
    t.tokens = {x, y, z};
    t.parents = {0, 0, 1};
    t.child_q = {q0, q1, {}, {}};
    return t;
  };
}

struct Setting {
  float temperature, top_p;
};

inline void CheckTwoTokenDistribution(const TreeBuilder& build, const Setting& setting,
                                      uint64_t seed) {
  const auto m = RandomLogits(7, 1.5f);
  engine::SamplingParams params;
  params.temperature = setting.temperature;
  params.top_p = setting.top_p;
  params.seed = seed;
  engine::Sampler sampler(params);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  // The root whose next token has the most outcomes under the setting (temperature and top-p
  // can leave a single one, and then the test would check nothing): at least 3, so that the
  // drafter's candidates are rejected and its siblings tried.
  int32_t root = 0;
  size_t outcomes = 0;
  for (int32_t t = 0; t < kV; ++t) {
    if (const size_t k = Dist(params, m[t]).ids.size(); k > outcomes) {
      root = t;
      outcomes = k;
    }
  }
  ASSERT_GE(outcomes, 3u) << "T=" << setting.temperature << " top_p=" << setting.top_p;
  const int64_t n = 20000;
  std::map<int32_t, int64_t> first;
  std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
  for (int64_t i = 0; i < n; ++i) {
    const auto out = Emit(m, root, build, sampler, rng);
    ++first[out[0]];
    ++pairs[{out[0], out[1]}];
  }
  std::map<int32_t, double> p1;
  std::map<std::pair<int32_t, int32_t>, double> p2;
  const auto d0 = Dist(params, m[root]);
  for (size_t i = 0; i < d0.ids.size(); ++i) {
    p1[d0.ids[i]] = d0.probs[i];
    const auto d1 = Dist(params, m[d0.ids[i]]);
    for (size_t j = 0; j < d1.ids.size(); ++j)
      p2[{d0.ids[i], d1.ids[j]}] = d0.probs[i] * d1.probs[j];
  }
  const double pv1 = ChiSquarePValue(first, p1, n), pv2 = ChiSquarePValue(pairs, p2, n);
  std::printf(
      "T=%.1f top_p=%.2f, root %d: %lld samples, next-token p=%.3f (%zu outcomes), two-token "
      "p=%.3f (%zu outcomes)\n",
      setting.temperature, setting.top_p, root, static_cast<long long>(n), pv1, p1.size(), pv2,
      p2.size());
  // At 1e-3 a correct implementation fails one seed in a thousand; the seeds are fixed.
  EXPECT_GT(pv1, 1e-3);
  EXPECT_GT(pv2, 1e-3);
}

// A tiny random model (TinyLlamaConfig, seed 3) on `backend` for the drafter tests, with the
// weights it reads.
struct TinyModel {
  explicit TinyModel(engine::Backend backend)
      : config(testing::TinyLlamaConfig()),
        weights(testing::RandomWeights(config, 3, 0.5f)),
        lm(*engine::LlamaModel::Create(config, weights, backend)) {}
  model::ModelConfig config;
  model::WeightStore weights;
  std::unique_ptr<engine::LlamaModel> lm;
};

// `drafter` is a drafter's name, "+async" appended for async_draft, "+vocab" for a draft vocabulary
// of `draft_vocab` tokens.
inline RolloutEngineConfig EngineConfig(std::string drafter, int32_t block_size = 4,
                                        const engine::LlamaModel* draft_model = nullptr,
                                        int64_t draft_vocab = 12) {
  RolloutEngineConfig c;
  c.speculative.draft_model = draft_model;
  c.block_size = block_size;
  c.num_blocks = 256;
  c.scheduler.max_num_batched_tokens = 128;
  const StatusOr<DrafterVariant> parsed = ParseDrafterVariant(drafter);
  LAMINAR_CHECK(parsed.ok()) << parsed.status();
  const DrafterVariant& variant = *parsed;
  if (variant.vocab) c.speculative.draft_vocab = draft_vocab;
  c.speculative.async_draft = variant.async_draft;
  c.speculative.drafter = variant.drafter;
  c.speculative.max_draft_tokens = 6;
  c.speculative.adaptive = false;  // always draft: exercises verification on every decode
  return c;
}

inline std::map<std::pair<int64_t, int32_t>, FinishedSample> RunAll(
    RolloutEngine& e, std::vector<RolloutRequest> reqs) {
  for (auto& r : reqs) EXPECT_TRUE(e.Add(std::move(r)).ok());
  auto done = e.RunToCompletion();
  EXPECT_TRUE(done.ok()) << done.status();
  std::map<std::pair<int64_t, int32_t>, FinishedSample> out;
  for (auto& f : *done) out[{f.request_id, f.sample_index}] = std::move(f);
  EXPECT_EQ(e.scheduler().stats().num_kv_blocks_used, 0);
  e.scheduler().CheckInvariants();
  return out;
}

inline void ExpectSameGreedy(const std::map<std::pair<int64_t, int32_t>, FinishedSample>& spec,
                             const std::map<std::pair<int64_t, int32_t>, FinishedSample>& off) {
  ASSERT_EQ(spec.size(), off.size());
  for (const auto& [k, f] : off) {
    const FinishedSample& g = spec.at(k);
    EXPECT_EQ(g.generated_ids, f.generated_ids) << "request " << k.first << " sample " << k.second;
    EXPECT_EQ(g.finish_reason, f.finish_reason);
    ASSERT_EQ(g.logprobs.size(), f.logprobs.size());
    for (size_t i = 0; i < f.logprobs.size(); ++i) EXPECT_NEAR(g.logprobs[i], f.logprobs[i], 1e-5);
  }
}

inline std::vector<RolloutRequest> GreedyRequests(int32_t max_tokens) {
  std::vector<RolloutRequest> reqs;
  for (const std::vector<int32_t>& p :
       {std::vector<int32_t>{1, 5, 9, 2}, {3, 3, 3}, {7, 1, 7, 1, 7, 1, 7}}) {
    RolloutRequest r;
    r.prompt_ids = p;
    r.sampling.temperature = 0;
    r.stop.max_tokens = max_tokens;
    r.n = 3;
    reqs.push_back(r);
  }
  return reqs;
}

// Two-sample chi-square (homogeneity) p-value of two engines' counts of the same outcomes, each
// of `n` samples; outcomes with a pooled expected count under 5 are pooled into one bin. Sets
// `bins` to the number of bins.
template <typename K>
double HomogeneityPValue(const std::map<K, int64_t>& a, const std::map<K, int64_t>& b, int64_t n,
                         int64_t* bins) {
  std::map<K, std::pair<int64_t, int64_t>> both;
  for (const auto& [k, c] : a) both[k].first = c;
  for (const auto& [k, c] : b) both[k].second = c;
  double stat = 0, small_e = 0;
  int64_t small_a = 0, small_b = 0;
  *bins = 0;
  for (const auto& [k, c] : both) {
    const double e = (c.first + c.second) / 2.0;
    if (e < 5) {
      small_e += e;
      small_a += c.first;
      small_b += c.second;
      continue;
    }
    ++*bins;
    stat += ((c.first - e) * (c.first - e) + (c.second - e) * (c.second - e)) / e;
  }
  if (small_e > 0) {
    ++*bins;
    stat +=
        ((small_a - small_e) * (small_a - small_e) + (small_b - small_e) * (small_b - small_e)) /
        small_e;
  }
  (void)n;
  return *bins < 2 ? 1.0 : GammaQ(static_cast<double>(*bins - 1) / 2, stat / 2);
}

// Randomized probability integral transforms (Czado, Gneiting & Held, Biometrics 2009, §2.1) of
// `generated` (drawn one after another after `prompt`) under the policy's exact sampling
// distribution with `params`: for each token x, u = F(x-) + V p(x) with F the distribution's CDF
// over its ids in order and V uniform from `rng`. If every token was drawn from the policy's
// distribution given the tokens before it, the u are independent and uniform on [0, 1) whatever
// the prefixes were, so a histogram of them tests every position and prefix at once against the
// exact probabilities.
inline void AppendPits(const engine::LlamaModel& m, std::span<const int32_t> prompt,
                       std::span<const int32_t> generated, const engine::SamplingParams& params,
                       std::mt19937_64& rng, std::vector<double>* out) {
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  engine::KvCache cache = m.NewCache(1, std::ssize(tokens));
  const engine::SequenceSpan span{0, 0, std::ssize(tokens)};
  std::vector<float> logits;
  ASSERT_TRUE(m.Forward(tokens, {&span, 1}, &cache, engine::LogitsFor::kAllTokens, &logits).ok());
  const int64_t v = m.config().vocab_size;
  engine::Sampler sampler(params);
  engine::TokenDistribution dist;
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (size_t i = 0; i < generated.size(); ++i) {
    const int64_t row = std::ssize(prompt) - 1 + static_cast<int64_t>(i);
    sampler.Distribution(std::span<const float>(logits).subspan(row * v, v), &dist);
    const int64_t at = dist.IndexOf(generated[i]);
    ASSERT_GE(at, 0) << "token " << generated[i] << " has probability 0";
    const double below = std::accumulate(dist.probs.begin(), dist.probs.begin() + at, 0.0);
    out->push_back(std::min(below + uniform(rng) * dist.probs[static_cast<size_t>(at)], 1.0));
  }
}

// Chi-square p-value of `u` (values in [0, 1]) against the uniform distribution, in `bins` equal
// bins.
inline double UniformityPValue(std::span<const double> u, int bins) {
  std::vector<int64_t> counts(static_cast<size_t>(bins), 0);
  for (const double x : u) ++counts[std::min<size_t>(static_cast<size_t>(x * bins), bins - 1)];
  const double e = static_cast<double>(u.size()) / bins;
  double stat = 0;
  for (const int64_t c : counts) stat += (c - e) * (c - e) / e;
  return GammaQ((bins - 1) / 2.0, stat / 2);
}

}  // namespace laminar::rollout::spec_test
