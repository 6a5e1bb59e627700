// Token sampling with exact logprobs: temperature, top-k, top-p (nucleus) and min-p, with a seed
// per request so a request's tokens do not depend on what else shares the batch. The logprob
// recorded for a sampled token is under the exact distribution it was drawn from (after temperature
// and truncation), as the off-policy correction needs (docs/architecture.md). Temperature 0 is
// greedy (logprob of the argmax under the untruncated temperature-1 distribution, and top logprobs
// of that distribution).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace laminar::engine {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off; keep tokens with p >= min_p * p_max
  uint64_t seed = 0;
  // Top logprobs to record per sampled token (vLLM's `logprobs`); 0: none.
  int32_t logprobs = 0;
  // InvalidArgument naming the first bad field: temperature must be finite and >= 0, top_p in
  // [0, 1], min_p in [0, 1] (NaN fails every range), top_k and logprobs >= 0.
  Status Validate() const;
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampledToken {
  int32_t id = 0;
  float logprob = 0;  // natural log, under the distribution sampled from
  // The min(params.logprobs, tokens kept by truncation) most likely tokens of that same
  // distribution, most likely first (ties by id); empty when params.logprobs == 0.
  std::vector<TokenLogprob> top;
};

// A counter-free, portable RNG (xoshiro256**, Blackman & Vigna 2018) so a seed gives the same
// stream on every platform and standard library.
class Xoshiro256 {
 public:
  using State = std::array<uint64_t, 4>;
  explicit Xoshiro256(uint64_t seed);
  // Resumes a generator from state(); the stream continues exactly where it was.
  static Xoshiro256 FromState(const State& state);
  State state() const { return {s_[0], s_[1], s_[2], s_[3]}; }
  uint64_t Next();
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

// The exact distribution a Sampler draws a token from, for one row of logits: the tokens kept
// after temperature and truncation with their probabilities. Speculative decoding verifies drafted
// tokens against it (rollout/speculation/draft_tree.h).
struct TokenDistribution {
  bool greedy = false;        // temperature 0: a point mass on ids[0], the argmax
  std::vector<int32_t> ids;   // kept tokens; when `dense`, every token with ids[i] == i
  std::vector<double> probs;  // [ids.size()], summing to 1
  bool dense = false;
  float greedy_logprob = 0;  // greedy: the argmax's log-softmax at temperature 1 (recorded)
  std::vector<TokenLogprob> greedy_top;  // greedy: top logprobs at temperature 1
  // Index of `id` in ids, or -1 when truncated away.
  int64_t IndexOf(int32_t id) const;
  double Prob(int32_t id) const {
    const int64_t i = IndexOf(id);
    return i < 0 ? 0.0 : probs[static_cast<size_t>(i)];
  }
};

// Per request; not thread-safe (owns its RNG).
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  // A sampler that continues another's stream (request migration): `rng` is its rng_state().
  Sampler(const SamplingParams& params, const Xoshiro256::State& rng)
      : params_(params), rng_(Xoshiro256::FromState(rng)) {}
  const SamplingParams& params() const { return params_; }
  Xoshiro256::State rng_state() const { return rng_.state(); }
  // Draws from `logits` [V] (f32, unchanged).
  SampledToken Sample(std::span<const float> logits);

  // The distribution Sample would draw from for `logits` [V] (no RNG use). Logits with a NaN or
  // +inf (weights or activations that overflowed) give a greedy point mass on token 0 whose
  // logprob is NaN: every token recorded from it says so.
  void Distribution(std::span<const float> logits, TokenDistribution* out);
  // Draws an index of `weights` [n] (unnormalized, >= 0, positive sum) by its weight, with one
  // uniform of this sampler's stream; the last positive one on rounding.
  size_t DrawIndex(std::span<const double> weights);
  // One uniform in [0, 1) from this sampler's stream (speculative acceptance tests).
  double Uniform() { return rng_.Uniform(); }
  // The record of emitting token dist.ids[index] drawn from `dist`: its logprob under `dist`
  // (greedy: the temperature-1 logprob) and, when params().logprobs > 0, the top of `dist`.
  SampledToken Record(const TokenDistribution& dist, size_t index) const;

 private:
  SamplingParams params_;
  Xoshiro256 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  TokenDistribution dist_;  // Sample's, reused: no allocation per token
};

}  // namespace laminar::engine
