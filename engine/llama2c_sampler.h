// llama2.c's sampler (karpathy/llama2.c run.c), reproduced exactly so that its published goldens
// can be checked: an xorshift64* coin per sampled token, f32 softmax after dividing the logits by
// the temperature, multinomial sampling by CDF, or its top-p cut (candidates below
// (1 - topp) / (V - 1) dropped, the rest sorted by probability, cut where the running sum first
// exceeds topp). Temperature 0 is argmax (first maximum).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace laminar::engine {

// Not thread-safe (owns the RNG state).
class Llama2cSampler {
 public:
  Llama2cSampler(float temperature, float topp, uint64_t seed)
      : temperature_(temperature), topp_(topp), rng_state_(seed) {}

  // Samples a token id from `logits` [V] (modified in place, as run.c does).
  int32_t Sample(std::span<float> logits);

  // run.c's random_u32 / random_f32 (xorshift64*), exposed for tests.
  uint32_t RandomU32();
  float RandomF32();

 private:
  int32_t SampleTopP(std::span<const float> probs, float coin);
  float temperature_;
  float topp_;
  uint64_t rng_state_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace laminar::engine
