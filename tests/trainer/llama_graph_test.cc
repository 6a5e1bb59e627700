// The training graph: the whole model's gradient against central finite differences in f64 on
// tiny random configs; f32 against f64; recomputation and bf16 compute; agreement with the
// inference engine's logprobs; bad batches.
#include "trainer/llama_graph.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/llama_model.h"
#include "tests/model/random_weights.h"
#include "tests/trainer/grad_check.h"

namespace laminar::trainer {
namespace {

using testing::ExpectGradientMatches;
using testing::RandomUniform;

// Two sequences (5 and 4 tokens) and an empty one; targets are the next tokens, -1 on the first
// prompt token and at each sequence's end.
TrainBatch SmallBatch() {
  TrainBatch b;
  b.tokens = {1, 5, 9, 3, 7, 2, 30, 4, 11};
  b.targets = {-1, 9, 3, 7, -1, 30, 4, 11, -1};
  b.seq_offsets = {0, 5, 5, 9};
  return b;
}

struct GraphCase {
  const char* name;
  bool tied, bias, interleaved;
  double temperature = 1.0;  // logprobs of softmax(logits / temperature)
};

class GraphGradTest : public ::testing::TestWithParam<GraphCase> {};

TEST_P(GraphGradTest, WholeModelGradientMatchesFiniteDifferences) {
  auto config = laminar::testing::TinyLlamaConfig();
  config.num_hidden_layers = 1;
  config.tie_word_embeddings = GetParam().tied;
  config.attention_bias = GetParam().bias;
  config.rope_layout =
      GetParam().interleaved ? model::RopeLayout::kInterleaved : model::RopeLayout::kRotateHalf;
  auto set = ParameterSet::FromWeights(config, laminar::testing::RandomWeights(config, 3, 0.3f));
  ASSERT_TRUE(set.ok()) << set.status();
  std::vector<double> values(set->values().begin(), set->values().end());
  GraphOptions options;
  options.temperature = GetParam().temperature;
  LlamaGraph<double> graph(config, set->params(), options, nullptr);
  TrainBatch batch = SmallBatch();
  auto g_lp = RandomUniform(batch.tokens.size(), 4), g_ent = RandomUniform(batch.tokens.size(), 5);
  std::vector<double> lp, ent;
  auto loss = [&] {
    EXPECT_TRUE(graph.Forward(batch, values, &lp, &ent).ok());
    return testing::Dot(lp, g_lp) + testing::Dot(ent, g_ent);
  };
  loss();
  std::vector<double> grads(values.size(), 0.0);
  ASSERT_TRUE(graph.Backward(g_lp, g_ent, grads).ok());
  ExpectGradientMatches(values, loss, grads, GetParam().name, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Configs, GraphGradTest,
                         ::testing::Values(GraphCase{"untied", false, false, false},
                                           GraphCase{"tied_bias", true, true, false},
                                           GraphCase{"interleaved", false, false, true},
                                           GraphCase{"tied_temperature", true, false, false, 0.6}),
                         [](const auto& p) { return std::string(p.param.name); });

struct F32Run {
  std::vector<float> lp, ent, grads;
  size_t activation_bytes = 0;
};

F32Run RunF32(const model::ModelConfig& config, ParameterSet& set, const TrainBatch& batch,
              GraphOptions options, ThreadPool* pool) {
  LlamaGraph<float> graph(config, set.params(), options, pool);
  F32Run r;
  EXPECT_TRUE(graph.Forward(batch, set.values(), &r.lp, &r.ent).ok());
  r.activation_bytes = graph.activation_bytes();
  std::vector<float> g_lp(batch.tokens.size(), 0.f), g_ent(batch.tokens.size(), 0.f);
  for (size_t i = 0; i < g_lp.size(); ++i) {
    g_lp[i] = 0.1f * static_cast<float>(i % 5) - 0.2f;
    g_ent[i] = 0.05f * static_cast<float>(i % 3);
  }
  r.grads.assign(set.num_elements(), 0.f);
  EXPECT_TRUE(graph.Backward(g_lp, g_ent, r.grads).ok());
  return r;
}

TEST(LlamaGraphTest, FloatEqualsDoubleAndRecomputeIsExact) {
  auto config = laminar::testing::TinyLlamaConfig();
  config.attention_bias = true;
  auto set = ParameterSet::FromWeights(config, laminar::testing::RandomWeights(config, 8, 0.3f));
  ASSERT_TRUE(set.ok());
  TrainBatch batch = SmallBatch();
  ThreadPool pool(2);
  F32Run plain = RunF32(config, *set, batch, {}, &pool);
  GraphOptions rc;
  rc.recompute_activations = true;
  F32Run recomputed = RunF32(config, *set, batch, rc, &pool);
  EXPECT_LT(recomputed.activation_bytes, plain.activation_bytes);
  EXPECT_EQ(recomputed.lp, plain.lp);
  EXPECT_EQ(recomputed.grads, plain.grads);
  GraphOptions chunked;
  chunked.logits_chunk_rows = 2;
  F32Run small_chunks = RunF32(config, *set, batch, chunked, &pool);
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    ASSERT_NEAR(small_chunks.grads[i], plain.grads[i], 1e-6f) << i;
  }
  std::vector<double> values(set->values().begin(), set->values().end());
  LlamaGraph<double> graph(config, set->params(), {}, nullptr);
  std::vector<double> lp, ent;
  ASSERT_TRUE(graph.Forward(batch, values, &lp, &ent).ok());
  for (size_t i = 0; i < lp.size(); ++i) {
    EXPECT_NEAR(plain.lp[i], lp[i], 1e-5) << i;
    EXPECT_NEAR(plain.ent[i], ent[i], 1e-5) << i;
  }
}

TEST(LlamaGraphTest, Bf16ComputeRoundsOperandsButStaysClose) {
  auto config = laminar::testing::TinyLlamaConfig();
  auto set = ParameterSet::FromWeights(config, laminar::testing::RandomWeights(config, 9, 0.3f));
  ASSERT_TRUE(set.ok());
  TrainBatch batch = SmallBatch();
  F32Run f32 = RunF32(config, *set, batch, {}, nullptr);
  GraphOptions bf;
  bf.bf16_compute = true;
  F32Run bf16 = RunF32(config, *set, batch, bf, nullptr);
  double max_diff = 0;
  for (size_t i = 0; i < f32.lp.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(double(f32.lp[i]) - bf16.lp[i]));
  }
  EXPECT_GT(max_diff, 0.0);   // the rounding happened
  EXPECT_LT(max_diff, 0.05);  // bf16 has 8 bits of mantissa
}

// The trainer's logprobs equal those of the inference engine (the rollout's) on the same weights.
TEST(LlamaGraphTest, LogprobsEqualTheInferenceEngine) {
  auto config = laminar::testing::TinyLlamaConfig();
  config.tie_word_embeddings = true;
  auto weights = laminar::testing::RandomWeights(config, 10, 0.3f);
  auto set = ParameterSet::FromWeights(config, weights);
  ASSERT_TRUE(set.ok());
  TrainBatch batch = SmallBatch();
  F32Run run = RunF32(config, *set, batch, {}, nullptr);
  auto engine = engine::LlamaModel::Create(config, weights);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto cache = (*engine)->NewCache(3, 16);
  std::vector<engine::SequenceSpan> spans{{0, 0, 5}, {2, 0, 4}};
  std::vector<float> logits;
  ASSERT_TRUE(
      (*engine)->Forward(batch.tokens, spans, &cache, engine::LogitsFor::kAllTokens, &logits).ok());
  const int64_t vocab = config.vocab_size;
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    if (batch.targets[i] < 0) continue;
    std::vector<float> lp(1);
    std::vector<int32_t> tg{batch.targets[i]};
    kernels::ref::TokenLogprobs({&logits[i * vocab], static_cast<size_t>(vocab)}, tg, 1, vocab, lp);
    EXPECT_NEAR(run.lp[i], lp[0], 1e-5) << "token " << i;
  }
}

TEST(LlamaGraphTest, BadBatchesAreNamedErrors) {
  auto config = laminar::testing::TinyLlamaConfig();
  auto set = ParameterSet::FromWeights(config, laminar::testing::RandomWeights(config, 11));
  ASSERT_TRUE(set.ok());
  LlamaGraph<float> graph(config, set->params(), {}, nullptr);
  std::vector<float> lp, ent;
  auto expect_error = [&](TrainBatch b, const char* needle) {
    auto st = graph.Forward(b, set->values(), &lp, &ent);
    ASSERT_FALSE(st.ok()) << needle;
    EXPECT_NE(st.message().find(needle), std::string::npos) << st;
  };
  TrainBatch b = SmallBatch();
  b.tokens[2] = 32;
  expect_error(b, "token 2");
  b = SmallBatch();
  b.targets[1] = -2;
  expect_error(b, "target 1");
  b = SmallBatch();
  b.seq_offsets = {0, 5, 4, 9};
  expect_error(b, "decrease");
  b = SmallBatch();
  b.seq_offsets = {0, 5};
  expect_error(b, "offsets");
  b = SmallBatch();
  b.targets.pop_back();
  expect_error(b, "targets");
  b.tokens.assign(65, 1);
  b.targets.assign(65, -1);
  b.seq_offsets = {0, 65};
  expect_error(b, "context");
  std::vector<float> g(9);
  EXPECT_FALSE(graph.Backward(g, {}, set->grads()).ok());  // no successful Forward
}

}  // namespace
}  // namespace laminar::trainer
