// The trainer on the real stories260K model: loss, logprobs and parameter gradients on a fixed
// batch against an independent float64 PyTorch implementation (tests/data golden from
// scripts/trainer_golden.py), and a few hundred SGD steps driving the loss on that batch near 0.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "tests/test_util.h"
#include "trainer/llama_graph.h"
#include "trainer/losses.h"
#include "trainer/optimizer.h"

namespace laminar::trainer {
namespace {

struct Golden {
  nlohmann::json json;
  TrainBatch batch;
  std::vector<float> mask;
};

Golden LoadGolden() {
  Golden g;
  auto text = ReadFileToString(std::string(LAMINAR_SOURCE_DIR) +
                               "/tests/data/stories260k_train_golden.json");
  EXPECT_TRUE(text.ok()) << text.status();
  g.json = nlohmann::json::parse(*text);
  for (const auto& seq : g.json["sequences"]) {
    g.batch.seq_offsets.push_back(g.batch.num_tokens());
    std::vector<int32_t> ids = seq.get<std::vector<int32_t>>();
    for (size_t i = 0; i < ids.size(); ++i) {
      g.batch.tokens.push_back(ids[i]);
      g.batch.targets.push_back(i + 1 < ids.size() ? ids[i + 1] : -1);
    }
  }
  g.batch.seq_offsets.push_back(g.batch.num_tokens());
  for (const auto& m : g.json["loss_mask"]) g.mask.push_back(m.get<float>());
  return g;
}

StatusOr<ParameterSet> LoadParams(const std::string& path, model::ModelConfig* config) {
  model::WeightStore weights;
  LAMINAR_ASSIGN_OR_RETURN(model::Checkpoint ckpt, model::LoadCheckpoint(path));
  *config = ckpt.config;
  weights = std::move(ckpt.weights);
  return ParameterSet::FromWeights(*config, weights);
}

// Token-mean negative logprob over the mask (the "pg" loss with advantage 1) and its gradient.
PolicyLossOutput NllLoss(const Golden& g, const std::vector<float>& logprobs) {
  std::vector<float> ones(logprobs.size(), 1.f);
  PolicyLossInput in;
  in.logprobs = logprobs;
  in.old_logprobs = logprobs;
  in.advantages = ones;
  in.loss_mask = g.mask;
  in.seq_offsets = g.batch.seq_offsets;
  PolicyLossConfig config;
  config.loss = "pg";
  config.is_level = "none";
  auto out = ComputePolicyLoss(in, config);
  EXPECT_TRUE(out.ok()) << out.status();
  return *out;
}

TEST(Stories260KTrainTest, LossLogprobsAndGradientsMatchAnIndependentImplementation) {
  LAMINAR_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  model::ModelConfig config;
  auto params = LoadParams(bin, &config);
  ASSERT_TRUE(params.ok()) << params.status();
  Golden g = LoadGolden();
  ThreadPool pool(2);
  LlamaGraph<float> graph(config, params->params(), {}, &pool);
  std::vector<float> lp, ent;
  ASSERT_TRUE(graph.Forward(g.batch, params->values(), &lp, &ent).ok());
  const auto& want_lp = g.json["logprobs"];
  for (size_t i = 0; i < lp.size(); ++i) {
    EXPECT_NEAR(lp[i], want_lp[i].get<double>(), 2e-5) << "token " << i;
  }
  PolicyLossOutput loss = NllLoss(g, lp);
  EXPECT_NEAR(loss.loss, g.json["loss"].get<double>(), 1e-5);
  params->ZeroGrad();
  ASSERT_TRUE(graph.Backward(loss.grad_logprobs, {}, params->grads()).ok());
  // Tolerance: f32 forward/backward against f64, relative to each tensor's gradient norm.
  for (const auto& [name, want] : g.json["grads"].items()) {
    auto grad = params->Grad(name);
    double norm = 0, sum = 0;
    for (float x : grad) {
      norm += double(x) * x;
      sum += x;
    }
    norm = std::sqrt(norm);
    const double want_norm = want["norm"].get<double>();
    EXPECT_NEAR(norm, want_norm, 1e-4 * want_norm + 1e-7) << name;
    EXPECT_NEAR(sum, want["sum"].get<double>(), 1e-4 * want_norm * std::sqrt(grad.size()) + 1e-7)
        << name;
    for (size_t k = 0; k < want["index"].size(); ++k) {
      const size_t idx = want["index"][k].get<size_t>();
      EXPECT_NEAR(grad[idx], want["values"][k].get<double>(), 1e-4 * want_norm + 1e-7)
          << name << "[" << idx << "]";
    }
  }
}

// A few hundred plain SGD steps on a fixed batch drive the synthetic model's loss near zero: the
// engine learns.
TEST(TinyModelTrainTest, SgdOnAFixedBatchDrivesTheLossNearZero) {
  const std::string bin = ::laminar::testing::TinyModel();
  model::ModelConfig config;
  auto params = LoadParams(bin, &config);
  ASSERT_TRUE(params.ok()) << params.status();
  Golden g = LoadGolden();
  // A batch the model does not already predict: the second sequence's tokens reversed.
  for (int64_t i = g.batch.seq_offsets[1]; i < g.batch.num_tokens(); ++i) {
    g.batch.tokens[i] = g.json["sequences"][1][g.batch.num_tokens() - 1 - i].get<int32_t>();
  }
  for (int64_t i = g.batch.seq_offsets[1]; i + 1 < g.batch.num_tokens(); ++i) {
    g.batch.targets[i] = g.batch.tokens[i + 1];
  }
  // The golden batch's ids are stories260K's (vocabulary 512); fold them into this model's.
  for (int32_t& t : g.batch.tokens) t %= static_cast<int32_t>(config.vocab_size);
  for (int32_t& t : g.batch.targets) {
    if (t >= 0) t %= static_cast<int32_t>(config.vocab_size);
  }
  ThreadPool pool(2);
  LlamaGraph<float> graph(config, params->params(), {}, &pool);
  std::vector<float> lp, ent;
  OptimizerConfig sgd;
  sgd.name = "sgd";
  sgd.lr = 0.05;
  sgd.weight_decay = 0;
  sgd.grad_clip = 0;
  auto optimizer = CreateOptimizer(sgd, params->num_elements());
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    ASSERT_TRUE(graph.Forward(g.batch, params->values(), &lp, &ent).ok());
    PolicyLossOutput loss = NllLoss(g, lp);
    if (step == 0) first = loss.loss;
    last = loss.loss;
    if (last < 0.01) break;
    params->ZeroGrad();
    ASSERT_TRUE(graph.Backward(loss.grad_logprobs, {}, params->grads()).ok());
    ASSERT_TRUE((*optimizer)->Step(&*params, step, loss.loss).applied);
  }
  RecordProperty("first_loss", std::to_string(first));
  RecordProperty("last_loss", std::to_string(last));
  EXPECT_GT(first, 1.0);
  EXPECT_LT(last, 0.05) << "loss went from " << first << " to " << last;
}

}  // namespace
}  // namespace laminar::trainer
