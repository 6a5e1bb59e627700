// RL policy losses as pure functions over a packed batch: PPO clip with clip-higher and dual clip,
// GSPO and plain policy gradient, chosen by name from a registry; truncated importance weights for
// the rollout/trainer mismatch, KL to a reference policy, an entropy bonus, verl's aggregation
// modes and metric names. Returns the loss, its analytic gradient w.r.t. the logprobs (what the
// model's backward pass takes) and the metrics.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar::trainer {

// Packed batch of B sequences, T tokens in total; every per-token array is [T] f32 on the host.
// Logprobs are natural logs. Only tokens with loss_mask = 1 are read (values elsewhere may be
// anything, NaN included); their logprobs, advantages and entropies must be finite.
struct PolicyLossInput {
  std::span<const float> logprobs;           // log pi_theta of each target token (differentiated)
  std::span<const float> old_logprobs;       // log pi_old (recomputed by the trainer at step start)
  std::span<const float> behavior_logprobs;  // log mu from the rollout; empty = no IS correction
  std::span<const float> ref_logprobs;       // log pi_ref; empty unless kl_coef != 0
  std::span<const float> entropy;            // entropy of pi_theta (nats); empty unless bonus on
  std::span<const float> advantages;         // per token
  std::span<const float> loss_mask;          // 1 on response tokens, 0 elsewhere (nothing else)
  std::span<const int64_t> seq_offsets;      // [B+1] int64, seq b owns [off[b], off[b+1]); off[B]=T
  // Normalizers for aggregation, so that gradient accumulation over micro-batches and data
  // parallel ranks gives exactly the loss of the combined batch: the number of masked tokens and
  // of sequences with at least one masked token in the whole mini-batch across ranks. 0 = use this
  // input's own counts. A sequence must not be split between calls.
  double global_num_tokens = 0, global_num_sequences = 0;
};

struct PolicyLossConfig {
  std::string loss = "vanilla";  // RegisteredPolicyLosses(): "vanilla", "gspo", "pg"
  // "token-mean" | "seq-mean-token-sum" | "seq-mean-token-mean" | "seq-mean-token-sum-norm"
  std::string agg = "token-mean";
  // PPO clip range [1 - low, 1 + high] (DAPO clip-higher, arXiv 2503.14476 §3.1), and the
  // dual-clip bound for negative advantages (Ye et al. 2020, arXiv 1912.09729; > 1, or 0 = off).
  double clip_ratio_low = 0.2, clip_ratio_high = 0.28, clip_ratio_c = 3.0;
  // Truncated importance weight min(pi_old / mu, is_cap) on the policy-gradient term:
  // "token" (per token), "sequence" (product of the sequence's token ratios), "geometric"
  // (geometric mean of them), "none". Ignored when behavior_logprobs is empty.
  std::string is_level = "token";
  double is_cap = 2.0;
  std::string kl_estimator = "k3";  // RegisteredKlEstimators(); used when kl_coef != 0
  double kl_coef = 0;
  double entropy_coef = 0;  // loss -= entropy_coef * agg(entropy)
  // Constant divisor of "seq-mean-token-sum-norm" (Dr. GRPO's MAX_TOKENS; verl's
  // loss_scale_factor, e.g. the maximum response length). Must be > 0 for that mode.
  double loss_scale_factor = 0;
};

struct PolicyLossOutput {
  double loss = 0;                        // the scalar to minimize
  std::vector<float> grad_logprobs;       // [T] d loss / d logprobs (analytic), 0 off the mask
  std::vector<float> grad_entropy;        // [T] d loss / d entropy (zeros when no bonus)
  std::map<std::string, double> metrics;  // verl names; see ComputePolicyLoss
};

// The config checks ComputePolicyLoss makes, without an input: unknown loss, aggregation, IS
// level or KL estimator names (listing the known ones) and out-of-range coefficients, as
// InvalidArgument naming the field.
Status ValidatePolicyLossConfig(const PolicyLossConfig& config);

// loss = agg(w * pg) + kl_coef * agg(kl) - entropy_coef * agg(entropy), where pg is the chosen
// policy-gradient term per token, w the truncated importance weight (a constant, no gradient) and
// agg the aggregation over masked tokens (verl's agg_loss) with weights a_t:
//   token-mean               a_t = 1 / N                 N = global_num_tokens or own count
//   seq-mean-token-sum       a_t = 1 / S                 S = global_num_sequences or own count
//   seq-mean-token-mean      a_t = 1 / (S * n_b)         n_b = masked tokens of t's sequence
//   seq-mean-token-sum-norm  a_t = 1 / loss_scale_factor (verl: sum of sequence sums / constant)
// Every log-ratio is clamped to [-20, 20] (GSPO's sequence log-ratio to [-20, 10] as in verl) and
// everything is computed in f64, so log-ratios of +-1000 give a finite loss and gradient; a
// clamped log-ratio passes no gradient, as with torch.clamp.
//
// Metrics (each is this call's share: with global normalizers, summing a metric over the
// micro-batches of a mini-batch gives the mini-batch's value; without them it is this call's own
// value):
//   actor/pg_loss            agg(w * pg)
//   actor/pg_clipfrac        fraction of masked tokens where the clipped term is taken (verl:
//                            pg_losses2 > pg_losses1, so the token passes no gradient)
//   actor/pg_clipfrac_lower  fraction where the dual clip is active (A < 0, ratio-loss > -A * c)
//   actor/ppo_kl             mean over masked tokens of old_logprob - logprob
//   actor/entropy            agg(entropy), when entropy is given
//   actor/kl_loss            agg(kl), when kl_coef != 0
//   rollout_corr/kl          mean over masked tokens of behavior - old logprob, when mu is given
//   rollout_corr/is_weight_mean  mean over masked tokens of w, when IS weights are applied
//   rollout_corr/is_clipfrac     share of masked tokens whose w was truncated to is_cap (likewise)
// Errors: InvalidArgument naming the field for mismatched lengths, offsets that do not cover T,
// a mask value other than 0/1, a non-finite value on a masked token, a missing ref_logprobs or
// entropy when its coefficient is on, bad clip/cap values, normalizers below this input's own
// counts, and unknown names (listing the known ones).
StatusOr<PolicyLossOutput> ComputePolicyLoss(const PolicyLossInput& input,
                                             const PolicyLossConfig& config);

// Per-token policy-gradient terms one loss produces, before importance weighting and aggregation.
// Entries off the mask are left 0.
struct PgTokenTerms {
  std::vector<double> loss;            // [T] pg_t
  std::vector<double> grad;            // [T] the gradient form of d pg_t / d logprob_t
  std::vector<uint8_t> clipped;        // [T] 1 where the clipped term is taken
  std::vector<uint8_t> clipped_lower;  // [T] 1 where the dual clip is active
};
// A policy loss: fills `terms` (already sized [T] and zeroed) from a validated input.
using PolicyLossFn = void (*)(const PolicyLossInput& input, const PolicyLossConfig& config,
                              PgTokenTerms& terms);

// The registry of policy losses, keyed by verl's names:
//   vanilla  PPO clip (Schulman et al. 2017, arXiv 1707.06347 eq. 7) on r = pi_theta / pi_old with
//            [1 - clip_ratio_low, 1 + clip_ratio_high] and, for A < 0, dual clip at clip_ratio_c.
//   gspo     GSPO (arXiv 2507.18071 §4.1, §4.3 GSPO-token): s_b = exp(mean_t log r_t) clipped as
//            above, in the token form sg[s_b] * pi_t / sg[pi_t] whose gradient w.r.t. logprob_t
//            is s_b (times -A_t): the paper's gradient, which equals the derivative of the loss
//            value when advantages and IS weights are constant within each sequence.
//   pg       plain policy gradient (REINFORCE, Williams 1992): pg_t = -A_t * logprob_t.
// Unknown name: InvalidArgument listing the known names.
StatusOr<PolicyLossFn> FindPolicyLoss(std::string_view name);
std::vector<std::string> RegisteredPolicyLosses();  // sorted

// KL estimators of KL(pi_theta || pi_ref) from samples of pi_theta (Schulman, "Approximating KL
// divergence", 2020), with x = clamp(logprob - ref_logprob, -20, 20) (so r = pi_ref/pi = e^-x):
//   k1 (verl "kl")          x
//   k2 (verl "mse")         x^2 / 2
//   k3 (verl "low_var_kl")  r - 1 - log r = e^-x - 1 + x, clamped to [-10, 10] as verl does
//   abs                     |x|
// Fills the value and d value / d logprob of one token.
struct KlTerm {
  double value = 0, grad = 0;
};
using KlEstimatorFn = KlTerm (*)(double logprob, double ref_logprob);
StatusOr<KlEstimatorFn> FindKlEstimator(std::string_view name);
std::vector<std::string> RegisteredKlEstimators();  // sorted, aliases included

}  // namespace laminar::trainer
