// Policy losses: validation, per-token terms of each registered loss, importance weights,
// aggregation weights and the assembly of loss, gradients and metrics. Everything in f64.
#include "trainer/losses.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

namespace laminar::trainer {
namespace {

constexpr double kMaxLogRatio = 20.0;      // every log-ratio is clamped to +-20 (verl)
constexpr double kGspoMaxLogRatio = 10.0;  // verl clamps GSPO's sequence log-ratio at 10
constexpr double kK3Bound = 10.0;          // verl clamps low_var_kl to [-10, 10]

// A clamped value and whether the clamp passes gradient (inside [lo, hi], as torch.clamp).
struct Clamped {
  double value;
  bool passes;
};
Clamped Clamp(double x, double lo, double hi) {
  return {std::clamp(x, lo, hi), x >= lo && x <= hi};
}

template <typename Map>
std::string KnownNames(const Map& registry) {
  std::string names;
  for (const auto& [name, fn] : registry) names += (names.empty() ? "" : ", ") + name;
  return names;
}

template <typename Map>
auto FindIn(const Map& registry, std::string_view name, std::string_view what)
    -> StatusOr<typename Map::mapped_type> {
  auto it = registry.find(name);
  if (it == registry.end()) {
    return InvalidArgumentError(std::string(what) + " '" + std::string(name) +
                                "' is unknown; known: " + KnownNames(registry));
  }
  return it->second;
}

// Masked tokens of sequence b.
size_t MaskedCount(const PolicyLossInput& in, size_t b) {
  size_t n = 0;
  for (int64_t t = in.seq_offsets[b]; t < in.seq_offsets[b + 1]; ++t) n += in.loss_mask[t] != 0;
  return n;
}
size_t NumSequences(const PolicyLossInput& in) { return in.seq_offsets.size() - 1; }

// ---- The registered policy losses ----

// PPO clip with clip-higher and dual clip; verl's compute_policy_loss_vanilla.
void VanillaLoss(const PolicyLossInput& in, const PolicyLossConfig& cfg, PgTokenTerms& terms) {
  const double lo = 1.0 - cfg.clip_ratio_low, hi = 1.0 + cfg.clip_ratio_high;
  for (size_t t = 0; t < in.logprobs.size(); ++t) {
    if (in.loss_mask[t] == 0) continue;
    const double adv = in.advantages[t];
    const Clamped log_ratio =
        Clamp(double{in.logprobs[t]} - in.old_logprobs[t], -kMaxLogRatio, kMaxLogRatio);
    const double ratio = std::exp(log_ratio.value);
    const double unclipped = -adv * ratio;
    const double clipped = -adv * std::clamp(ratio, lo, hi);
    // The clipped term exceeds the unclipped one only when the ratio is outside [lo, hi], where
    // the clipped term is constant.
    double loss = unclipped, grad = log_ratio.passes ? -adv * ratio : 0.0;
    if (clipped > unclipped) {
      loss = clipped;
      grad = 0;
      terms.clipped[t] = 1;
    }
    if (adv < 0 && cfg.clip_ratio_c > 0 && loss > -adv * cfg.clip_ratio_c) {
      loss = -adv * cfg.clip_ratio_c;
      grad = 0;
      terms.clipped_lower[t] = 1;
    }
    terms.loss[t] = loss;
    terms.grad[t] = grad;
  }
}

// GSPO in its token form (GSPO-token, arXiv 2507.18071 §4.3); verl's compute_policy_loss_gspo.
void GspoLoss(const PolicyLossInput& in, const PolicyLossConfig& cfg, PgTokenTerms& terms) {
  const double lo = 1.0 - cfg.clip_ratio_low, hi = 1.0 + cfg.clip_ratio_high;
  for (size_t b = 0; b < NumSequences(in); ++b) {
    const int64_t begin = in.seq_offsets[b], end = in.seq_offsets[b + 1];
    double sum = 0;
    size_t n = 0;
    for (int64_t t = begin; t < end; ++t) {
      if (in.loss_mask[t] == 0) continue;
      sum += double{in.logprobs[t]} - in.old_logprobs[t];
      ++n;
    }
    if (n == 0) continue;
    const Clamped log_ratio = Clamp(sum / static_cast<double>(n), -kMaxLogRatio, kGspoMaxLogRatio);
    const double ratio = std::exp(log_ratio.value);
    for (int64_t t = begin; t < end; ++t) {
      if (in.loss_mask[t] == 0) continue;
      const double adv = in.advantages[t];
      const double unclipped = -adv * ratio, clipped = -adv * std::clamp(ratio, lo, hi);
      if (clipped > unclipped) {
        terms.loss[t] = clipped;
        terms.clipped[t] = 1;
      } else {
        terms.loss[t] = unclipped;
        terms.grad[t] = log_ratio.passes ? -adv * ratio : 0.0;
      }
    }
  }
}

// Plain policy gradient: -A * log pi.
void PgLoss(const PolicyLossInput& in, const PolicyLossConfig&, PgTokenTerms& terms) {
  for (size_t t = 0; t < in.logprobs.size(); ++t) {
    if (in.loss_mask[t] == 0) continue;
    terms.loss[t] = -double{in.advantages[t]} * in.logprobs[t];
    terms.grad[t] = -double{in.advantages[t]};
  }
}

const std::map<std::string, PolicyLossFn, std::less<>>& PolicyLossRegistry() {
  static const auto* registry = new std::map<std::string, PolicyLossFn, std::less<>>{
      {"gspo", &GspoLoss}, {"pg", &PgLoss}, {"vanilla", &VanillaLoss}};
  return *registry;
}

// ---- KL estimators ----

KlTerm KlK1(double logprob, double ref) {
  const Clamped x = Clamp(logprob - ref, -kMaxLogRatio, kMaxLogRatio);
  return {x.value, x.passes ? 1.0 : 0.0};
}
KlTerm KlK2(double logprob, double ref) {
  const Clamped x = Clamp(logprob - ref, -kMaxLogRatio, kMaxLogRatio);
  return {0.5 * x.value * x.value, x.passes ? x.value : 0.0};
}
KlTerm KlK3(double logprob, double ref) {
  const Clamped x = Clamp(logprob - ref, -kMaxLogRatio, kMaxLogRatio);
  const double r = std::exp(-x.value);  // pi_ref / pi
  const Clamped k3 = Clamp(r - 1.0 + x.value, -kK3Bound, kK3Bound);
  return {k3.value, x.passes && k3.passes ? 1.0 - r : 0.0};
}
KlTerm KlAbs(double logprob, double ref) {
  const Clamped x = Clamp(logprob - ref, -kMaxLogRatio, kMaxLogRatio);
  const double sign = x.value > 0 ? 1.0 : (x.value < 0 ? -1.0 : 0.0);
  return {std::abs(x.value), x.passes ? sign : 0.0};
}

const std::map<std::string, KlEstimatorFn, std::less<>>& KlRegistry() {
  static const auto* registry = new std::map<std::string, KlEstimatorFn, std::less<>>{
      {"abs", &KlAbs}, {"k1", &KlK1},  {"k2", &KlK2},        {"k3", &KlK3},
      {"kl", &KlK1},   {"mse", &KlK2}, {"low_var_kl", &KlK3}};
  return *registry;
}

// ---- Validation ----

Status CheckLength(std::span<const float> values, size_t num_tokens, std::string_view field,
                   bool optional) {
  if (optional && values.empty()) return OkStatus();
  if (values.size() != num_tokens) {
    std::ostringstream msg;
    msg << "policy loss: " << field << " has " << values.size()
        << " entries, expected T = " << num_tokens << " (the length of logprobs)";
    return InvalidArgumentError(msg.str());
  }
  return OkStatus();
}

Status CheckFiniteOnMask(std::span<const float> values, std::span<const float> mask,
                         std::string_view field) {
  for (size_t t = 0; t < values.size(); ++t) {
    if (mask[t] != 0 && !std::isfinite(values[t])) {
      std::ostringstream msg;
      msg << "policy loss: " << field << "[" << t << "] = " << values[t]
          << " on a masked token is not finite";
      return InvalidArgumentError(msg.str());
    }
  }
  return OkStatus();
}

Status ValidateOffsets(std::span<const int64_t> offsets, size_t num_tokens) {
  if (offsets.empty() || offsets.front() != 0 ||
      offsets.back() != static_cast<int64_t>(num_tokens)) {
    std::ostringstream msg;
    msg << "policy loss: seq_offsets must start at 0 and end at T = " << num_tokens << ", got "
        << offsets.size() << " offsets"
        << (offsets.empty() ? "" : " ending at " + std::to_string(offsets.back()));
    return InvalidArgumentError(msg.str());
  }
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    if (offsets[b + 1] < offsets[b]) {
      return InvalidArgumentError("policy loss: seq_offsets decrease at index " +
                                  std::to_string(b + 1));
    }
  }
  return OkStatus();
}

Status ValidateConfig(const PolicyLossConfig& c) {
  auto bad = [](const std::string& what) { return InvalidArgumentError("policy loss: " + what); };
  if (!(c.clip_ratio_low >= 0 && c.clip_ratio_low < 1)) {
    return bad("clip_ratio_low = " + std::to_string(c.clip_ratio_low) + ", expected [0, 1)");
  }
  if (!(c.clip_ratio_high >= 0 && std::isfinite(c.clip_ratio_high))) {
    return bad("clip_ratio_high = " + std::to_string(c.clip_ratio_high) + ", expected >= 0");
  }
  if (!(c.clip_ratio_c == 0 || (c.clip_ratio_c > 1 && std::isfinite(c.clip_ratio_c)))) {
    return bad("clip_ratio_c = " + std::to_string(c.clip_ratio_c) + ", expected > 1 or 0 (off)");
  }
  if (!(c.is_cap > 0 && std::isfinite(c.is_cap))) {
    return bad("is_cap = " + std::to_string(c.is_cap) + ", expected > 0");
  }
  if (!(c.kl_coef >= 0 && std::isfinite(c.kl_coef))) {
    return bad("kl_coef = " + std::to_string(c.kl_coef) + ", expected >= 0");
  }
  if (!std::isfinite(c.entropy_coef)) return bad("entropy_coef is not finite");
  if (c.agg == "seq-mean-token-sum-norm" &&
      !(c.loss_scale_factor > 0 && std::isfinite(c.loss_scale_factor))) {
    return bad(
        "agg seq-mean-token-sum-norm needs loss_scale_factor > 0 (e.g. the maximum "
        "response length), got " +
        std::to_string(c.loss_scale_factor));
  }
  if (c.is_level != "token" && c.is_level != "sequence" && c.is_level != "geometric" &&
      c.is_level != "none") {
    return bad("is_level '" + c.is_level + "' is unknown; known: geometric, none, sequence, token");
  }
  LAMINAR_RETURN_IF_ERROR(FindKlEstimator(c.kl_estimator).status());
  return FindPolicyLoss(c.loss).status();
}

Status ValidateInput(const PolicyLossInput& in, const PolicyLossConfig& c) {
  const size_t n = in.logprobs.size();
  LAMINAR_RETURN_IF_ERROR(CheckLength(in.old_logprobs, n, "old_logprobs", false));
  LAMINAR_RETURN_IF_ERROR(CheckLength(in.behavior_logprobs, n, "behavior_logprobs", true));
  LAMINAR_RETURN_IF_ERROR(CheckLength(in.ref_logprobs, n, "ref_logprobs", true));
  LAMINAR_RETURN_IF_ERROR(CheckLength(in.entropy, n, "entropy", true));
  LAMINAR_RETURN_IF_ERROR(CheckLength(in.advantages, n, "advantages", false));
  LAMINAR_RETURN_IF_ERROR(CheckLength(in.loss_mask, n, "loss_mask", false));
  LAMINAR_RETURN_IF_ERROR(ValidateOffsets(in.seq_offsets, n));
  if (c.kl_coef != 0 && in.ref_logprobs.empty()) {
    return InvalidArgumentError("policy loss: kl_coef != 0 needs ref_logprobs");
  }
  if (c.entropy_coef != 0 && in.entropy.empty()) {
    return InvalidArgumentError("policy loss: entropy_coef != 0 needs entropy");
  }
  for (size_t t = 0; t < n; ++t) {
    if (in.loss_mask[t] != 0 && in.loss_mask[t] != 1) {
      return InvalidArgumentError("policy loss: loss_mask[" + std::to_string(t) +
                                  "] = " + std::to_string(in.loss_mask[t]) + ", expected 0 or 1");
    }
  }
  const std::pair<std::span<const float>, const char*> fields[] = {
      {in.logprobs, "logprobs"},
      {in.old_logprobs, "old_logprobs"},
      {in.behavior_logprobs, "behavior_logprobs"},
      {in.ref_logprobs, "ref_logprobs"},
      {in.entropy, "entropy"},
      {in.advantages, "advantages"}};
  for (const auto& [values, name] : fields) {
    LAMINAR_RETURN_IF_ERROR(CheckFiniteOnMask(values, in.loss_mask, name));
  }
  for (const auto& [value, name] : {std::pair{in.global_num_tokens, "global_num_tokens"},
                                    std::pair{in.global_num_sequences, "global_num_sequences"}}) {
    if (!(value >= 0 && std::isfinite(value))) {
      return InvalidArgumentError(std::string("policy loss: ") + name + " = " +
                                  std::to_string(value) + ", expected >= 0 (0 = own count)");
    }
  }
  return OkStatus();
}

// ---- Weights ----

// The normalizer actually used: the global count, or this input's own when it is 0.
StatusOr<double> Normalizer(double global, size_t own, std::string_view field) {
  if (global == 0) return static_cast<double>(own);
  if (global < static_cast<double>(own)) {
    std::ostringstream msg;
    msg << "policy loss: " << field << " = " << global << " is below this input's own count "
        << own;
    return InvalidArgumentError(msg.str());
  }
  return global;
}

// Aggregation weights a_t [T] (0 off the mask), see ComputePolicyLoss.
std::vector<double> AggWeights(const PolicyLossInput& in, const PolicyLossConfig& c,
                               double num_tokens, double num_sequences) {
  std::vector<double> a(in.logprobs.size(), 0.0);
  for (size_t b = 0; b < NumSequences(in); ++b) {
    const size_t n = MaskedCount(in, b);
    if (n == 0) continue;
    double w = 0;
    if (c.agg == "token-mean") {
      w = 1.0 / num_tokens;
    } else if (c.agg == "seq-mean-token-sum") {
      w = 1.0 / num_sequences;
    } else if (c.agg == "seq-mean-token-mean") {
      w = 1.0 / (num_sequences * static_cast<double>(n));
    } else {  // seq-mean-token-sum-norm (validated)
      w = 1.0 / c.loss_scale_factor;
    }
    for (int64_t t = in.seq_offsets[b]; t < in.seq_offsets[b + 1]; ++t) {
      if (in.loss_mask[t] != 0) a[t] = w;
    }
  }
  return a;
}

// Truncated importance weights min(pi_old / mu, cap) [T]; 1 everywhere when off.
std::vector<double> ImportanceWeights(const PolicyLossInput& in, const PolicyLossConfig& c) {
  std::vector<double> w(in.logprobs.size(), 1.0);
  if (in.behavior_logprobs.empty() || c.is_level == "none") return w;
  auto log_ratio = [&](size_t t) { return double{in.old_logprobs[t]} - in.behavior_logprobs[t]; };
  auto weight = [&](double lr) {
    return std::min(std::exp(std::clamp(lr, -kMaxLogRatio, kMaxLogRatio)), c.is_cap);
  };
  for (size_t b = 0; b < NumSequences(in); ++b) {
    const int64_t begin = in.seq_offsets[b], end = in.seq_offsets[b + 1];
    if (c.is_level == "token") {
      for (int64_t t = begin; t < end; ++t) {
        if (in.loss_mask[t] != 0) w[t] = weight(log_ratio(t));
      }
      continue;
    }
    double sum = 0;
    size_t n = 0;
    for (int64_t t = begin; t < end; ++t) {
      if (in.loss_mask[t] == 0) continue;
      sum += log_ratio(t);
      ++n;
    }
    if (n == 0) continue;
    const double seq_weight = weight(c.is_level == "sequence" ? sum : sum / static_cast<double>(n));
    for (int64_t t = begin; t < end; ++t) w[t] = seq_weight;
  }
  return w;
}

bool KnownAgg(std::string_view agg) {
  return agg == "token-mean" || agg == "seq-mean-token-sum" || agg == "seq-mean-token-mean" ||
         agg == "seq-mean-token-sum-norm";
}

// Aggregated terms and metric sums over the masked tokens.
struct Sums {
  double pg_loss = 0, kl_loss = 0, entropy = 0;
  double clipped = 0, clipped_lower = 0, ppo_kl = 0, rollout_kl = 0, is_weight = 0;
  double is_clipped = 0;  // tokens whose truncated IS weight hit is_cap
};

// Combines the per-token terms with the aggregation weights `agg` and importance weights `is` into
// the gradients of `out` and returns the sums the loss and metrics are made of.
Sums Assemble(const PolicyLossInput& in, const PolicyLossConfig& config, const PgTokenTerms& terms,
              const std::vector<double>& agg, const std::vector<double>& is,
              PolicyLossOutput& out) {
  const KlEstimatorFn kl =
      in.ref_logprobs.empty() ? nullptr : *FindKlEstimator(config.kl_estimator);
  const size_t num_tokens = in.logprobs.size();
  out.grad_logprobs.assign(num_tokens, 0.0f);
  out.grad_entropy.assign(num_tokens, 0.0f);
  Sums s;
  for (size_t t = 0; t < num_tokens; ++t) {
    if (in.loss_mask[t] == 0) continue;
    double grad = agg[t] * is[t] * terms.grad[t];
    s.pg_loss += agg[t] * is[t] * terms.loss[t];
    if (kl != nullptr) {
      const KlTerm k = kl(in.logprobs[t], in.ref_logprobs[t]);
      s.kl_loss += agg[t] * k.value;
      grad += config.kl_coef * agg[t] * k.grad;
    }
    if (!in.entropy.empty()) {
      s.entropy += agg[t] * in.entropy[t];
      out.grad_entropy[t] = static_cast<float>(-config.entropy_coef * agg[t]);
    }
    out.grad_logprobs[t] = static_cast<float>(grad);
    s.clipped += terms.clipped[t];
    s.clipped_lower += terms.clipped_lower[t];
    s.ppo_kl +=
        std::clamp(double{in.old_logprobs[t]} - in.logprobs[t], -kMaxLogRatio, kMaxLogRatio);
    if (!in.behavior_logprobs.empty()) {
      s.rollout_kl += double{in.behavior_logprobs[t]} - in.old_logprobs[t];
    }
    s.is_weight += is[t];
    s.is_clipped +=
        !in.behavior_logprobs.empty() && config.is_level != "none" && is[t] >= config.is_cap;
  }
  return s;
}

}  // namespace

StatusOr<PolicyLossFn> FindPolicyLoss(std::string_view name) {
  return FindIn(PolicyLossRegistry(), name, "policy loss");
}

std::vector<std::string> RegisteredPolicyLosses() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : PolicyLossRegistry()) names.push_back(name);
  return names;
}

StatusOr<KlEstimatorFn> FindKlEstimator(std::string_view name) {
  return FindIn(KlRegistry(), name, "kl_estimator");
}

std::vector<std::string> RegisteredKlEstimators() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : KlRegistry()) names.push_back(name);
  return names;
}

Status ValidatePolicyLossConfig(const PolicyLossConfig& config) {
  if (!KnownAgg(config.agg)) {
    return InvalidArgumentError("policy loss: agg '" + config.agg +
                                "' is unknown; known: seq-mean-token-mean, seq-mean-token-sum, "
                                "seq-mean-token-sum-norm, token-mean");
  }
  return ValidateConfig(config);
}

StatusOr<PolicyLossOutput> ComputePolicyLoss(const PolicyLossInput& in,
                                             const PolicyLossConfig& config) {
  LAMINAR_RETURN_IF_ERROR(ValidatePolicyLossConfig(config));
  LAMINAR_RETURN_IF_ERROR(ValidateInput(in, config));
  size_t own_tokens = 0, own_sequences = 0;
  for (size_t b = 0; b < NumSequences(in); ++b) {
    const size_t n = MaskedCount(in, b);
    own_tokens += n;
    own_sequences += n > 0;
  }
  LAMINAR_ASSIGN_OR_RETURN(const double token_norm,
                           Normalizer(in.global_num_tokens, own_tokens, "global_num_tokens"));
  LAMINAR_ASSIGN_OR_RETURN(const double seq_norm, Normalizer(in.global_num_sequences, own_sequences,
                                                             "global_num_sequences"));

  const size_t num_tokens = in.logprobs.size();
  PgTokenTerms terms;
  terms.loss.assign(num_tokens, 0.0);
  terms.grad.assign(num_tokens, 0.0);
  terms.clipped.assign(num_tokens, 0);
  terms.clipped_lower.assign(num_tokens, 0);
  (*FindPolicyLoss(config.loss))(in, config, terms);
  PolicyLossOutput out;
  const Sums sums = Assemble(in, config, terms, AggWeights(in, config, token_norm, seq_norm),
                             ImportanceWeights(in, config), out);
  out.loss = sums.pg_loss + config.kl_coef * sums.kl_loss - config.entropy_coef * sums.entropy;
  // Token means are shares of the (global) token count; 0 when there are no masked tokens.
  auto token_mean = [&](double sum) { return token_norm > 0 ? sum / token_norm : 0.0; };
  out.metrics["actor/pg_loss"] = sums.pg_loss;
  out.metrics["actor/pg_clipfrac"] = token_mean(sums.clipped);
  out.metrics["actor/pg_clipfrac_lower"] = token_mean(sums.clipped_lower);
  out.metrics["actor/ppo_kl"] = token_mean(sums.ppo_kl);
  if (!in.entropy.empty()) out.metrics["actor/entropy"] = sums.entropy;
  if (!in.ref_logprobs.empty()) out.metrics["actor/kl_loss"] = sums.kl_loss;
  if (!in.behavior_logprobs.empty()) {
    out.metrics["rollout_corr/kl"] = token_mean(sums.rollout_kl);
    if (config.is_level != "none") {
      out.metrics["rollout_corr/is_weight_mean"] = token_mean(sums.is_weight);
      out.metrics["rollout_corr/is_clipfrac"] = token_mean(sums.is_clipped);
    }
  }
  return out;
}

}  // namespace laminar::trainer
