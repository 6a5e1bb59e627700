// ParameterSet: built from a model's weights, flat layout, round trip to a WeightStore.
#include "trainer/parameters.h"

#include <gtest/gtest.h>

#include "tests/model/random_weights.h"

namespace laminar::trainer {
namespace {

TEST(ParameterSetTest, FromWeightsCopiesEveryTensorIntoOneFlatBuffer) {
  auto config = testing::TinyLlamaConfig();
  auto weights = testing::RandomWeights(config, 7);
  auto set = ParameterSet::FromWeights(config, weights);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->params().size(), weights.size());
  size_t total = 0;
  for (const auto& p : set->params()) {
    EXPECT_EQ(p.offset, total) << p.name;
    total += p.numel;
    auto view = weights.Get(p.name);
    ASSERT_TRUE(view.ok());
    auto v = set->Value(p.name);
    for (size_t i = 0; i < p.numel; ++i) ASSERT_EQ(v[i], view->data_as<const float>()[i]);
    EXPECT_EQ(p.decay, p.shape.rank() == 2) << p.name;
  }
  EXPECT_EQ(set->num_elements(), total);
  EXPECT_EQ(set->grads().size(), total);
  auto back = set->ToWeightStore();
  for (const auto& p : set->params()) {
    auto view = back.Get(p.name);
    ASSERT_TRUE(view.ok());
    EXPECT_EQ(view->shape(), p.shape);
    EXPECT_EQ(view->data_as<const float>()[0], set->Value(p.name)[0]);
  }
}

TEST(ParameterSetTest, WrongShapeOrMissingTensorIsNamed) {
  auto config = testing::TinyLlamaConfig();
  auto weights = testing::RandomWeights(config, 7);
  weights.Put("model.norm.weight", Tensor(DType::kF32, {3}));
  auto bad = ParameterSet::FromWeights(config, weights);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("model.norm.weight"), std::string::npos);
  auto tied = testing::TinyLlamaConfig();
  tied.tie_word_embeddings = true;
  auto missing = ParameterSet::FromWeights(config, testing::RandomWeights(tied, 7));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("lm_head.weight"), std::string::npos);
}

}  // namespace
}  // namespace laminar::trainer
