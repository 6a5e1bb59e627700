// What the rollout's weight format costs on the default model (SmolLM2-135M-Instruct): greedy
// continuations of fixed GSM8K prompts in bf16 / w8a8 / w4a8 / gguf against f32, and the mean
// |Δlogprob| of sampled tokens between the rollout (each format) and the f32 trainer. f32 must
// agree within 1e-5; the others are reported (RecordProperty, and on stdout) with loose bounds that
// only catch a broken kernel. Skips when the model is not installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "engine/llama_model.h"
#include "engine/sampler.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "trainer/trainer.h"

namespace laminar::trainer {
namespace {

// The first four questions of GSM8K's test split.
constexpr const char* kQuestions[] = {
    "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
    "muffins for her friends every day with four. She sells the remainder at the farmers' market "
    "daily for $2 per fresh duck egg. How much in dollars does she make every day at the farmers' "
    "market?",
    "A robe takes 2 bolts of blue fiber and half that much white fiber. How many bolts in total "
    "does it take?",
    "Josh decides to try flipping a house. He buys a house for $80,000 and then puts in $50,000 "
    "in repairs. This increased the value of the house by 150%. How much profit did he make?",
    "James decides to run 3 sprints 3 times a week. He runs 60 meters each sprint. How many "
    "total meters does he run a week?",
};

constexpr int kNewTokens = 32;

// Generates kNewTokens after `prompt` with `sp` (temperature 0: greedy), recording each token's
// logprob under the distribution it was sampled from.
void Generate(const engine::LlamaModel& lm, const std::vector<int32_t>& prompt,
              const engine::SamplingParams& sp, TrainSample* out) {
  engine::Sampler sampler(sp);
  engine::KvCache cache = lm.NewCache(1, static_cast<int64_t>(prompt.size()) + kNewTokens + 1);
  std::vector<int32_t> next = prompt;
  int64_t pos = 0;
  std::vector<float> logits;
  out->prompt_ids = prompt;
  for (int i = 0; i < kNewTokens; ++i) {
    engine::SequenceSpan span{0, pos, static_cast<int64_t>(next.size())};
    ASSERT_TRUE(
        lm.Forward(next, {&span, 1}, &cache, engine::LogitsFor::kLastTokenOfEachSequence, &logits)
            .ok());
    pos += static_cast<int64_t>(next.size());
    const auto tok = sampler.Sample(logits);
    out->response_ids.push_back(tok.id);
    out->behavior_logprobs.push_back(tok.logprob);
    next = {tok.id};
  }
}

// Kept whole: one model load shared by every weight format's comparison.
TEST(QuantizedRolloutTest, SmolLM2FormatsAgainstF32AndTheF32Trainer) {
  auto path = model::ResolveModelPath("smollm2-135m-instruct");
  if (!path.ok()) GTEST_SKIP() << "default model not installed (scripts/setup.sh)";
  auto ckpt = model::LoadCheckpoint(*path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto tok = model::LoadTokenizerForModel(*path, "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto chat = model::ChatFormatFromName("smollm2");
  ASSERT_TRUE(chat.ok());
  std::vector<std::vector<int32_t>> prompts;
  for (const char* q : kQuestions) {
    const model::ChatMessage m{"user", q};
    auto text = model::RenderChat(*chat, {&m, 1}, true);
    ASSERT_TRUE(text.ok());
    auto ids = (*tok)->Encode(*text, {.add_special = false, .parse_special = true});
    ASSERT_TRUE(ids.ok());
    prompts.push_back(*ids);
  }
  TrainerConfig tc;
  tc.optimizer.lr = 0;
  tc.micro_batch_tokens = 1 << 20;
  auto trainer = Trainer::Create(ckpt->config, ckpt->weights, tc, nullptr);
  ASSERT_TRUE(trainer.ok()) << trainer.status();

  std::vector<TrainSample> greedy_f32(prompts.size());
  for (engine::WeightFormat format :
       {engine::WeightFormat::kF32, engine::WeightFormat::kBF16, engine::WeightFormat::kW8A8,
        engine::WeightFormat::kW4A8, engine::WeightFormat::kGguf}) {
    const std::string name = engine::WeightFormatName(format);
    SCOPED_TRACE(name);
    auto lm =
        engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu, format);
    ASSERT_TRUE(lm.ok()) << lm.status();
    // Greedy: the share of positions whose token equals f32's, and the common prefix.
    int64_t same = 0, prefix = 0, total = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      TrainSample s;
      Generate(**lm, prompts[p], engine::SamplingParams{.temperature = 0}, &s);
      if (format == engine::WeightFormat::kF32) greedy_f32[p] = s;
      bool diverged = false;
      for (int i = 0; i < kNewTokens; ++i) {
        const bool eq = s.response_ids[i] == greedy_f32[p].response_ids[i];
        same += eq;
        diverged = diverged || !eq;
        prefix += !diverged;
        ++total;
      }
    }
    // Sampling at temperature 1: the rollout's logprobs against the f32 trainer's.
    std::vector<TrainSample> sampled(prompts.size());
    for (size_t p = 0; p < prompts.size(); ++p) {
      Generate(**lm, prompts[p], engine::SamplingParams{.temperature = 1, .seed = 100 + p},
               &sampled[p]);
    }
    auto lp = (*trainer)->ResponseLogprobs(sampled);
    ASSERT_TRUE(lp.ok()) << lp.status();
    double abs_diff = 0, max_diff = 0;
    int64_t n = 0;
    for (size_t p = 0; p < sampled.size(); ++p) {
      for (size_t i = 0; i < sampled[p].response_ids.size(); ++i) {
        const double d = std::abs(double{(*lp)[p][i]} - sampled[p].behavior_logprobs[i]);
        abs_diff += d;
        max_diff = std::max(max_diff, d);
        ++n;
      }
    }
    abs_diff /= static_cast<double>(n);
    const double greedy_match = static_cast<double>(same) / static_cast<double>(total);
    const double prefix_match = static_cast<double>(prefix) / static_cast<double>(total);
    std::printf(
        "%-5s greedy tokens equal to f32: %.3f (common prefix %.3f) over %lld; sampled |dlogprob| "
        "vs f32 trainer: mean %.2e, max %.2e over %lld tokens\n",
        name.c_str(), greedy_match, prefix_match, static_cast<long long>(total), abs_diff, max_diff,
        static_cast<long long>(n));
    RecordProperty(name + "_greedy_match", std::to_string(greedy_match));
    RecordProperty(name + "_abs_logprob_diff_mean", std::to_string(abs_diff));
    if (format == engine::WeightFormat::kF32) {
      // Measured mean 2.3e-6, max 1.3e-5 (f32 sums in different orders over 30 layers).
      EXPECT_LE(abs_diff, 1e-5);
      EXPECT_EQ(greedy_match, 1.0);
    } else {
      // Measured (4 prompts x 32 tokens) on AVX2: bf16 0.007 nats, w8a8 0.22, w4a8 0.88, gguf
      // 0.055; greedy agreement 1 / 0.73 / 0.20 / 0.87. On AVX512-BF16 (bf16 activations too):
      // bf16 0.011 nats, greedy 0.85; w8a8 0.17, w4a8 0.84, gguf 0.055. A broken kernel gives
      // noise: several nats, no common prefix.
      EXPECT_LT(abs_diff, 2.0);
      EXPECT_GT(prefix_match, 0.05);
    }
  }
}

}  // namespace
}  // namespace laminar::trainer
