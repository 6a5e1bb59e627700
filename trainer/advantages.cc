// Advantage estimators: validation, group statistics, broadcast to tokens, whitening and GAE.
// Everything in f64; the results are rounded to f32 once.
#include "trainer/advantages.h"

#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <unordered_map>

namespace laminar::trainer {
namespace {

constexpr double kWhitenEps = 1e-8;  // verl masked_whiten: (x - mean) * rsqrt(var + 1e-8)

size_t NumSequences(const AdvantageInput& in) { return in.seq_offsets.size() - 1; }

Status CheckSize(size_t size, size_t expected, std::string_view field, std::string_view of) {
  if (size == expected) return OkStatus();
  std::ostringstream msg;
  msg << "advantages: " << field << " has " << size << " entries, expected " << expected << " ("
      << of << ")";
  return InvalidArgumentError(msg.str());
}

Status NeedScores(const AdvantageInput& in, std::string_view estimator) {
  return CheckSize(in.scores.size(), NumSequences(in), "scores",
                   std::string(estimator) + " needs one score per sequence");
}

Status NeedGroups(const AdvantageInput& in, std::string_view estimator) {
  LAMINAR_RETURN_IF_ERROR(NeedScores(in, estimator));
  return CheckSize(in.group_ids.size(), NumSequences(in), "group_ids",
                   std::string(estimator) + " needs one group id per sequence");
}

// Writes the sequence-level advantage seq[b] on every masked token of sequence b.
void Broadcast(const AdvantageInput& in, const std::vector<double>& seq, AdvantageOutput& out) {
  for (size_t b = 0; b < NumSequences(in); ++b) {
    for (int64_t t = in.seq_offsets[b]; t < in.seq_offsets[b + 1]; ++t) {
      if (in.loss_mask[t] != 0) out.advantages[t] = static_cast<float>(seq[b]);
    }
  }
}

// Mean and unbiased std of the scores of each group, by group id.
struct GroupStats {
  size_t n = 0;
  double sum = 0, mean = 0, sq_dev = 0;
};
std::unordered_map<int64_t, GroupStats> ComputeGroupStats(const AdvantageInput& in) {
  std::unordered_map<int64_t, GroupStats> groups;
  for (size_t b = 0; b < in.scores.size(); ++b) {
    GroupStats& g = groups[in.group_ids[b]];
    ++g.n;
    g.sum += in.scores[b];
  }
  for (auto& [id, g] : groups) g.mean = g.sum / static_cast<double>(g.n);
  for (size_t b = 0; b < in.scores.size(); ++b) {
    GroupStats& g = groups[in.group_ids[b]];
    const double d = in.scores[b] - g.mean;
    g.sq_dev += d * d;
  }
  return groups;
}

// (x - mean) / sqrt(var + eps) over the masked tokens, unbiased variance; zeros when fewer than
// two tokens or when all are equal.
void Whiten(std::span<const float> mask, std::vector<double>& x) {
  double n = 0, sum = 0;
  for (size_t t = 0; t < x.size(); ++t) {
    if (mask[t] != 0) {
      n += 1;
      sum += x[t];
    }
  }
  if (n == 0) return;
  const double mean = sum / n;
  double sq_dev = 0;
  for (size_t t = 0; t < x.size(); ++t) {
    if (mask[t] != 0) sq_dev += (x[t] - mean) * (x[t] - mean);
  }
  const double inv_std = n > 1 ? 1.0 / std::sqrt(sq_dev / (n - 1) + kWhitenEps) : 0.0;
  for (size_t t = 0; t < x.size(); ++t) x[t] = mask[t] != 0 ? (x[t] - mean) * inv_std : 0.0;
}

// GRPO and Dr. GRPO (verl compute_grpo_outcome_advantage).
Status GroupNormalized(const AdvantageInput& in, bool norm_by_std, double eps,
                       AdvantageOutput& out) {
  const auto groups = ComputeGroupStats(in);
  std::vector<double> seq(NumSequences(in));
  for (size_t b = 0; b < seq.size(); ++b) {
    const GroupStats& g = groups.at(in.group_ids[b]);
    // verl: a group of one has mean 0 and std 1.
    const double mean = g.n > 1 ? g.mean : 0.0;
    const double std = g.n > 1 ? std::sqrt(g.sq_dev / static_cast<double>(g.n - 1)) : 1.0;
    const double diff = in.scores[b] - mean;
    // diff is exactly 0 in a group of equal scores, which must give 0 even with eps = 0.
    seq[b] = !norm_by_std ? diff : (diff == 0 ? 0.0 : diff / (std + eps));
  }
  Broadcast(in, seq, out);
  return OkStatus();
}

Status Grpo(const AdvantageInput& in, const AdvantageConfig& c, AdvantageOutput& out) {
  LAMINAR_RETURN_IF_ERROR(NeedGroups(in, "grpo"));
  return GroupNormalized(in, c.norm_by_std, c.eps, out);
}

Status DrGrpo(const AdvantageInput& in, const AdvantageConfig& c, AdvantageOutput& out) {
  LAMINAR_RETURN_IF_ERROR(NeedGroups(in, "dr_grpo"));
  return GroupNormalized(in, /*norm_by_std=*/false, c.eps, out);
}

Status Rloo(const AdvantageInput& in, const AdvantageConfig&, AdvantageOutput& out) {
  LAMINAR_RETURN_IF_ERROR(NeedGroups(in, "rloo"));
  const auto groups = ComputeGroupStats(in);
  std::vector<double> seq(NumSequences(in));
  for (size_t b = 0; b < seq.size(); ++b) {
    const GroupStats& g = groups.at(in.group_ids[b]);
    if (g.n < 2) continue;
    const double r = in.scores[b];
    seq[b] = r - (g.sum - r) / static_cast<double>(g.n - 1);
  }
  Broadcast(in, seq, out);
  return OkStatus();
}

Status ReinforcePlusPlus(const AdvantageInput& in, const AdvantageConfig&, AdvantageOutput& out) {
  LAMINAR_RETURN_IF_ERROR(NeedScores(in, "reinforce_pp"));
  const size_t num_seqs = NumSequences(in);
  double sum = 0;
  for (float s : in.scores) sum += s;
  const double mean = num_seqs > 0 ? sum / static_cast<double>(num_seqs) : 0.0;
  std::vector<double> x(in.loss_mask.size(), 0.0);
  for (size_t b = 0; b < num_seqs; ++b) {
    for (int64_t t = in.seq_offsets[b]; t < in.seq_offsets[b + 1]; ++t) x[t] = in.scores[b] - mean;
  }
  Whiten(in.loss_mask, x);
  for (size_t t = 0; t < x.size(); ++t) out.advantages[t] = static_cast<float>(x[t]);
  return OkStatus();
}

Status Gae(const AdvantageInput& in, const AdvantageConfig& c, AdvantageOutput& out) {
  const size_t num_tokens = in.loss_mask.size();
  LAMINAR_RETURN_IF_ERROR(
      CheckSize(in.values.size(), num_tokens, "values", "gae needs V per token"));
  if (in.token_rewards.empty()) {
    LAMINAR_RETURN_IF_ERROR(NeedScores(in, "gae without token_rewards"));
  } else {
    LAMINAR_RETURN_IF_ERROR(
        CheckSize(in.token_rewards.size(), num_tokens, "token_rewards", "T, as loss_mask"));
  }
  std::vector<double> adv(num_tokens, 0.0);
  out.returns.assign(num_tokens, 0.0f);
  for (size_t b = 0; b < NumSequences(in); ++b) {
    double next_value = 0, next_adv = 0;
    bool last = true;  // the next masked token seen (backwards) is the sequence's last
    for (int64_t t = in.seq_offsets[b + 1] - 1; t >= in.seq_offsets[b]; --t) {
      if (in.loss_mask[t] == 0) continue;
      double reward = 0;
      if (!in.token_rewards.empty()) {
        reward = in.token_rewards[t];
      } else if (last) {
        reward = in.scores[b];
      }
      last = false;
      const double delta = reward + c.gamma * next_value - in.values[t];
      next_adv = delta + c.gamma * c.lambda * next_adv;
      next_value = in.values[t];
      adv[t] = next_adv;
      out.returns[t] = static_cast<float>(next_adv + in.values[t]);
    }
  }
  if (c.whiten) Whiten(in.loss_mask, adv);
  for (size_t t = 0; t < num_tokens; ++t) out.advantages[t] = static_cast<float>(adv[t]);
  return OkStatus();
}

const std::map<std::string, AdvantageFn, std::less<>>& Registry() {
  static const auto* registry =
      new std::map<std::string, AdvantageFn, std::less<>>{{"dr_grpo", &DrGrpo},
                                                          {"gae", &Gae},
                                                          {"grpo", &Grpo},
                                                          {"reinforce_pp", &ReinforcePlusPlus},
                                                          {"rloo", &Rloo}};
  return *registry;
}

Status CheckFinite(std::span<const float> values, std::span<const float> mask,
                   std::string_view field) {
  for (size_t i = 0; i < values.size(); ++i) {
    if ((mask.empty() || mask[i] != 0) && !std::isfinite(values[i])) {
      std::ostringstream msg;
      msg << "advantages: " << field << "[" << i << "] = " << values[i] << " is not finite";
      return InvalidArgumentError(msg.str());
    }
  }
  return OkStatus();
}

Status ValidateCommon(const AdvantageInput& in, const AdvantageConfig& c) {
  const size_t num_tokens = in.loss_mask.size();
  const auto& off = in.seq_offsets;
  if (off.empty() || off.front() != 0 || off.back() != static_cast<int64_t>(num_tokens)) {
    return InvalidArgumentError("advantages: seq_offsets must start at 0 and end at T = " +
                                std::to_string(num_tokens) + " (the length of loss_mask)");
  }
  for (size_t b = 0; b + 1 < off.size(); ++b) {
    if (off[b + 1] < off[b]) {
      return InvalidArgumentError("advantages: seq_offsets decrease at index " +
                                  std::to_string(b + 1));
    }
  }
  for (size_t t = 0; t < num_tokens; ++t) {
    if (in.loss_mask[t] != 0 && in.loss_mask[t] != 1) {
      return InvalidArgumentError("advantages: loss_mask[" + std::to_string(t) +
                                  "] = " + std::to_string(in.loss_mask[t]) + ", expected 0 or 1");
    }
  }
  LAMINAR_RETURN_IF_ERROR(CheckFinite(in.scores, {}, "scores"));
  if (in.token_rewards.size() == num_tokens) {
    LAMINAR_RETURN_IF_ERROR(CheckFinite(in.token_rewards, in.loss_mask, "token_rewards"));
  }
  if (in.values.size() == num_tokens) {
    LAMINAR_RETURN_IF_ERROR(CheckFinite(in.values, in.loss_mask, "values"));
  }
  if (!(c.eps >= 0 && std::isfinite(c.eps))) {
    return InvalidArgumentError("advantages: eps = " + std::to_string(c.eps) + ", expected >= 0");
  }
  if (!(c.gamma >= 0 && c.gamma <= 1) || !(c.lambda >= 0 && c.lambda <= 1)) {
    return InvalidArgumentError("advantages: gamma = " + std::to_string(c.gamma) +
                                " and lambda = " + std::to_string(c.lambda) +
                                " must lie in [0, 1]");
  }
  return OkStatus();
}

}  // namespace

StatusOr<AdvantageFn> FindAdvantageEstimator(std::string_view name) {
  auto it = Registry().find(name);
  if (it != Registry().end()) return it->second;
  std::string known;
  for (const auto& [n, fn] : Registry()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("advantages: estimator '" + std::string(name) +
                              "' is unknown; known: " + known);
}

std::vector<std::string> RegisteredAdvantageEstimators() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : Registry()) names.push_back(name);
  return names;
}

StatusOr<AdvantageOutput> ComputeAdvantages(const AdvantageInput& input,
                                            const AdvantageConfig& config) {
  LAMINAR_ASSIGN_OR_RETURN(const AdvantageFn estimator, FindAdvantageEstimator(config.estimator));
  LAMINAR_RETURN_IF_ERROR(ValidateCommon(input, config));
  AdvantageOutput out;
  out.advantages.assign(input.loss_mask.size(), 0.0f);
  LAMINAR_RETURN_IF_ERROR(estimator(input, config, out));
  return out;
}

}  // namespace laminar::trainer
