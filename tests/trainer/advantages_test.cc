// Advantage estimators: hand-computed examples, plain reference loops on random batches,
// degenerate groups (one sample, zero variance) and bad input.
#include "trainer/advantages.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace laminar::trainer {
namespace {

// Owns a packed batch; Input() views it.
struct Batch {
  std::vector<float> scores, mask, token_rewards, values;
  std::vector<int64_t> group_ids, offsets{0};

  AdvantageInput Input() const {
    AdvantageInput in;
    in.scores = scores;
    in.group_ids = group_ids;
    in.loss_mask = mask;
    in.seq_offsets = offsets;
    in.token_rewards = token_rewards;
    in.values = values;
    return in;
  }
  // Appends a sequence of `num_prompt` unmasked then `num_response` masked tokens.
  void Add(float score, int64_t group, int num_prompt, int num_response) {
    scores.push_back(score);
    group_ids.push_back(group);
    mask.insert(mask.end(), num_prompt, 0.0f);
    mask.insert(mask.end(), num_response, 1.0f);
    offsets.push_back(static_cast<int64_t>(mask.size()));
  }
  size_t num_sequences() const { return offsets.size() - 1; }
};

AdvantageConfig Estimator(const std::string& name) {
  AdvantageConfig c;
  c.estimator = name;
  return c;
}

AdvantageOutput MustCompute(const Batch& batch, const AdvantageConfig& config) {
  auto out = ComputeAdvantages(batch.Input(), config);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : AdvantageOutput{};
}

// The advantage of each sequence's masked tokens; CHECKs that they are all equal and that unmasked
// tokens are 0.
std::vector<double> PerSequence(const Batch& batch, const AdvantageOutput& out) {
  std::vector<double> seq;
  for (size_t b = 0; b < batch.num_sequences(); ++b) {
    double value = 0;
    bool first = true;
    for (int64_t t = batch.offsets[b]; t < batch.offsets[b + 1]; ++t) {
      if (batch.mask[t] == 0) {
        EXPECT_EQ(out.advantages[t], 0.0f) << "unmasked token " << t;
      } else if (first) {
        value = out.advantages[t];
        first = false;
      } else {
        EXPECT_EQ(out.advantages[t], value) << "token " << t << " of sequence " << b;
      }
    }
    seq.push_back(value);
  }
  return seq;
}

// Group a: scores 1, 0, 0 (mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3));
// group b: 0.5, 0.5 (zero variance); group c: a single sample with score 2. Groups interleave.
Batch ThreeGroups() {
  Batch batch;
  batch.Add(1.0f, 7, 2, 3);
  batch.Add(0.5f, -3, 1, 2);
  batch.Add(0.0f, 7, 0, 1);
  batch.Add(2.0f, 99, 3, 2);
  batch.Add(0.5f, -3, 2, 2);
  batch.Add(0.0f, 7, 1, 4);
  return batch;
}

TEST(AdvantagesTest, GrpoByHand) {
  const Batch batch = ThreeGroups();
  const double std_a = std::sqrt(1.0 / 3);
  // (r - mean) / (std + eps): group a -> (2/3) / std_a = 1.1547, (-1/3) / std_a = -0.57735;
  // group b -> 0; group c (one sample, verl: mean 0, std 1) -> 2 / (1 + 1e-6).
  const double expected[] = {
      (2.0 / 3) / (std_a + 1e-6), 0, (-1.0 / 3) / (std_a + 1e-6), 2 / (1 + 1e-6), 0,
      (-1.0 / 3) / (std_a + 1e-6)};
  const auto seq = PerSequence(batch, MustCompute(batch, Estimator("grpo")));
  for (size_t b = 0; b < seq.size(); ++b) EXPECT_NEAR(seq[b], expected[b], 1e-6) << b;
  EXPECT_TRUE(MustCompute(batch, Estimator("grpo")).returns.empty());
}

TEST(AdvantagesTest, DrGrpoAndGrpoWithoutStdSubtractOnlyTheGroupMean) {
  const Batch batch = ThreeGroups();
  // r - mean: group a -> 2/3, -1/3, -1/3; group b -> 0; group c -> 2 - 0 (verl's mean 0).
  const double expected[] = {2.0 / 3, 0, -1.0 / 3, 2, 0, -1.0 / 3};
  auto no_std = Estimator("grpo");
  no_std.norm_by_std = false;
  for (const auto& config : {Estimator("dr_grpo"), no_std}) {
    const auto seq = PerSequence(batch, MustCompute(batch, config));
    for (size_t b = 0; b < seq.size(); ++b) EXPECT_NEAR(seq[b], expected[b], 1e-7) << b;
  }
}

TEST(AdvantagesTest, RlooByHand) {
  const Batch batch = ThreeGroups();
  // r_i - mean of the others: group a -> 1 - 0 = 1, 0 - (1 + 0)/2 = -0.5 (twice); group b -> 0;
  // group c (one sample) -> 0.
  const double expected[] = {1, 0, -0.5, 0, 0, -0.5};
  const auto seq = PerSequence(batch, MustCompute(batch, Estimator("rloo")));
  for (size_t b = 0; b < seq.size(); ++b) EXPECT_NEAR(seq[b], expected[b], 1e-7) << b;
}

TEST(AdvantagesTest, ReinforcePlusPlusByHand) {
  // Scores 1 (one response token) and 0 (three): batch-mean baseline 0.5 -> +0.5, -0.5.
  // Over the 4 tokens: mean -0.25, deviations 0.75 and -0.25 (x3), sum of squares 0.75,
  // unbiased variance 0.25, std 0.5 -> advantages 1.5 and -0.5.
  Batch batch;
  batch.Add(1.0f, 0, 2, 1);
  batch.Add(0.0f, 1, 1, 3);
  const auto seq = PerSequence(batch, MustCompute(batch, Estimator("reinforce_pp")));
  EXPECT_NEAR(seq[0], 0.75 / std::sqrt(0.25 + 1e-8), 1e-6);
  EXPECT_NEAR(seq[1], -0.25 / std::sqrt(0.25 + 1e-8), 1e-6);
}

// One sequence: a prompt token, masked tokens with rewards 0, 0, 1 and values 0.5, 0.6, 0.7, and
// an observation token (mask 0, NaN reward and value: never read) between the first two.
Batch GaeBatch() {
  Batch batch;
  batch.scores = {1.0f};
  batch.group_ids = {0};
  batch.mask = {0, 1, 0, 1, 1};
  batch.token_rewards = {5, 0, NAN, 0, 1};
  batch.values = {9, 0.5f, NAN, 0.6f, 0.7f};
  batch.offsets = {0, 5};
  return batch;
}

TEST(AdvantagesTest, GaeByHand) {
  // gamma 0.9, lambda 0.8 (gamma lambda = 0.72), no whitening, backwards over masked tokens:
  //   last:   delta = 1 + 0 - 0.7 = 0.3;             A = 0.3;                 return 1.0
  //   middle: delta = 0 + 0.9 * 0.7 - 0.6 = 0.03;    A = 0.03 + 0.72 * 0.3;   = 0.246, ret 0.846
  //   first:  delta = 0 + 0.9 * 0.6 - 0.5 = 0.04;    A = 0.04 + 0.72 * 0.246  = 0.21712,
  //           return 0.71712
  auto config = Estimator("gae");
  config.gamma = 0.9;
  config.lambda = 0.8;
  config.whiten = false;
  Batch batch = GaeBatch();
  const float expected_adv[] = {0, 0.21712f, 0, 0.246f, 0.3f};
  const float expected_ret[] = {0, 0.71712f, 0, 0.846f, 1.0f};
  for (int rewards_from_score = 0; rewards_from_score < 2; ++rewards_from_score) {
    // Without token_rewards the score lands on the last masked token: the same rewards.
    if (rewards_from_score) batch.token_rewards.clear();
    const auto out = MustCompute(batch, config);
    for (size_t t = 0; t < 5; ++t) {
      EXPECT_NEAR(out.advantages[t], expected_adv[t], 1e-6) << t;
      EXPECT_NEAR(out.returns[t], expected_ret[t], 1e-6) << t;
    }
  }
  // gamma = lambda = 1: A_t = (sum of later rewards) - V_t = 1 - V_t.
  config.gamma = config.lambda = 1;
  const auto mc = MustCompute(batch, config);
  EXPECT_NEAR(mc.advantages[1], 0.5, 1e-6);
  EXPECT_NEAR(mc.advantages[3], 0.4, 1e-6);
  EXPECT_NEAR(mc.advantages[4], 0.3, 1e-6);
  EXPECT_NEAR(mc.returns[1], 1.0, 1e-6);
  // Whitened (the default): mean 0, unbiased variance 1 over the masked tokens, returns unchanged.
  config.whiten = true;
  const auto white = MustCompute(batch, config);
  const double a = white.advantages[1], b = white.advantages[3], c = white.advantages[4];
  EXPECT_NEAR(a + b + c, 0, 1e-6);
  EXPECT_NEAR((a * a + b * b + c * c) / 2, 1.0, 1e-5);
  EXPECT_NEAR(white.returns[1], 1.0, 1e-6);
  EXPECT_EQ(white.advantages[2], 0.0f);
}

// ---- Plain reference loops on random batches ----

Batch RandomBatch(uint64_t seed, int num_seqs) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Batch batch;
  for (int b = 0; b < num_seqs; ++b) {
    const float score = rng() % 3 == 0 ? 1.0f : static_cast<float>(u(rng));
    batch.Add(score, static_cast<int64_t>(rng() % 4), static_cast<int>(rng() % 3),
              static_cast<int>(rng() % 5));
  }
  for (size_t t = 0; t < batch.mask.size(); ++t) {
    if (rng() % 6 == 0) batch.mask[t] = 0;  // observation tokens inside responses
    batch.token_rewards.push_back(static_cast<float>(u(rng)));
    batch.values.push_back(static_cast<float>(u(rng)));
  }
  return batch;
}

TEST(AdvantagesTest, GroupEstimatorsEqualPlainLoopsOnRandomBatches) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const Batch batch = RandomBatch(seed, 13);
    const size_t n = batch.num_sequences();
    const auto grpo = PerSequence(batch, MustCompute(batch, Estimator("grpo")));
    const auto dr = PerSequence(batch, MustCompute(batch, Estimator("dr_grpo")));
    const auto rloo = PerSequence(batch, MustCompute(batch, Estimator("rloo")));
    for (size_t i = 0; i < n; ++i) {
      double sum = 0, count = 0;
      for (size_t j = 0; j < n; ++j) {
        if (batch.group_ids[j] == batch.group_ids[i]) sum += batch.scores[j], count += 1;
      }
      const double mean = sum / count;
      double sq = 0;
      for (size_t j = 0; j < n; ++j) {
        if (batch.group_ids[j] == batch.group_ids[i]) {
          sq += (batch.scores[j] - mean) * (batch.scores[j] - mean);
        }
      }
      // Skip sequences without masked tokens (PerSequence reports 0 for them).
      bool has_tokens = false;
      for (int64_t t = batch.offsets[i]; t < batch.offsets[i + 1]; ++t)
        has_tokens |= batch.mask[t] != 0;
      if (!has_tokens) continue;
      const double r = batch.scores[i];
      const double exp_grpo =
          count > 1 ? (r - mean) / (std::sqrt(sq / (count - 1)) + 1e-6) : r / (1 + 1e-6);
      EXPECT_NEAR(grpo[i], exp_grpo, 1e-5 * (1 + std::abs(exp_grpo))) << seed << " " << i;
      EXPECT_NEAR(dr[i], count > 1 ? r - mean : r, 1e-6) << seed << " " << i;
      EXPECT_NEAR(rloo[i], count > 1 ? r - (sum - r) / (count - 1) : 0.0, 1e-6) << seed << " " << i;
    }
  }
}

TEST(AdvantagesTest, GaeEqualsTheDiscountedSumOfTdErrors) {
  // A_t = sum_l (gamma lambda)^l delta_{t+l} over the sequence's masked tokens (GAE eq. 16),
  // delta_k = r_k + gamma V_{k+1} - V_k with V after the last masked token = 0.
  auto config = Estimator("gae");
  config.gamma = 0.95;
  config.lambda = 0.7;
  config.whiten = false;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    const Batch batch = RandomBatch(seed, 7);
    const auto out = MustCompute(batch, config);
    for (size_t b = 0; b < batch.num_sequences(); ++b) {
      std::vector<int64_t> idx;
      for (int64_t t = batch.offsets[b]; t < batch.offsets[b + 1]; ++t) {
        if (batch.mask[t] != 0) idx.push_back(t);
      }
      for (size_t k = 0; k < idx.size(); ++k) {
        double adv = 0, discount = 1;
        for (size_t l = k; l < idx.size(); ++l) {
          const double next_v = l + 1 < idx.size() ? batch.values[idx[l + 1]] : 0.0;
          adv += discount * (batch.token_rewards[idx[l]] + 0.95 * next_v - batch.values[idx[l]]);
          discount *= 0.95 * 0.7;
        }
        EXPECT_NEAR(out.advantages[idx[k]], adv, 1e-5) << seed << " " << idx[k];
        EXPECT_NEAR(out.returns[idx[k]], adv + batch.values[idx[k]], 1e-5);
      }
    }
    for (size_t t = 0; t < batch.mask.size(); ++t) {
      if (batch.mask[t] != 0) continue;
      EXPECT_EQ(out.advantages[t], 0.0f);
      EXPECT_EQ(out.returns[t], 0.0f);
    }
  }
}

// ---- Degenerate groups ----

TEST(AdvantagesTest, ZeroVarianceGivesZeroNeverNaN) {
  Batch batch;
  for (int i = 0; i < 4; ++i) batch.Add(0.7f, 1, 1, 3);
  for (int i = 0; i < 3; ++i) batch.Add(-2.5f, 2, 0, 2);
  for (const char* name : {"grpo", "dr_grpo", "rloo"}) {
    for (double eps : {1e-6, 0.0}) {
      auto config = Estimator(name);
      config.eps = eps;
      const auto out = MustCompute(batch, config);
      for (float a : out.advantages) EXPECT_EQ(a, 0.0f) << name << " eps " << eps;
    }
  }
  Batch flat;  // reinforce_pp and gae whiten over the batch: all-equal inputs give 0
  for (int i = 0; i < 3; ++i) flat.Add(0.3f, i, 1, 2);
  flat.values.assign(flat.mask.size(), 0.25f);
  flat.token_rewards.assign(flat.mask.size(), 0.0f);
  for (const char* name : {"reinforce_pp", "gae"}) {
    const auto out = MustCompute(flat, Estimator(name));
    for (float a : out.advantages) EXPECT_EQ(a, 0.0f) << name;
  }
}

TEST(AdvantagesTest, SingleSampleAndEmptyBatchesAreFine) {
  Batch one;
  one.Add(0.8f, 5, 1, 3);
  one.values.assign(one.mask.size(), 0.1f);
  for (const std::string& name : RegisteredAdvantageEstimators()) {
    const auto out = MustCompute(one, Estimator(name));
    ASSERT_EQ(out.advantages.size(), 4u) << name;
    for (float a : out.advantages) EXPECT_TRUE(std::isfinite(a)) << name;
  }
  EXPECT_EQ(MustCompute(one, Estimator("rloo")).advantages[1], 0.0f);
  EXPECT_NEAR(MustCompute(one, Estimator("grpo")).advantages[1], 0.8 / (1 + 1e-6), 1e-7);
  Batch empty;
  for (const std::string& name : RegisteredAdvantageEstimators()) {
    EXPECT_TRUE(MustCompute(empty, Estimator(name)).advantages.empty()) << name;
  }
}

// ---- Bad input ----

void ExpectInvalid(const Batch& batch, const AdvantageConfig& config, const std::string& needle) {
  auto out = ComputeAdvantages(batch.Input(), config);
  ASSERT_FALSE(out.ok()) << "expected an error naming " << needle;
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status();
  EXPECT_NE(out.status().message().find(needle), std::string::npos) << out.status();
}

TEST(AdvantagesTest, BadInputIsInvalidArgumentNamingTheField) {
  const Batch good = RandomBatch(3, 5);
  for (const std::string& name : RegisteredAdvantageEstimators()) {
    ASSERT_TRUE(ComputeAdvantages(good.Input(), Estimator(name)).ok()) << name;
  }
  ExpectInvalid(good, Estimator("ppo"), "ppo");
  ExpectInvalid(good, Estimator("ppo"), "dr_grpo, gae, grpo, reinforce_pp, rloo");
  Batch bad = good;
  bad.scores.pop_back();
  ExpectInvalid(bad, Estimator("grpo"), "scores");
  ExpectInvalid(bad, Estimator("reinforce_pp"), "scores");
  bad = good;
  bad.group_ids.push_back(1);
  ExpectInvalid(bad, Estimator("rloo"), "group_ids");
  bad = good;
  bad.offsets.back() += 1;  // does not cover T
  ExpectInvalid(bad, Estimator("grpo"), "seq_offsets");
  bad = good;
  bad.offsets.clear();
  ExpectInvalid(bad, Estimator("grpo"), "seq_offsets");
  bad = good;
  std::swap(bad.offsets[1], bad.offsets[2]);
  if (bad.offsets[1] != bad.offsets[2]) ExpectInvalid(bad, Estimator("grpo"), "seq_offsets");
  bad = good;
  bad.mask[0] = 2;
  ExpectInvalid(bad, Estimator("grpo"), "loss_mask[0]");
  bad = good;
  bad.scores[1] = NAN;
  ExpectInvalid(bad, Estimator("grpo"), "scores[1]");
  bad = good;
  bad.values.pop_back();
  ExpectInvalid(bad, Estimator("gae"), "values");
  bad = good;
  bad.token_rewards.push_back(0);
  ExpectInvalid(bad, Estimator("gae"), "token_rewards");
  bad = good;
  bad.token_rewards.clear();
  bad.scores.clear();
  ExpectInvalid(bad, Estimator("gae"), "scores");
  auto config = Estimator("gae");
  config.gamma = 1.5;
  ExpectInvalid(good, config, "gamma");
  config = Estimator("grpo");
  config.eps = -1;
  ExpectInvalid(good, config, "eps");
}

}  // namespace
}  // namespace laminar::trainer
