// Sampler: truncation in the order temperature -> top-k -> top-p -> min-p (as vLLM and HF apply
// them), then one uniform draw against the renormalized distribution.
#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>

#include "kernels/cpu/vec_ops.h"

namespace laminar::engine {

Status SamplingParams::Validate() const {
  auto bad = [](const std::string& what, double value) {
    return InvalidArgumentError("sampling: " + what + ", got " + std::to_string(value));
  };
  // Written so that NaN fails each test.
  if (!(temperature >= 0.0f && std::isfinite(temperature))) {
    return bad("temperature must be finite and >= 0", temperature);
  }
  if (!(top_p >= 0.0f && top_p <= 1.0f)) return bad("top_p must be in [0, 1]", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p must be in [0, 1]", min_p);
  if (top_k < 0) return bad("top_k must be >= 0", top_k);
  if (logprobs < 0) return bad("logprobs must be >= 0", logprobs);
  return OkStatus();
}
namespace {

uint64_t SplitMix64(uint64_t* x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Whether `logits` holds a NaN or +inf (IEEE 754 binary32 bit patterns; -inf is a masked token,
// not an error). One branch-free pass the compiler vectorizes.
bool HasNanOrPosInf(std::span<const float> logits) {
  uint32_t bad = 0;
  for (float x : logits) {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    bad |= static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u) |
           static_cast<uint32_t>(u == 0x7f800000u);
  }
  return bad != 0;
}

}  // namespace

Xoshiro256::Xoshiro256(uint64_t seed) {
  for (auto& s : s_) s = SplitMix64(&seed);
}

Xoshiro256 Xoshiro256::FromState(const State& state) {
  Xoshiro256 g(0);
  for (int i = 0; i < 4; ++i) g.s_[i] = state[i];
  return g;
}

uint64_t Xoshiro256::Next() {
  uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

int64_t TokenDistribution::IndexOf(int32_t id) const {
  if (dense) return id >= 0 && id < std::ssize(ids) ? id : -1;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == id) return static_cast<int64_t>(i);
  }
  return -1;
}

// Kept whole: the per-token hot path, with its early returns (non-finite logits, greedy, no
// truncation) before the general sorted path.
void Sampler::Distribution(std::span<const float> logits, TokenDistribution* out) {
  const int64_t v = static_cast<int64_t>(logits.size());
  out->ids.clear();
  out->probs.clear();
  out->greedy_top.clear();
  if (HasNanOrPosInf(logits)) {
    // No distribution: a point mass whose logprob is NaN, which the rollout engine refuses.
    out->greedy = true;
    out->ids = {0};
    out->probs = {1.0};
    out->dense = false;
    out->greedy_logprob = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  out->greedy = params_.temperature <= 0.0f;
  if (out->greedy) {
    int64_t best = std::max_element(logits.begin(), logits.end()) - logits.begin();
    const double mx = logits[best];
    // The exponentials vectorized, into probs (V doubles kept for the sampler's life) as scratch.
    out->probs.resize(static_cast<size_t>(v));
    const double sum = kernels::cpu::ExpScaledShiftedF64(logits, 1.0, mx, out->probs);
    const double log_z = mx + std::log(sum);
    out->ids = {static_cast<int32_t>(best)};
    out->probs.assign(1, 1.0);
    out->dense = false;
    out->greedy_logprob = static_cast<float>(-std::log(sum));
    if (params_.logprobs > 0) {
      const int64_t k = std::min<int64_t>(params_.logprobs, v);
      std::vector<int32_t> ids(static_cast<size_t>(v));
      for (int64_t i = 0; i < v; ++i) ids[i] = static_cast<int32_t>(i);
      std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
      });
      for (int64_t i = 0; i < k; ++i)
        out->greedy_top.push_back({ids[i], static_cast<float>(double(logits[ids[i]]) - log_z)});
    }
    return;
  }
  const double inv_t = 1.0 / params_.temperature;
  std::vector<double>& p = out->probs;
  if ((params_.top_k <= 0 || params_.top_k >= v) && params_.top_p >= 1.0f &&
      params_.min_p <= 0.0f) {
    // No truncation (GRPO's usual T = 1): every token in id order, the exponentials vectorized.
    const double mx = double(*std::max_element(logits.begin(), logits.end())) * inv_t;
    p.resize(static_cast<size_t>(v));
    const double z = kernels::cpu::ExpScaledShiftedF64(logits, inv_t, mx, p);
    for (double& x : p) x /= z;
    out->ids.resize(static_cast<size_t>(v));
    std::iota(out->ids.begin(), out->ids.end(), 0);
    out->dense = true;
    return;
  }
  // Candidates sorted by logit, descending (ties by id), truncated by top-k.
  candidates_.resize(static_cast<size_t>(v));
  for (int64_t i = 0; i < v; ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  int64_t keep = v;
  if (params_.top_k > 0 && params_.top_k < v) {
    keep = params_.top_k;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), by_logit);
  } else {  // top-p or min-p
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(static_cast<size_t>(keep));
  double mx = -std::numeric_limits<double>::infinity();
  for (const auto& c : candidates_) mx = std::max(mx, double(c.first) * inv_t);
  p.resize(candidates_.size());
  double z = 0;
  for (size_t i = 0; i < candidates_.size(); ++i)
    z += (p[i] = std::exp(double(candidates_[i].first) * inv_t - mx));
  size_t n = candidates_.size();
  if (params_.top_p < 1.0f) {  // smallest prefix whose mass reaches top_p (sorted above)
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += p[i] / z;
      if (cum >= params_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {  // p[0] is the largest when sorted
    size_t m = 0;
    while (m < n && p[m] >= params_.min_p * p[0]) ++m;
    n = std::max<size_t>(m, 1);
  }
  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += p[i];
  p.resize(n);
  for (double& x : p) x /= mass;
  out->ids.resize(n);
  for (size_t i = 0; i < n; ++i) out->ids[i] = candidates_[i].second;
  out->dense = false;
}

size_t Sampler::DrawIndex(std::span<const double> weights) {
  double mass = 0;
  for (double w : weights) mass += w;
  const double r = rng_.Uniform() * mass;
  double cdf = 0;
  size_t pick = weights.size() - 1;
  while (pick > 0 && weights[pick] <= 0) --pick;
  for (size_t i = 0; i < weights.size(); ++i) {
    cdf += weights[i];
    if (r < cdf) return i;
  }
  return pick;
}

SampledToken Sampler::Record(const TokenDistribution& dist, size_t index) const {
  if (dist.greedy) return {dist.ids[0], dist.greedy_logprob, dist.greedy_top};
  const std::vector<double>& p = dist.probs;
  SampledToken out{dist.ids[index], static_cast<float>(std::log(p[index])), {}};
  if (params_.logprobs > 0) {
    const size_t n = p.size();
    const size_t k = std::min<size_t>(static_cast<size_t>(params_.logprobs), n);
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](size_t a, size_t b) {
      return p[a] > p[b] || (p[a] == p[b] && dist.ids[a] < dist.ids[b]);
    });
    for (size_t i = 0; i < k; ++i) {
      out.top.push_back({dist.ids[order[i]], static_cast<float>(std::log(p[order[i]]))});
    }
  }
  return out;
}

SampledToken Sampler::Sample(std::span<const float> logits) {
  Distribution(logits, &dist_);
  if (dist_.greedy) return Record(dist_, 0);
  return Record(dist_, DrawIndex(dist_.probs));
}

}  // namespace laminar::engine
