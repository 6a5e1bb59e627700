// llama2.c sampler.
#include "engine/llama2c_sampler.h"

#include <algorithm>
#include <cmath>

namespace laminar::engine {

uint32_t Llama2cSampler::RandomU32() {
  rng_state_ ^= rng_state_ >> 12;
  rng_state_ ^= rng_state_ << 25;
  rng_state_ ^= rng_state_ >> 27;
  return static_cast<uint32_t>((rng_state_ * 0x2545F4914F6CDD1Dull) >> 32);
}

float Llama2cSampler::RandomF32() { return static_cast<float>(RandomU32() >> 8) / 16777216.0f; }

int32_t Llama2cSampler::SampleTopP(std::span<const float> probs, float coin) {
  const int64_t n = static_cast<int64_t>(probs.size());
  const float cutoff = (1.0f - topp_) / static_cast<float>(n - 1);
  candidates_.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (probs[i] >= cutoff) candidates_.emplace_back(probs[i], static_cast<int32_t>(i));
  }
  // run.c sorts with qsort (unstable); a stable sort by descending probability, ties by index,
  // picks the same tokens except among exactly equal probabilities.
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  float cumulative = 0.0f;
  size_t last = candidates_.size() - 1;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += candidates_[i].first;
    if (cumulative > topp_) {
      last = i;
      break;
    }
  }
  float r = coin * cumulative;
  float cdf = 0.0f;
  for (size_t i = 0; i <= last; ++i) {
    cdf += candidates_[i].first;
    if (r < cdf) return candidates_[i].second;
  }
  return candidates_[last].second;
}

int32_t Llama2cSampler::Sample(std::span<float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (temperature_ == 0.0f) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; ++i) {
      if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    }
    return best;
  }
  for (auto& l : logits) l /= temperature_;
  float mx = logits[0];
  for (float l : logits) mx = std::max(mx, l);
  float sum = 0.0f;
  for (auto& l : logits) {
    l = std::exp(l - mx);
    sum += l;
  }
  for (auto& l : logits) l /= sum;
  float coin = RandomF32();
  if (topp_ <= 0 || topp_ >= 1) {
    float cdf = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      cdf += logits[i];
      if (coin < cdf) return static_cast<int32_t>(i);
    }
    return static_cast<int32_t>(n - 1);
  }
  return SampleTopP(logits, coin);
}

}  // namespace laminar::engine
