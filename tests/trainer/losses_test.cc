// Policy losses: hand-computed examples, a plain f64 reference loop, central finite differences,
// extreme log-ratios, micro-batch splits with global normalizers and bad input.
// Kept in one file over ~600 lines: every loss is checked against the same f64 reference loop
// and finite-difference harness defined here.
#include "trainer/losses.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace laminar::trainer {
namespace {

const char* const kAggs[] = {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
                             "seq-mean-token-sum-norm"};
const char* const kIsLevels[] = {"none", "token", "sequence", "geometric"};
const char* const kKls[] = {"k1", "k2", "k3", "abs"};
constexpr double kStep = 1.0 / 4096;  // finite-difference step; inputs lie on this grid

// Owns a packed batch; Input() views it.
struct Batch {
  std::vector<float> logprobs, old_logprobs, behavior, ref, entropy, advantages, mask;
  std::vector<int64_t> offsets{0};
  double global_tokens = 0, global_sequences = 0;

  PolicyLossInput Input() const {
    PolicyLossInput in;
    in.logprobs = logprobs;
    in.old_logprobs = old_logprobs;
    in.behavior_logprobs = behavior;
    in.ref_logprobs = ref;
    in.entropy = entropy;
    in.advantages = advantages;
    in.loss_mask = mask;
    in.seq_offsets = offsets;
    in.global_num_tokens = global_tokens;
    in.global_num_sequences = global_sequences;
    return in;
  }
  // Appends one token; the behaviour/ref/entropy arrays only when given (>= 0 entropy).
  void Add(float lp, float old, float adv, float m, float mu = NAN, float rf = NAN,
           float ent = NAN) {
    logprobs.push_back(lp);
    old_logprobs.push_back(old);
    advantages.push_back(adv);
    mask.push_back(m);
    if (!std::isnan(mu)) behavior.push_back(mu);
    if (!std::isnan(rf)) ref.push_back(rf);
    if (!std::isnan(ent)) entropy.push_back(ent);
  }
  void EndSequence() { offsets.push_back(static_cast<int64_t>(logprobs.size())); }
  size_t num_sequences() const { return offsets.size() - 1; }
};

double OnGrid(double x) { return std::round(x / kStep) * kStep; }

// Whether log-ratio x is within `margin` of a kink of the default config's losses (clip bounds,
// dual clip, |x| = 0 for the abs estimator).
bool NearKink(double x, double margin = 0.002) {
  for (double k : {std::log(0.8), std::log(1.28), std::log(3.0), 0.0}) {
    if (std::abs(x - k) < margin) return true;
  }
  return false;
}

// A random batch of `num_seqs` sequences: a prompt prefix (mask 0), response tokens (mask 1, now
// and then a 0 inside), sometimes a sequence with no masked token. All values lie on the
// finite-difference grid and no log-ratio (token or GSPO sequence mean) is near a kink, so central
// differences are exact up to O(step^2). Advantages are constant per sequence unless
// `token_advantages`. Behaviour logprobs are old - c_b per sequence when `seq_constant_is` (so
// token IS weights are constant within a sequence), else random per token.
Batch RandomBatch(uint64_t seed, int num_seqs, bool token_advantages, bool seq_constant_is) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.5, 1.5);
  std::uniform_int_distribution<int> len(1, 7), prompt(0, 2);
  Batch batch;
  for (int b = 0; b < num_seqs; ++b) {
    const bool empty = rng() % 7 == 0;
    const int n_prompt = prompt(rng), n_resp = len(rng);
    for (;;) {  // redraw the sequence until its GSPO mean log-ratio is away from the clip bounds
      Batch seq;
      const double seq_adv = OnGrid(u(rng)), seq_shift = OnGrid(u(rng));
      double sum = 0;
      int n = 0;
      for (int t = 0; t < n_prompt + n_resp; ++t) {
        const float m = (t < n_prompt || empty || (t > n_prompt && rng() % 5 == 0)) ? 0.0f : 1.0f;
        const double old = OnGrid(-2.0 + u(rng));
        double x;
        do x = OnGrid(u(rng));
        while (NearKink(x));
        double kl_x;
        do kl_x = OnGrid(u(rng));
        while (NearKink(kl_x));
        const double lp = old + x;
        const double mu = seq_constant_is ? old - seq_shift : OnGrid(old + u(rng));
        seq.Add(static_cast<float>(lp), static_cast<float>(old),
                static_cast<float>(token_advantages ? OnGrid(u(rng)) : seq_adv), m,
                static_cast<float>(mu), static_cast<float>(lp - kl_x),
                static_cast<float>(OnGrid(1.5 + u(rng))));
        if (m != 0) {
          sum += x;
          ++n;
        }
      }
      if (n > 0 && NearKink(sum / n, 0.01)) continue;
      for (size_t t = 0; t < seq.logprobs.size(); ++t) {
        batch.Add(seq.logprobs[t], seq.old_logprobs[t], seq.advantages[t], seq.mask[t],
                  seq.behavior[t], seq.ref[t], seq.entropy[t]);
      }
      batch.EndSequence();
      break;
    }
  }
  return batch;
}

PolicyLossConfig Config(const std::string& loss, const std::string& agg,
                        const std::string& is_level, const std::string& kl = "k3",
                        double kl_coef = 0, double entropy_coef = 0) {
  PolicyLossConfig c;
  c.loss = loss;
  c.agg = agg;
  c.is_level = is_level;
  c.kl_estimator = kl;
  c.kl_coef = kl_coef;
  c.entropy_coef = entropy_coef;
  c.loss_scale_factor = 16;
  return c;
}

PolicyLossOutput MustCompute(const Batch& batch, const PolicyLossConfig& config) {
  auto out = ComputePolicyLoss(batch.Input(), config);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : PolicyLossOutput{};
}

// ---- Hand-computed examples ----

TEST(PolicyLossTest, VanillaClipHigherAndDualClipByHand) {
  // One sequence: a prompt token (mask 0) and five response tokens with old = 0, so r = e^lp.
  // Clip range [0.8, 1.28], dual clip c = 3. Per token (A, r) -> loss, d loss / d lp:
  //   (+1, 1.1): max(-1.1, -1.1) = -1.1, unclipped, grad -A r = -1.1
  //   (+1, 1.5): max(-1.5, -1.28) = -1.28, clipped, grad 0
  //   (-1, 0.5): max(0.5, 0.8) = 0.8, clipped, grad 0
  //   (-1, 4.0): max(4, 1.28) = 4 > -A c = 3 -> 3, dual clip, grad 0
  //   (-2, 1.2): max(2.4, 2.4) = 2.4 < 6, unclipped, grad -A r = 2.4
  // token-mean over N = 5: loss = (-1.1 - 1.28 + 0.8 + 3 + 2.4) / 5 = 0.764.
  Batch batch;
  batch.Add(0.3f, 0.0f, 5.0f, 0.0f);
  for (auto [adv, r] : {std::pair{1.0, 1.1}, {1.0, 1.5}, {-1.0, 0.5}, {-1.0, 4.0}, {-2.0, 1.2}}) {
    batch.Add(static_cast<float>(std::log(r)), 0.0f, static_cast<float>(adv), 1.0f);
  }
  batch.EndSequence();
  auto out = MustCompute(batch, Config("vanilla", "token-mean", "none"));
  EXPECT_NEAR(out.loss, 0.764, 1e-6);
  const double expected_grad[] = {0, -1.1 / 5, 0, 0, 0, 2.4 / 5};
  for (size_t t = 0; t < 6; ++t) EXPECT_NEAR(out.grad_logprobs[t], expected_grad[t], 1e-6) << t;
  EXPECT_NEAR(out.metrics["actor/pg_loss"], 0.764, 1e-6);
  EXPECT_DOUBLE_EQ(out.metrics["actor/pg_clipfrac"], 2.0 / 5);
  EXPECT_DOUBLE_EQ(out.metrics["actor/pg_clipfrac_lower"], 1.0 / 5);
  // ppo_kl = mean(old - lp) = -ln(1.1 * 1.5 * 0.5 * 4 * 1.2) / 5 = -ln(3.96) / 5.
  EXPECT_NEAR(out.metrics["actor/ppo_kl"], -std::log(3.96) / 5, 1e-6);
  EXPECT_EQ(out.metrics.count("rollout_corr/kl"), 0u);
  for (float g : out.grad_entropy) EXPECT_EQ(g, 0.0f);

  // Dual clip off: the (-1, 4) token keeps loss 4 and gradient -A r = 4.
  auto no_dual = Config("vanilla", "token-mean", "none");
  no_dual.clip_ratio_c = 0;
  auto off = MustCompute(batch, no_dual);
  EXPECT_NEAR(off.loss, 0.964, 1e-6);  // (3.82 - 3 + 4) / 5
  EXPECT_NEAR(off.grad_logprobs[4], 4.0 / 5, 1e-6);
  EXPECT_EQ(off.metrics["actor/pg_clipfrac_lower"], 0.0);
}

TEST(PolicyLossTest, GspoSequenceRatioByHand) {
  // seq 0: log-ratios 0.1, 0.3 -> s = e^0.2 = 1.22140, A = +1: inside [0.8, 1.28], loss -s per
  //        token, grad -A s per token (the token form).
  // seq 1: log-ratios 0.5, 0.5, 0.8 -> s = e^0.6 = 1.82212, A = +0.5: clipped to -0.5 * 1.28 =
  //        -0.64, grad 0.
  // seq-mean-token-mean: loss = (-1.22140 + -0.64) / 2; grad seq 0 = -1.22140 / (2 * 2).
  Batch batch;
  for (float x : {0.1f, 0.3f}) batch.Add(-1.0f + x, -1.0f, 1.0f, 1.0f);
  batch.EndSequence();
  for (float x : {0.5f, 0.5f, 0.8f}) batch.Add(-2.0f + x, -2.0f, 0.5f, 1.0f);
  batch.EndSequence();
  auto out = MustCompute(batch, Config("gspo", "seq-mean-token-mean", "none"));
  const double s0 = std::exp(0.2);
  EXPECT_NEAR(out.loss, (-s0 - 0.64) / 2, 1e-6);
  EXPECT_NEAR(out.grad_logprobs[0], -s0 / 4, 1e-6);
  EXPECT_NEAR(out.grad_logprobs[1], -s0 / 4, 1e-6);
  for (size_t t = 2; t < 5; ++t) EXPECT_EQ(out.grad_logprobs[t], 0.0f);
  EXPECT_DOUBLE_EQ(out.metrics["actor/pg_clipfrac"], 3.0 / 5);
}

TEST(PolicyLossTest, PlainPolicyGradientAndEveryAggregationByHand) {
  // seq 0: logprobs -1, -2 with A = 1 -> per-token loss -A lp = 1, 2 (token sum 3).
  // seq 1: a prompt token, then logprob -0.5 with A = -2 -> loss -1 (token sum -1).
  // seq 2: no masked token (does not count as a sequence).
  Batch batch;
  batch.Add(-1.0f, -1.0f, 1.0f, 1.0f);
  batch.Add(-2.0f, -2.0f, 1.0f, 1.0f);
  batch.EndSequence();
  batch.Add(-3.0f, -3.0f, 0.0f, 0.0f);
  batch.Add(-0.5f, -0.5f, -2.0f, 1.0f);
  batch.EndSequence();
  batch.Add(-0.5f, -0.5f, 9.0f, 0.0f);
  batch.EndSequence();
  struct Case {
    const char* agg;
    double loss;
    double grad[3];  // for the masked tokens 0, 1, 3: -A * a_t
  };
  const Case cases[] = {
      {"token-mean", (1 + 2 - 1) / 3.0, {-1 / 3.0, -1 / 3.0, 2 / 3.0}},
      {"seq-mean-token-sum", (3 - 1) / 2.0, {-0.5, -0.5, 1.0}},
      {"seq-mean-token-mean", (1.5 - 1) / 2.0, {-0.25, -0.25, 1.0}},
      {"seq-mean-token-sum-norm", (3 - 1) / 16.0, {-1 / 16.0, -1 / 16.0, 2 / 16.0}},
  };
  for (const Case& c : cases) {
    auto out = MustCompute(batch, Config("pg", c.agg, "none"));
    EXPECT_NEAR(out.loss, c.loss, 1e-12) << c.agg;
    EXPECT_NEAR(out.grad_logprobs[0], c.grad[0], 1e-7) << c.agg;
    EXPECT_NEAR(out.grad_logprobs[1], c.grad[1], 1e-7) << c.agg;
    EXPECT_EQ(out.grad_logprobs[2], 0.0f) << c.agg;
    EXPECT_NEAR(out.grad_logprobs[3], c.grad[2], 1e-7) << c.agg;
    EXPECT_EQ(out.grad_logprobs[4], 0.0f) << c.agg;
    EXPECT_EQ(out.metrics["actor/pg_clipfrac"], 0.0);
  }
}

TEST(PolicyLossTest, TruncatedImportanceWeightsByHand) {
  // pg loss, one sequence of two tokens with lp = old = -1, A = 1 (per-token loss 1), token-mean.
  // old - mu = ln 3 and ln 0.5, cap 2:
  //   token:     w = min(3, 2) = 2 and 0.5      -> loss (2 + 0.5) / 2 = 1.25
  //   sequence:  w = min(3 * 0.5, 2) = 1.5      -> loss 1.5
  //   geometric: w = min(sqrt(1.5), 2) = 1.2247 -> loss 1.2247
  //   none:      w = 1                          -> loss 1
  // rollout_corr/kl = mean(mu - old) = (-ln 3 - ln 0.5) / 2.
  Batch batch;
  batch.Add(-1.0f, -1.0f, 1.0f, 1.0f, static_cast<float>(-1.0 - std::log(3.0)));
  batch.Add(-1.0f, -1.0f, 1.0f, 1.0f, static_cast<float>(-1.0 - std::log(0.5)));
  batch.EndSequence();
  const std::pair<const char*, double> cases[] = {
      {"token", 1.25}, {"sequence", 1.5}, {"geometric", std::sqrt(1.5)}, {"none", 1.0}};
  for (const auto& [level, loss] : cases) {
    auto out = MustCompute(batch, Config("pg", "token-mean", level));
    EXPECT_NEAR(out.loss, loss, 1e-6) << level;
    EXPECT_NEAR(out.metrics["rollout_corr/kl"], (-std::log(3.0) - std::log(0.5)) / 2, 1e-6);
    if (std::string(level) == "none") {
      EXPECT_EQ(out.metrics.count("rollout_corr/is_weight_mean"), 0u);
    } else {
      EXPECT_NEAR(out.metrics["rollout_corr/is_weight_mean"], loss, 1e-6) << level;
      // Only the token level truncates here: w = min(3, 2) for the first token.
      EXPECT_EQ(out.metrics["rollout_corr/is_clipfrac"], std::string(level) == "token" ? 0.5 : 0.0)
          << level;
    }
  }
  auto token = MustCompute(batch, Config("pg", "token-mean", "token"));
  EXPECT_NEAR(token.grad_logprobs[0], -2.0 / 2, 1e-6);  // -A * w / N
  EXPECT_NEAR(token.grad_logprobs[1], -0.5 / 2, 1e-6);
}

TEST(PolicyLossTest, KlEstimatorsAndEntropyBonusByHand) {
  // One token, A = 0 (no pg term), lp = -1, ref = -1.5: x = lp - ref = 0.5, r = e^-0.5.
  //   k1 = 0.5, grad 1;  k2 = 0.125, grad 0.5;  k3 = e^-0.5 - 1 + 0.5 = 0.106531, grad 1 - e^-0.5.
  // kl_coef 0.5 scales loss and grad; entropy 2 with coef 0.01 subtracts 0.02, grad_entropy -0.01.
  Batch batch;
  batch.Add(-1.0f, -1.0f, 0.0f, 1.0f, NAN, -1.5f, 2.0f);
  batch.EndSequence();
  const double r = std::exp(-0.5);
  const std::tuple<const char*, double, double> cases[] = {
      {"k1", 0.5, 1.0},    {"kl", 0.5, 1.0},       {"k2", 0.125, 0.5},
      {"mse", 0.125, 0.5}, {"k3", r - 0.5, 1 - r}, {"low_var_kl", r - 0.5, 1 - r},
      {"abs", 0.5, 1.0}};
  for (const auto& [name, value, grad] : cases) {
    auto out = MustCompute(batch, Config("vanilla", "token-mean", "none", name, 0.5, 0.01));
    EXPECT_NEAR(out.loss, 0.5 * value - 0.02, 1e-7) << name;
    EXPECT_NEAR(out.grad_logprobs[0], 0.5 * grad, 1e-7) << name;
    EXPECT_NEAR(out.metrics["actor/kl_loss"], value, 1e-7) << name;
    EXPECT_NEAR(out.metrics["actor/entropy"], 2.0, 1e-7) << name;
    EXPECT_NEAR(out.grad_entropy[0], -0.01, 1e-9) << name;
  }
  // k3 far from the reference: x = -1000 is clamped to -20, k3 = e^20 - 21 is clamped to 10, and
  // neither clamp passes gradient.
  Batch far;
  far.Add(-1000.0f, -1000.0f, 0.0f, 1.0f, NAN, 0.0f);
  far.EndSequence();
  auto out = MustCompute(far, Config("vanilla", "token-mean", "none", "k3", 1.0));
  EXPECT_DOUBLE_EQ(out.loss, 10.0);
  EXPECT_EQ(out.grad_logprobs[0], 0.0f);
}

// ---- A plain f64 reference, written from the formulas token by token ----

struct Reference {
  double loss = 0;
  std::vector<double> grad, grad_entropy;
  std::map<std::string, double> metrics;
};

// Kept whole: the reference is read best as one straight-line transcription of the loss
// formulas (ratio, clipping, aggregation, metrics), in f64.
Reference ReferenceLoss(const Batch& batch, const PolicyLossConfig& c) {
  const size_t num_tokens = batch.logprobs.size();
  Reference ref;
  ref.grad.assign(num_tokens, 0);
  ref.grad_entropy.assign(num_tokens, 0);
  double num_masked = 0, num_seqs = 0;
  for (size_t b = 0; b < batch.num_sequences(); ++b) {
    double n = 0;
    for (int64_t t = batch.offsets[b]; t < batch.offsets[b + 1]; ++t) n += batch.mask[t];
    num_masked += n;
    num_seqs += n > 0;
  }
  const double lo = 1 - c.clip_ratio_low, hi = 1 + c.clip_ratio_high;
  double pg = 0, kl = 0, ent = 0, clipped = 0, lower = 0, ppo_kl = 0, rkl = 0, wsum = 0;
  double wclip = 0;
  for (size_t b = 0; b < batch.num_sequences(); ++b) {
    std::vector<size_t> tokens;
    for (int64_t t = batch.offsets[b]; t < batch.offsets[b + 1]; ++t) {
      if (batch.mask[t] == 1) tokens.push_back(static_cast<size_t>(t));
    }
    if (tokens.empty()) continue;
    const double n = static_cast<double>(tokens.size());
    double mean_lr = 0, sum_is = 0;
    for (size_t t : tokens) {
      mean_lr += (double{batch.logprobs[t]} - batch.old_logprobs[t]) / n;
      if (!batch.behavior.empty()) sum_is += double{batch.old_logprobs[t]} - batch.behavior[t];
    }
    for (size_t t : tokens) {
      double a = 1 / num_masked;
      if (c.agg == "seq-mean-token-sum") a = 1 / num_seqs;
      if (c.agg == "seq-mean-token-mean") a = 1 / (num_seqs * n);
      if (c.agg == "seq-mean-token-sum-norm") a = 1 / c.loss_scale_factor;
      double w = 1;
      if (!batch.behavior.empty() && c.is_level != "none") {
        double lw = double{batch.old_logprobs[t]} - batch.behavior[t];
        if (c.is_level == "sequence") lw = sum_is;
        if (c.is_level == "geometric") lw = sum_is / n;
        w = std::min(std::exp(std::max(-20.0, std::min(20.0, lw))), c.is_cap);
      }
      const double adv = batch.advantages[t], lp = batch.logprobs[t];
      double loss = 0, dloss = 0;
      if (c.loss == "pg") {
        loss = -adv * lp;
        dloss = -adv;
      } else {
        const double raw = c.loss == "gspo" ? mean_lr : lp - batch.old_logprobs[t];
        const double upper = c.loss == "gspo" ? 10.0 : 20.0;
        const double x = std::max(-20.0, std::min(upper, raw));
        const double r = std::exp(x);
        const bool is_clipped = (adv > 0 && r > hi) || (adv < 0 && r < lo);
        const bool is_lower = c.loss == "vanilla" && adv < 0 && c.clip_ratio_c > 0 &&
                              std::max(r, std::clamp(r, lo, hi)) > c.clip_ratio_c;
        loss = -adv * (is_clipped ? std::clamp(r, lo, hi) : r);
        dloss = is_clipped || raw != x ? 0.0 : -adv * r;
        if (is_lower) loss = -adv * c.clip_ratio_c, dloss = 0;
        clipped += is_clipped;
        lower += is_lower;
      }
      pg += a * w * loss;
      ref.grad[t] = a * w * dloss;
      if (!batch.ref.empty()) {
        const double x = std::max(-20.0, std::min(20.0, lp - batch.ref[t]));
        double k = x, dk = 1;
        if (c.kl_estimator == "k2") k = x * x / 2, dk = x;
        if (c.kl_estimator == "abs") k = std::abs(x), dk = x > 0 ? 1 : -1;
        if (c.kl_estimator == "k3") k = std::min(10.0, std::exp(-x) - 1 + x), dk = 1 - std::exp(-x);
        kl += a * k;
        ref.grad[t] += c.kl_coef * a * dk;
      }
      if (!batch.entropy.empty()) {
        ent += a * batch.entropy[t];
        ref.grad_entropy[t] = -c.entropy_coef * a;
      }
      ppo_kl += (double{batch.old_logprobs[t]} - lp) / num_masked;
      if (!batch.behavior.empty()) {
        rkl += (double{batch.behavior[t]} - batch.old_logprobs[t]) / num_masked;
      }
      wsum += w / num_masked;
      wclip += (w >= c.is_cap ? 1.0 : 0.0) / num_masked;
    }
  }
  ref.loss = pg + c.kl_coef * kl - c.entropy_coef * ent;
  ref.metrics = {{"actor/pg_loss", pg},
                 {"actor/pg_clipfrac", clipped / num_masked},
                 {"actor/pg_clipfrac_lower", lower / num_masked},
                 {"actor/ppo_kl", ppo_kl}};
  if (!batch.entropy.empty()) ref.metrics["actor/entropy"] = ent;
  if (!batch.ref.empty()) ref.metrics["actor/kl_loss"] = kl;
  if (!batch.behavior.empty()) {
    ref.metrics["rollout_corr/kl"] = rkl;
    if (c.is_level != "none") {
      ref.metrics["rollout_corr/is_weight_mean"] = wsum;
      ref.metrics["rollout_corr/is_clipfrac"] = wclip;
    }
  }
  return ref;
}

TEST(PolicyLossTest, EqualsPlainReferenceLoopOnRandomBatches) {
  int combos = 0;
  double max_clipfrac = 0, max_clipfrac_lower = 0;  // the batches reach every branch
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    for (const std::string& loss : RegisteredPolicyLosses()) {
      for (const char* agg : kAggs) {
        for (const char* level : kIsLevels) {
          const char* kl = kKls[(seed + combos) % 4];
          const auto config = Config(loss, agg, level, kl, 0.05 * static_cast<double>(seed), 0.01);
          // Per-token advantages and IS weights: the reference implements the same token form.
          const Batch batch = RandomBatch(seed * 100 + combos, 9, true, false);
          const auto out = MustCompute(batch, config);
          const Reference ref = ReferenceLoss(batch, config);
          const std::string what = loss + " " + agg + " " + level + " " + kl;
          max_clipfrac = std::max(max_clipfrac, out.metrics.at("actor/pg_clipfrac"));
          max_clipfrac_lower =
              std::max(max_clipfrac_lower, out.metrics.at("actor/pg_clipfrac_lower"));
          EXPECT_NEAR(out.loss, ref.loss, 1e-9 * (1 + std::abs(ref.loss))) << what;
          for (size_t t = 0; t < ref.grad.size(); ++t) {
            ASSERT_NEAR(out.grad_logprobs[t], ref.grad[t], 1e-6 * (1 + std::abs(ref.grad[t])))
                << what << " token " << t;
            ASSERT_NEAR(out.grad_entropy[t], ref.grad_entropy[t], 1e-9) << what << " token " << t;
          }
          ASSERT_EQ(out.metrics.size(), ref.metrics.size()) << what;
          for (const auto& [name, value] : ref.metrics) {
            EXPECT_NEAR(out.metrics.at(name), value, 1e-9 * (1 + std::abs(value)))
                << what << " " << name;
          }
          ++combos;
        }
      }
    }
  }
  EXPECT_EQ(combos, 6 * 3 * 4 * 4);
  EXPECT_GT(max_clipfrac, 0.1);
  EXPECT_GT(max_clipfrac_lower, 0.05);
}

// ---- Central finite differences ----

TEST(PolicyLossTest, GradientsEqualCentralFiniteDifferences) {
  // Inputs lie on a grid of step h = 2^-12 and |values| < 8, so x +- h is exact in f32; the loss
  // is computed in f64, so this is an f64 central difference with error O(h^2).
  // GSPO's token-form gradient is the derivative of its loss only when advantages and IS weights
  // are constant within each sequence (GSPO-token, §4.3), so every batch here has advantages
  // constant per sequence and behaviour logprobs old - c_b; the per-token case is covered by the
  // reference test above.
  int combo = 0;
  std::map<std::string, double> max_clipfrac, max_clipfrac_lower;  // every branch is reached
  for (const std::string& loss : RegisteredPolicyLosses()) {
    for (const char* agg : kAggs) {
      for (const char* level : kIsLevels) {
        const auto config = Config(loss, agg, level, kKls[combo % 4], 0.1, 0.01);
        Batch batch = RandomBatch(1000 + combo, 5, loss != "gspo", loss == "gspo");
        const auto out = MustCompute(batch, config);
        max_clipfrac[loss] = std::max(max_clipfrac[loss], out.metrics.at("actor/pg_clipfrac"));
        max_clipfrac_lower[loss] =
            std::max(max_clipfrac_lower[loss], out.metrics.at("actor/pg_clipfrac_lower"));
        const std::string what = loss + " " + agg + " " + level + " " + kKls[combo % 4];
        for (size_t t = 0; t < batch.logprobs.size(); ++t) {
          for (int which = 0; which < 2; ++which) {  // 0: logprobs, 1: entropy
            float& x = which == 0 ? batch.logprobs[t] : batch.entropy[t];
            const float saved = x;
            x = static_cast<float>(saved + kStep);
            const double plus = MustCompute(batch, config).loss;
            x = static_cast<float>(saved - kStep);
            const double minus = MustCompute(batch, config).loss;
            x = saved;
            const double fd = (plus - minus) / (2 * kStep);
            const double analytic = which == 0 ? out.grad_logprobs[t] : out.grad_entropy[t];
            ASSERT_NEAR(analytic, fd, 1e-6 + 1e-5 * std::abs(fd))
                << what << (which == 0 ? " logprobs[" : " entropy[") << t << "]";
          }
        }
        ++combo;
      }
    }
  }
  EXPECT_GT(max_clipfrac["vanilla"], 0.1);
  EXPECT_GT(max_clipfrac_lower["vanilla"], 0.05);
  EXPECT_GT(max_clipfrac["gspo"], 0.1);
}

// ---- Extremes ----

TEST(PolicyLossTest, LogRatiosOfPlusMinusThousandGiveFiniteLossAndGradients) {
  Batch batch;
  const float big = 1000.0f;
  for (float sign : {1.0f, -1.0f}) {
    for (float adv : {1.0f, -1.0f}) {
      // pi/pi_old, pi_old/mu and pi/pi_ref all e^(+-1000).
      batch.Add(sign * big - 1, -1.0f, adv, 1.0f, -1 - sign * big, -1 - sign * big, 3.0f);
      batch.Add(-1.0f, sign * big - 1, adv, 1.0f, -1.0f, sign * big, 3.0f);
    }
    batch.EndSequence();
  }
  for (const std::string& loss : RegisteredPolicyLosses()) {
    for (const char* agg : kAggs) {
      for (const char* level : kIsLevels) {
        for (const char* kl : kKls) {
          auto out = MustCompute(batch, Config(loss, agg, level, kl, 0.1, 0.01));
          const std::string what = loss + " " + agg + " " + level + " " + kl;
          ASSERT_TRUE(std::isfinite(out.loss)) << what;
          for (float g : out.grad_logprobs) ASSERT_TRUE(std::isfinite(g)) << what;
          for (const auto& [name, value] : out.metrics) {
            ASSERT_TRUE(std::isfinite(value)) << what << " " << name;
          }
        }
      }
    }
  }
}

TEST(PolicyLossTest, UnmaskedTokensAreNeverRead) {
  // NaN and huge values off the mask change nothing.
  Batch clean = RandomBatch(77, 6, true, false);
  Batch dirty = clean;
  for (size_t t = 0; t < dirty.mask.size(); ++t) {
    if (dirty.mask[t] != 0) continue;
    dirty.logprobs[t] = dirty.old_logprobs[t] = dirty.behavior[t] = NAN;
    dirty.ref[t] = dirty.advantages[t] = dirty.entropy[t] = INFINITY;
  }
  for (const std::string& loss : RegisteredPolicyLosses()) {
    const auto config = Config(loss, "seq-mean-token-mean", "token", "k3", 0.1, 0.01);
    const auto a = MustCompute(clean, config), b = MustCompute(dirty, config);
    EXPECT_EQ(a.loss, b.loss) << loss;
    EXPECT_EQ(a.grad_logprobs, b.grad_logprobs) << loss;
    EXPECT_EQ(a.metrics, b.metrics) << loss;
  }
}

TEST(PolicyLossTest, EmptyBatchGivesZero) {
  Batch batch;
  auto out = MustCompute(batch, Config("vanilla", "token-mean", "token"));
  EXPECT_EQ(out.loss, 0.0);
  EXPECT_TRUE(out.grad_logprobs.empty());
  EXPECT_EQ(out.metrics["actor/pg_clipfrac"], 0.0);
}

// ---- Micro-batches with global normalizers ----

Batch Slice(const Batch& batch, size_t seq_begin, size_t seq_end) {
  Batch out;
  for (size_t b = seq_begin; b < seq_end; ++b) {
    for (int64_t t = batch.offsets[b]; t < batch.offsets[b + 1]; ++t) {
      out.Add(batch.logprobs[t], batch.old_logprobs[t], batch.advantages[t], batch.mask[t],
              batch.behavior[t], batch.ref[t], batch.entropy[t]);
    }
    out.EndSequence();
  }
  return out;
}

TEST(PolicyLossTest, MicroBatchesWithGlobalNormalizersSumToTheCombinedBatch) {
  const Batch whole = RandomBatch(4242, 10, true, false);
  double num_tokens = 0, num_seqs = 0;
  for (size_t b = 0; b < whole.num_sequences(); ++b) {
    double n = 0;
    for (int64_t t = whole.offsets[b]; t < whole.offsets[b + 1]; ++t) n += whole.mask[t];
    num_tokens += n;
    num_seqs += n > 0;
  }
  for (const std::string& loss : RegisteredPolicyLosses()) {
    for (const char* agg : kAggs) {
      for (const char* level : kIsLevels) {
        const auto config = Config(loss, agg, level, "k3", 0.1, 0.01);
        const auto combined = MustCompute(whole, config);
        std::vector<float> grads, grad_entropy;
        std::map<std::string, double> metrics;
        double total = 0;
        for (auto [begin, end] : {std::pair{0, 3}, {3, 4}, {4, 10}}) {
          Batch part = Slice(whole, begin, end);
          part.global_tokens = num_tokens;
          part.global_sequences = num_seqs;
          const auto out = MustCompute(part, config);
          total += out.loss;
          grads.insert(grads.end(), out.grad_logprobs.begin(), out.grad_logprobs.end());
          grad_entropy.insert(grad_entropy.end(), out.grad_entropy.begin(), out.grad_entropy.end());
          for (const auto& [name, value] : out.metrics) metrics[name] += value;
        }
        const std::string what = loss + " " + agg + " " + level;
        EXPECT_NEAR(total, combined.loss, 1e-12 * (1 + std::abs(combined.loss))) << what;
        EXPECT_EQ(grads, combined.grad_logprobs) << what;
        EXPECT_EQ(grad_entropy, combined.grad_entropy) << what;
        ASSERT_EQ(metrics.size(), combined.metrics.size()) << what;
        for (const auto& [name, value] : combined.metrics) {
          EXPECT_NEAR(metrics[name], value, 1e-12 * (1 + std::abs(value))) << what << " " << name;
        }
      }
    }
  }
}

// ---- Bad input ----

void ExpectInvalid(const Batch& batch, const PolicyLossConfig& config, const std::string& needle) {
  auto out = ComputePolicyLoss(batch.Input(), config);
  ASSERT_FALSE(out.ok()) << "expected an error naming " << needle;
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << out.status();
  EXPECT_NE(out.status().message().find(needle), std::string::npos) << out.status();
}

TEST(PolicyLossTest, BadInputIsInvalidArgumentNamingTheField) {
  const Batch good = RandomBatch(5, 3, true, false);
  const auto config = Config("vanilla", "token-mean", "token");
  ASSERT_TRUE(ComputePolicyLoss(good.Input(), config).ok());
  const std::pair<std::vector<float> Batch::*, const char*> fields[] = {
      {&Batch::old_logprobs, "old_logprobs"}, {&Batch::behavior, "behavior_logprobs"},
      {&Batch::ref, "ref_logprobs"},          {&Batch::entropy, "entropy"},
      {&Batch::advantages, "advantages"},     {&Batch::mask, "loss_mask"}};
  for (const auto& [member, name] : fields) {
    Batch bad = good;
    (bad.*member).pop_back();
    ExpectInvalid(bad, config, name);
  }
  Batch bad = good;
  bad.offsets.back() -= 1;  // does not cover T
  ExpectInvalid(bad, config, "seq_offsets");
  bad = good;
  bad.offsets.clear();
  ExpectInvalid(bad, config, "seq_offsets");
  bad = good;
  bad.offsets.front() = 1;
  ExpectInvalid(bad, config, "seq_offsets");
  bad = good;
  bad.offsets.insert(bad.offsets.begin() + 1, static_cast<int64_t>(bad.logprobs.size()) + 1);
  ExpectInvalid(bad, config, "seq_offsets");
  bad = good;
  bad.mask[0] = 0.5f;
  ExpectInvalid(bad, config, "loss_mask[0]");
  bad = good;
  const size_t masked = std::find(bad.mask.begin(), bad.mask.end(), 1.0f) - bad.mask.begin();
  bad.logprobs[masked] = NAN;
  ExpectInvalid(bad, config, "logprobs[" + std::to_string(masked) + "]");
  bad = good;
  bad.global_tokens = 0.5;  // below this input's own count
  ExpectInvalid(bad, config, "global_num_tokens");
  bad = good;
  bad.global_sequences = -1;
  ExpectInvalid(bad, config, "global_num_sequences");
  bad = good;
  bad.ref.clear();
  ExpectInvalid(bad, Config("vanilla", "token-mean", "token", "k3", 0.1), "ref_logprobs");
  bad = good;
  bad.entropy.clear();
  ExpectInvalid(bad, Config("vanilla", "token-mean", "token", "k3", 0, 0.1), "entropy");

  ExpectInvalid(good, Config("ppo2", "token-mean", "token"), "vanilla");  // lists known names
  ExpectInvalid(good, Config("ppo2", "token-mean", "token"), "ppo2");
  ExpectInvalid(good, Config("vanilla", "mean", "token"), "agg 'mean'");
  ExpectInvalid(good, Config("vanilla", "token-mean", "tok"), "is_level 'tok'");
  ExpectInvalid(good, Config("vanilla", "token-mean", "token", "k4"), "low_var_kl");
  auto c = config;
  c.clip_ratio_c = 0.5;
  ExpectInvalid(good, c, "clip_ratio_c");
  c = config;
  c.clip_ratio_low = 1.0;
  ExpectInvalid(good, c, "clip_ratio_low");
  c = config;
  c.is_cap = 0;
  ExpectInvalid(good, c, "is_cap");
  c = Config("vanilla", "seq-mean-token-sum-norm", "token");
  c.loss_scale_factor = 0;
  ExpectInvalid(good, c, "loss_scale_factor");
}

TEST(PolicyLossTest, RegistriesListTheirNames) {
  EXPECT_EQ(RegisteredPolicyLosses(), (std::vector<std::string>{"gspo", "pg", "vanilla"}));
  EXPECT_EQ(RegisteredKlEstimators(),
            (std::vector<std::string>{"abs", "k1", "k2", "k3", "kl", "low_var_kl", "mse"}));
  EXPECT_TRUE(FindPolicyLoss("gspo").ok());
  auto unknown = FindPolicyLoss("grpo");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("gspo, pg, vanilla"), std::string::npos);
}

}  // namespace
}  // namespace laminar::trainer
