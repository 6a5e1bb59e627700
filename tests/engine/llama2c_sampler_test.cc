// llama2.c sampler: RNG stream, argmax, multinomial and top-p behaviour.
#include "engine/llama2c_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace laminar::engine {
namespace {

TEST(Llama2cSamplerTest, XorshiftStreamMatchesHandComputation) {
  Llama2cSampler s(1.0f, 1.0f, 42);
  uint64_t st = 42;
  for (int i = 0; i < 5; ++i) {
    st ^= st >> 12;
    st ^= st << 25;
    st ^= st >> 27;
    uint32_t want = static_cast<uint32_t>((st * 0x2545F4914F6CDD1Dull) >> 32);
    EXPECT_EQ(s.RandomU32(), want);
  }
  float f = s.RandomF32();
  EXPECT_GE(f, 0.0f);
  EXPECT_LT(f, 1.0f);
}

TEST(Llama2cSamplerTest, ArgmaxTakesFirstMaximum) {
  Llama2cSampler s(0.0f, 0.9f, 1);
  std::vector<float> logits = {1, 3, 3, 2};
  EXPECT_EQ(s.Sample(logits), 1);
}

TEST(Llama2cSamplerTest, MultinomialAndTopPFollowTheCoin) {
  // Two samplers with the same seed see the same coin; compute it from a twin.
  for (float topp : {1.0f, 0.5f}) {
    Llama2cSampler twin(1.0f, topp, 7), s(1.0f, topp, 7);
    float coin = twin.RandomF32();
    std::vector<float> logits = {std::log(0.1f), std::log(0.6f), std::log(0.3f)};
    int32_t got = s.Sample(logits);
    int32_t want;
    if (topp >= 1) {
      want = coin < 0.1f ? 0 : coin < 0.7f ? 1 : 2;
    } else {
      // Sorted: 0.6 (id 1) already exceeds topp=0.5, so only id 1 remains.
      want = 1;
    }
    EXPECT_EQ(got, want) << "topp " << topp << " coin " << coin;
  }
}

}  // namespace
}  // namespace laminar::engine
