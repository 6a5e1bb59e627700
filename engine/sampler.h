// Token sampling with exact logprobs: temperature, top-k, top-p (nucleus) and min-p, with a seed
// per request so a request's tokens do not depend on what else shares the batch. The logprob
// recorded for a sampled token is under the exact distribution it was drawn from (after temperature
// and truncation), as the off-policy correction needs (DESIGN.md §3). Temperature 0 is greedy
// (logprob of the argmax under the untruncated temperature-1 distribution).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace laminar::engine {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off; keep tokens with p >= min_p * p_max
  uint64_t seed = 0;
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0;  // natural log, under the distribution sampled from
};

// A counter-free, portable RNG (xoshiro256**, Blackman & Vigna 2018) so a seed gives the same
// stream on every platform and standard library.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

// Per request; not thread-safe (owns its RNG).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  const SamplingParams& params() const { return params_; }
  // Draws from `logits` [V] (f32, unchanged).
  SampledToken Sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  Xoshiro256 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace laminar::engine
