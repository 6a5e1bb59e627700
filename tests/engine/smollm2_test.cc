// The default model (SmolLM2-135M-Instruct Q4_1 GGUF) against transformers' logits on the same
// file (tests/data/smollm2_135m_logits.json, made by scripts/make_smollm2_golden.py), and our
// tokenizer against transformers' on the prompt. Skips when the model is not installed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "engine/llama_model.h"
#include "kernels/reference/ops.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::engine {
namespace {

TEST(SmolLM2Test, LogitsMatchTransformers) {
  auto path = model::ResolveModelPath("smollm2-135m-instruct");
  if (!path.ok()) GTEST_SKIP() << "default model not installed (scripts/setup.sh)";
  auto golden = nlohmann::json::parse(
      *ReadFileToString(std::string(LAMINAR_SOURCE_DIR) + "/tests/data/smollm2_135m_logits.json"));
  std::vector<int32_t> ids = golden["input_ids"].get<std::vector<int32_t>>();
  auto tok = model::LoadTokenizerForModel(*path, "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ours = (*tok)->Encode(golden["prompt"].get<std::string>(),
                             {.add_special = false, .parse_special = true});
  ASSERT_TRUE(ours.ok());
  EXPECT_EQ(*ours, ids);
  auto ckpt = model::LoadCheckpoint(*path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto lm = LlamaModel::Create(ckpt->config, ckpt->weights);
  ASSERT_TRUE(lm.ok()) << lm.status();
  const int64_t t = static_cast<int64_t>(ids.size()), v = ckpt->config.vocab_size;
  KvCache cache = (*lm)->NewCache(1, t);
  SequenceSpan span{0, 0, t};
  std::vector<float> logits;
  ASSERT_TRUE((*lm)->Forward(ids, {&span, 1}, &cache, LogitsFor::kAllTokens, &logits).ok());
  std::vector<float> lse(t);
  kernels::ref::LogSumExp(logits, t, v, lse);
  // f32 through 30 layers, two implementations: logits of magnitude ~20 agree to ~1e-3.
  const double kTol = 2e-3;
  for (int64_t i = 0; i < t; ++i) {
    const auto& p = golden["positions"][i];
    const float* row = &logits[i * v];
    EXPECT_EQ(std::max_element(row, row + v) - row, p["top_ids"][0].get<int64_t>())
        << "position " << i;
    for (size_t j = 0; j < p["top_ids"].size(); ++j) {
      EXPECT_NEAR(row[p["top_ids"][j].get<int>()], p["top_logits"][j].get<double>(), kTol)
          << "position " << i << " rank " << j;
    }
    EXPECT_NEAR(lse[i], p["logsumexp"].get<double>(), kTol) << "position " << i;
  }
}

}  // namespace
}  // namespace laminar::engine
