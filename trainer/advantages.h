// RL advantage estimators as pure functions over a packed batch, chosen by verl's names from a
// registry: GRPO, Dr. GRPO, RLOO, REINFORCE++ and GAE. Sequence-level advantages are broadcast to
// every response token of their sequence.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar::trainer {

// Packed batch of B sequences, T tokens in total, on the host.
struct AdvantageInput {
  std::span<const float> scores;         // [B] f32 sequence reward (all but gae; gae, see below)
  std::span<const int64_t> group_ids;    // [B] prompt group of each sequence (grpo, dr_grpo, rloo)
  std::span<const float> loss_mask;      // [T] f32, 1 on response tokens, 0 elsewhere
  std::span<const int64_t> seq_offsets;  // [B+1] int64, seq b owns [off[b], off[b+1]); off[B] = T
  // gae only: per-token rewards [T] (empty = each sequence's score on its last masked token, as
  // verl's reward managers place it) and the critic's values V(s_t) [T].
  std::span<const float> token_rewards;
  std::span<const float> values;
};

struct AdvantageConfig {
  std::string estimator = "grpo";    // RegisteredAdvantageEstimators()
  bool norm_by_std = true;           // grpo: divide by the group std (verl norm_adv_by_std_in_grpo)
  double eps = 1e-6;                 // grpo: (r - mean) / (std + eps)
  double gamma = 1.0, lambda = 1.0;  // gae: discount and GAE lambda
  bool whiten = true;                // gae: whiten advantages over the batch (verl does)
};

struct AdvantageOutput {
  std::vector<float> advantages;  // [T] f32, 0 outside the mask
  std::vector<float> returns;     // [T] f32 value targets (gae), 0 outside the mask; else empty
};

// Per-token advantages of a batch. Estimators (registry keyed by verl's names):
//   grpo          A_b = (r_b - mean_g) / (std_g + eps), mean and unbiased std (torch.std) over the
//                 group of b (GRPO, arXiv 2402.03300 §4.1.2); norm_by_std = false drops the
//                 division. A group of one sample uses mean 0, std 1 as verl does (A = r /
//                 (1+eps)).
//   dr_grpo       A_b = r_b - mean_g (Dr. GRPO, arXiv 2503.20783), whatever norm_by_std says.
//   rloo          A_b = r_b - mean of the other samples of its group (RLOO, Kool et al. 2019;
//                 Ahmadian et al. 2024, arXiv 2402.14740); 0 for a group of one.
//   reinforce_pp  r_b - mean over the batch's sequences, broadcast, then whitened over the batch's
//                 response tokens with the unbiased variance: (x - mean) / sqrt(var + 1e-8)
//                 (REINFORCE++, arXiv 2501.03262; verl masked_whiten).
//   gae           GAE (Schulman et al. 2015, arXiv 1506.02438 eq. 16) per sequence over its masked
//                 tokens only (unmasked tokens are skipped, as verl does for observations):
//                 delta_t = r_t + gamma V_next - V_t, A_t = delta_t + gamma lambda A_next, with
//                 V_next = 0 and A_next = 0 after the last response token; returns = A + V; then A
//                 whitened over the batch as above when `whiten`.
// Group statistics, baselines and whitening are computed in f64. Groups are the sequences that
// share a group id (not necessarily adjacent). A group or batch whose rewards are all equal gives
// zero advantages, never NaN.
// Errors: InvalidArgument naming the field for mismatched lengths ([B] vs seq_offsets, [T] vs
// loss_mask), offsets that do not cover T, a mask value other than 0/1, non-finite scores, rewards
// or values, bad eps/gamma/lambda, and an unknown estimator (listing the known ones).
StatusOr<AdvantageOutput> ComputeAdvantages(const AdvantageInput& input,
                                            const AdvantageConfig& config);

// One estimator: fills `out` (advantages sized [T] and zeroed) from a validated input.
using AdvantageFn = Status (*)(const AdvantageInput& input, const AdvantageConfig& config,
                               AdvantageOutput& out);
StatusOr<AdvantageFn> FindAdvantageEstimator(std::string_view name);
std::vector<std::string> RegisteredAdvantageEstimators();  // sorted

}  // namespace laminar::trainer
