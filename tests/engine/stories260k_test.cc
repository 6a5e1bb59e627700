// The real stories260K model (../shared/data/models/stories260K): per-position logits, log-sum-exp
// and logprobs of llama2.c's greedy traces, from the .bin and the .gguf, on both backends.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "engine/llama_model.h"
#include "model/gguf_model.h"
#include "model/llama2c.h"
#include "tests/test_util.h"

namespace laminar::engine {
namespace {

struct Loaded {
  model::ModelConfig config;
  model::WeightStore weights;
};

// Checks a whole greedy trace with one prefill over every input token (KV-cache decode is checked
// against recomputation elsewhere).
void CheckTrace(const Loaded& m, Backend backend, const std::string& trace_path) {
  auto text = ReadFileToString(trace_path);
  ASSERT_TRUE(text.ok()) << text.status();
  auto trace = nlohmann::json::parse(*text);
  std::vector<int32_t> inputs;
  for (const auto& p : trace["positions"]) inputs.push_back(p["input"].get<int32_t>());
  auto lm = LlamaModel::Create(m.config, m.weights, backend);
  ASSERT_TRUE(lm.ok()) << lm.status();
  const int64_t t = static_cast<int64_t>(inputs.size()), v = m.config.vocab_size;
  KvCache cache = (*lm)->NewCache(1, t);
  SequenceSpan span{0, 0, t};
  std::vector<float> logits;
  ASSERT_TRUE((*lm)->Forward(inputs, {&span, 1}, &cache, LogitsFor::kAllTokens, &logits).ok());
  const auto& pos0 = trace["positions"][0]["logits"];
  ASSERT_EQ(static_cast<int64_t>(pos0.size()), v);
  for (int64_t j = 0; j < v; ++j)
    ASSERT_NEAR(logits[j], pos0[j].get<double>(), 1e-4) << "logit " << j;
  std::vector<float> lse(t), lp(t);
  std::vector<int32_t> next;
  for (const auto& p : trace["positions"]) next.push_back(p["next"].get<int32_t>());
  kernels::ref::LogSumExp(logits, t, v, lse);
  kernels::ref::TokenLogprobs(logits, next, t, v, lp);
  for (int64_t i = 0; i < t; ++i) {
    const auto& p = trace["positions"][i];
    const float* row = &logits[i * v];
    int64_t argmax = std::max_element(row, row + v) - row;
    ASSERT_EQ(argmax, p["next"].get<int64_t>()) << "position " << i;
    for (const auto& pair : p["top5"]) {
      ASSERT_NEAR(row[pair[0].get<int>()], pair[1].get<double>(), 1e-4) << "position " << i;
    }
    ASSERT_NEAR(lse[i], p["logsumexp"].get<double>(), 1e-4) << "position " << i;
    ASSERT_NEAR(lp[i], p["next_logprob"].get<double>(), 1e-4) << "position " << i;
  }
}

TEST(Stories260KTest, MatchesLlama2cTracesFromBinAndGguf) {
  LAMINAR_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  LAMINAR_SHARED_OR_SKIP(gguf, "models/stories260K/stories260K.gguf");
  LAMINAR_SHARED_OR_SKIP(trace_a, "models/stories260K/derived_greedy_trace_empty_prompt_200.json");
  LAMINAR_SHARED_OR_SKIP(trace_b,
                         "models/stories260K/derived_greedy_trace_once_upon_a_time_64.json");
  Loaded from_bin, from_gguf;
  ASSERT_TRUE(model::LoadLlama2c(bin, &from_bin.config, &from_bin.weights).ok());
  ASSERT_TRUE(model::LoadGgufModel(gguf, &from_gguf.config, &from_gguf.weights).ok());
  for (const Loaded* m : {&from_bin, &from_gguf}) {
    for (Backend b : {Backend::kReference, Backend::kCpu}) {
      SCOPED_TRACE(m == &from_bin ? "bin" : "gguf");
      SCOPED_TRACE(b == Backend::kCpu ? "cpu" : "reference");
      if (b == Backend::kCpu) CheckTrace(*m, b, trace_a);  // the reference is slow on 200 tokens
      CheckTrace(*m, b, trace_b);
    }
  }
}

}  // namespace
}  // namespace laminar::engine
