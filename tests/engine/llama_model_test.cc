// Forward pass: batched prefill equals one-at-a-time, KV-cache decode equals full recomputation,
// and bad input is refused with a clear error.
#include "engine/llama_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/quant_gemm.h"
#include "model/ggml_quants.h"
#include "tests/model/random_weights.h"

namespace laminar::engine {
namespace {

model::ModelConfig TinyConfig(bool qkv_bias, model::RopeLayout layout) {
  model::ModelConfig c = testing::TinyLlamaConfig();
  c.vocab_size = 37;
  c.attention_bias = qkv_bias;
  c.rope_layout = layout;
  c.tie_word_embeddings = !qkv_bias;
  return c;
}

model::WeightStore RandomWeights(const model::ModelConfig& c, uint32_t seed) {
  return testing::RandomWeights(c, seed, 0.3f);
}

// ggml blocks (model::QuantizeQ8_0 / QuantizeQ4_1) of every 2-D tensor of `store` whose rows are
// whole blocks, beside its f32 values, as a GGUF checkpoint's store holds them: `type` for the
// layers' projections, Q8_0 for the embedding (the tied head) and the head, as in GGUF's Q4
// files; `keep` owns the blocks.
void AddGgmlBlocks(model::WeightStore* store, std::vector<std::vector<uint8_t>>* keep,
                   model::GgmlType type = model::GgmlType::kQ8_0) {
  for (const std::string& name : store->Names()) {
    const TensorView view = *store->Get(name);
    if (view.shape().rank() != 2 || view.shape()[1] % 32 != 0) continue;
    const bool head = name == "model.embed_tokens.weight" || name == "lm_head.weight";
    const model::GgmlType t = head ? model::GgmlType::kQ8_0 : type;
    const auto n = view.num_elements();
    std::vector<uint8_t>& raw =
        keep->emplace_back(*model::GgmlRowBytes(static_cast<uint32_t>(t), n));
    (t == model::GgmlType::kQ8_0 ? model::QuantizeQ8_0 : model::QuantizeQ4_1)(
        view.data_as<const float>(), raw.data(), n);
    store->PutQuantized(name, {.type = t,
                               .shape = view.shape(),
                               .bytes = raw.data(),
                               .size_bytes = raw.size(),
                               .backing = nullptr});
  }
}

// A model and its LayerSubset view (shared weights and thread pool) run Forward at the same time
// from two threads, as speculative decoding's drafting ahead does, and get the results they get
// alone. The model is large enough that its matmuls go to the pool (M * N * K >= 2^16).
TEST(LlamaModelConcurrencyTest, ForwardOverlapsItsLayerSubsetBitForBit) {
  model::ModelConfig cfg = testing::TinyLlamaConfig();
  cfg.vocab_size = 300;
  cfg.hidden_size = 256;
  cfg.intermediate_size = 512;
  cfg.num_attention_heads = 8;
  cfg.num_key_value_heads = 4;
  cfg.head_dim = 32;
  cfg.num_hidden_layers = 3;
  auto weights = testing::RandomWeights(cfg, 9, 0.05f);
  auto m = LlamaModel::Create(cfg, weights);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<int64_t> layers = {0, 2};
  auto sub = (*m)->LayerSubset(layers);
  ASSERT_TRUE(sub.ok()) << sub.status();
  const std::vector<int32_t> tokens = {1, 17, 250, 4, 99, 3};
  auto run = [&](const LlamaModel& model) {
    std::vector<float> all;
    KvCache cache = model.NewCache(1, 16);
    for (int64_t t = 0; t < std::ssize(tokens); ++t) {  // decode one token at a time (M = 1)
      SequenceSpan span{0, t, 1};
      std::vector<float> logits;
      EXPECT_TRUE(model
                      .Forward({&tokens[static_cast<size_t>(t)], 1}, {&span, 1}, &cache,
                               LogitsFor::kAllTokens, &logits)
                      .ok());
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  const std::vector<float> want_full = run(**m), want_sub = run(**sub);
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<float> got_sub;
    std::thread drafter([&] { got_sub = run(**sub); });
    const std::vector<float> got_full = run(**m);
    drafter.join();
    ASSERT_EQ(got_full, want_full) << "repetition " << rep;
    ASSERT_EQ(got_sub, want_sub) << "repetition " << rep;
  }
}

class LlamaModelTest : public ::testing::TestWithParam<bool> {};

// Long: each layout of the same tokens (alone, packed in one cache, packed with a cache each, nine
// one-token spans, decoded one at a time) is compared with the logits of the first, so they share
// one model and one set of reference logits.
TEST_P(LlamaModelTest, BatchedPrefillEqualsSingleAndDecodeEqualsRecompute) {
  bool bias = GetParam();
  auto cfg =
      TinyConfig(bias, bias ? model::RopeLayout::kRotateHalf : model::RopeLayout::kInterleaved);
  auto weights = RandomWeights(cfg, 7);
  auto m = LlamaModel::Create(cfg, weights);
  ASSERT_TRUE(m.ok()) << m.status();
  std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 2, 30}, {3}, {7, 7, 8}};
  // Alone: each sequence's full logits.
  std::vector<std::vector<float>> alone;
  for (const auto& s : seqs) {
    KvCache cache = (*m)->NewCache(1, 16);
    SequenceSpan span{0, 0, static_cast<int64_t>(s.size())};
    std::vector<float> logits;
    ASSERT_TRUE((*m)->Forward(s, {&span, 1}, &cache, LogitsFor::kAllTokens, &logits).ok());
    alone.push_back(logits);
  }
  // Packed: all three in one batch, in slots 2, 0, 1.
  std::vector<int32_t> packed;
  std::vector<SequenceSpan> spans;
  int64_t slots[] = {2, 0, 1};
  for (size_t i = 0; i < seqs.size(); ++i) {
    packed.insert(packed.end(), seqs[i].begin(), seqs[i].end());
    spans.push_back({slots[i], 0, static_cast<int64_t>(seqs[i].size())});
  }
  KvCache cache = (*m)->NewCache(3, 16);
  std::vector<float> logits;
  ASSERT_TRUE((*m)->Forward(packed, spans, &cache, LogitsFor::kAllTokens, &logits).ok());
  size_t off = 0;
  for (const auto& a : alone) {
    for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(logits[off + j], a[j], 1e-5) << j;
    off += a.size();
  }
  // Packed with a cache of its own per sequence (a drafter's batch): the same logits, and each
  // cache holds its sequence's K/V (a decode step over all three continues them).
  std::vector<KvCache> own;
  for (size_t i = 0; i < seqs.size(); ++i) own.push_back((*m)->NewCache(1, 16));
  std::vector<KvCache*> caches;
  for (KvCache& c : own) caches.push_back(&c);
  for (SequenceSpan& span : spans) span.slot = 0;
  std::vector<float> own_logits;
  ASSERT_TRUE((*m)->Forward(packed, spans, caches, LogitsFor::kAllTokens, &own_logits).ok());
  ASSERT_EQ(own_logits.size(), logits.size());
  for (size_t j = 0; j < logits.size(); ++j) ASSERT_NEAR(own_logits[j], logits[j], 1e-5) << j;
  std::vector<int32_t> next = {4, 4, 4};
  std::vector<SequenceSpan> steps;
  for (const auto& s : seqs) steps.push_back({0, static_cast<int64_t>(s.size()), 1});
  std::vector<float> step_own, step_shared;
  ASSERT_TRUE(
      (*m)->Forward(next, steps, caches, LogitsFor::kLastTokenOfEachSequence, &step_own).ok());
  for (size_t i = 0; i < seqs.size(); ++i) steps[i].slot = slots[i];
  ASSERT_TRUE(
      (*m)->Forward(next, steps, &cache, LogitsFor::kLastTokenOfEachSequence, &step_shared).ok());
  for (size_t j = 0; j < step_shared.size(); ++j) ASSERT_NEAR(step_own[j], step_shared[j], 1e-5);
  // Nine one-token sequences (from 8 spans the attention runs spans in parallel): a cache each
  // gives the logits of one shared cache.
  {
    std::vector<KvCache> nine;
    for (int i = 0; i < 9; ++i) nine.push_back((*m)->NewCache(1, 4));
    std::vector<KvCache*> own9;
    for (KvCache& c : nine) own9.push_back(&c);
    KvCache shared9 = (*m)->NewCache(9, 4);
    std::vector<int32_t> ids9;
    std::vector<SequenceSpan> spans9;
    for (int i = 0; i < 9; ++i) {
      ids9.push_back(1 + i);
      spans9.push_back({0, 0, 1});
    }
    std::vector<float> a9, b9;
    ASSERT_TRUE((*m)->Forward(ids9, spans9, own9, LogitsFor::kAllTokens, &a9).ok());
    for (int i = 0; i < 9; ++i) spans9[i].slot = i;
    ASSERT_TRUE((*m)->Forward(ids9, spans9, &shared9, LogitsFor::kAllTokens, &b9).ok());
    ASSERT_EQ(a9, b9);
  }
  // Decode: feed sequence 0 one token at a time; the last-token logits equal the full pass.
  const auto& s0 = seqs[0];
  KvCache dc = (*m)->NewCache(1, 16);
  const int64_t v = cfg.vocab_size;
  for (size_t i = 0; i < s0.size(); ++i) {
    SequenceSpan span{0, static_cast<int64_t>(i), 1};
    std::vector<float> step;
    ASSERT_TRUE(
        (*m)->Forward({&s0[i], 1}, {&span, 1}, &dc, LogitsFor::kLastTokenOfEachSequence, &step)
            .ok());
    for (int64_t j = 0; j < v; ++j) ASSERT_NEAR(step[j], alone[0][i * v + j], 1e-4);
  }
}

TEST(LlamaModelBackendTest, CpuEqualsReference) {
  auto cfg = TinyConfig(true, model::RopeLayout::kRotateHalf);
  auto weights = RandomWeights(cfg, 3);
  auto ref = LlamaModel::Create(cfg, weights, Backend::kReference);
  auto cpu = LlamaModel::Create(cfg, weights, Backend::kCpu);
  ASSERT_TRUE(ref.ok() && cpu.ok());
  std::vector<int32_t> ids = {4, 8, 15, 16, 23, 36};
  SequenceSpan span{0, 0, 6};
  KvCache c1 = (*ref)->NewCache(1, 8), c2 = (*cpu)->NewCache(1, 8);
  std::vector<float> a, b;
  ASSERT_TRUE((*ref)->Forward(ids, {&span, 1}, &c1, LogitsFor::kAllTokens, &a).ok());
  ASSERT_TRUE((*cpu)->Forward(ids, {&span, 1}, &c2, LogitsFor::kAllTokens, &b).ok());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
}

TEST(LlamaModelBackendTest, BF16WeightsEqualReferenceOnRoundedWeights) {
  auto cfg = TinyConfig(true, model::RopeLayout::kInterleaved);
  auto weights = RandomWeights(cfg, 5);
  // The reference on weights rounded to bf16 is what the bf16 path must reproduce (f32 sums).
  model::WeightStore rounded;
  for (const auto& name : weights.Names()) {
    Tensor t = Tensor::FromView(*weights.Get(name));
    bool projection = name.find("_proj.weight") != std::string::npos || name == "lm_head.weight";
    for (int64_t i = 0; projection && i < t.num_elements(); ++i) {
      t.data_as<float>()[i] = BF16ToFloat(FloatToBF16(t.data_as<float>()[i]));
    }
    rounded.Put(name, std::move(t));
  }
  auto ref = LlamaModel::Create(cfg, rounded, Backend::kReference);
  ASSERT_TRUE(ref.ok()) << ref.status();
  // f32 activations (every CPU; LAMINAR_ISA=avx2 keeps a CPU with a bf16 dot product on it).
  const char* saved_isa = std::getenv("LAMINAR_ISA");
  const std::string saved = saved_isa != nullptr ? saved_isa : "";
  setenv("LAMINAR_ISA", "avx2", 1);
  auto bf16 = LlamaModel::Create(cfg, weights, Backend::kCpu, WeightFormat::kBF16);
  if (saved_isa != nullptr) {
    setenv("LAMINAR_ISA", saved.c_str(), 1);
  } else {
    unsetenv("LAMINAR_ISA");
  }
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  auto logits = [&](const LlamaModel& m, int64_t t) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < t; ++i)
      ids.push_back(static_cast<int32_t>((i * 7 + 4) % cfg.vocab_size));
    SequenceSpan span{0, 0, t};
    KvCache cache = m.NewCache(1, t);
    std::vector<float> out;
    EXPECT_TRUE(m.Forward(ids, {&span, 1}, &cache, LogitsFor::kAllTokens, &out).ok());
    return out;
  };
  // 6 rows read bf16 directly (decode path); 24 rows go to oneDNN (prefill path).
  for (int64_t t : {6, 24}) {
    auto a = logits(**ref, t), b = logits(**bf16, t);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << "T=" << t << " at " << i;
  }
  // bf16 activations as well, on CPUs with a bf16 dot product (kernels/cpu/bf16_dot.h): each
  // matmul input is rounded to bf16 (relative error <= 2^-9), so the logits of this random tiny
  // model (|logit| ~1) move by a few 1e-3 (measured 5.3e-3); a wrong layout or a dropped product
  // moves them by O(1). The decode and prefill paths round the same activations (measured 6e-8
  // apart).
  if (kernels::cpu::HasBF16Dot()) {
    auto dot = LlamaModel::Create(cfg, weights, Backend::kCpu, WeightFormat::kBF16);
    ASSERT_TRUE(dot.ok()) << dot.status();
    auto a = logits(**ref, 24), b = logits(**dot, 24), c = logits(**dot, 6);
    double worst = 0, worst_paths = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
    for (size_t i = 0; i < c.size(); ++i) {
      worst_paths = std::max(worst_paths, std::abs(double(b[i]) - c[i]));
    }
    std::cerr << "bf16 dot: max |logit diff| vs reference " << worst << ", decode vs prefill path "
              << worst_paths << "\n";
    EXPECT_LT(worst, 2e-2);
    EXPECT_LT(worst_paths, 1e-4);  // the same rounded operands; f32 sums in another order
  }
  EXPECT_FALSE(LlamaModel::Create(cfg, weights, Backend::kReference, WeightFormat::kBF16).ok());
  auto gguf = LlamaModel::Create(cfg, weights, Backend::kCpu, WeightFormat::kGguf);
  ASSERT_FALSE(gguf.ok());
  EXPECT_NE(gguf.status().message().find("Q4_0/Q4_1/Q8_0"), std::string::npos) << gguf.status();
  EXPECT_FALSE(ParseWeightFormat("int3").ok());
}

// The integer formats: a packed batch equals each sequence alone bit for bit (activation scales are
// per token, integer sums exact), and logits stay near f32 (a broken layout or a wrong weight
// order gives logits unrelated to f32's).
TEST_P(LlamaModelTest, QuantizedFormatsAreBatchInvariantAndNearF32) {
  const bool bias = GetParam();
  auto cfg =
      TinyConfig(bias, bias ? model::RopeLayout::kRotateHalf : model::RopeLayout::kInterleaved);
  auto weights = RandomWeights(cfg, 9);
  // The last sequence's 18 tokens take the many-row path (oneDNN int8 on packed weights on
  // AVX512-VNNI CPUs) alone and in the batch.
  std::vector<std::vector<int32_t>> seqs = {
      {1, 5, 9, 2, 30}, {3}, {7, 7, 8}, {4, 9, 1, 6, 2, 8, 3, 7, 5, 9, 1, 4, 6, 2, 8, 3, 7, 5}};
  auto run = [&](const LlamaModel& m, bool packed) {
    std::vector<float> all;
    if (packed) {
      std::vector<int32_t> ids;
      std::vector<SequenceSpan> spans;
      for (size_t i = 0; i < seqs.size(); ++i) {
        ids.insert(ids.end(), seqs[i].begin(), seqs[i].end());
        spans.push_back({static_cast<int64_t>(i), 0, static_cast<int64_t>(seqs[i].size())});
      }
      KvCache cache = m.NewCache(4, 32);
      EXPECT_TRUE(m.Forward(ids, spans, &cache, LogitsFor::kAllTokens, &all).ok());
      return all;
    }
    for (const auto& s : seqs) {
      KvCache cache = m.NewCache(1, 32);
      SequenceSpan span{0, 0, static_cast<int64_t>(s.size())};
      std::vector<float> logits;
      EXPECT_TRUE(m.Forward(s, {&span, 1}, &cache, LogitsFor::kAllTokens, &logits).ok());
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  auto f32 = LlamaModel::Create(cfg, weights);
  ASSERT_TRUE(f32.ok());
  const std::vector<float> want = run(**f32, false);
  double scale = 0;
  for (float v : want) scale = std::max(scale, double{std::abs(v)});
  for (WeightFormat format : {WeightFormat::kW8A8, WeightFormat::kW4A8}) {
    SCOPED_TRACE(WeightFormatName(format));
    auto q = LlamaModel::Create(cfg, weights, Backend::kCpu, format);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_LT((*q)->projection_bytes(), (*f32)->projection_bytes());  // K padding: tiny dims
    const int64_t packed_before = kernels::cpu::OnednnInt8PackedMatMuls();
    const std::vector<float> alone = run(**q, false), packed = run(**q, true);
    if (kernels::cpu::BestQuantIsa() == kernels::cpu::QuantIsa::kAvx512Vnni) {
      EXPECT_GT(kernels::cpu::OnednnInt8PackedMatMuls(), packed_before);
    }
    ASSERT_EQ(alone.size(), want.size());
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(alone[i], packed[i]) << i;
      err = std::max(err, std::abs(double{alone[i]} - want[i]));
    }
    // Measured ~1% (w8a8) and ~5% (w4a8) of the largest logit on this random model.
    EXPECT_LT(err, (format == WeightFormat::kW8A8 ? 0.05 : 0.25) * scale);
  }
}

// q8_0 and q4_1 quantize the f32 weights to ggml's blocks at load: the logits equal those of the
// gguf format run on the same blocks stored in the checkpoint, bit for bit, and stay near f32.
TEST_P(LlamaModelTest, BlockFormatsEqualGgufOnTheSameBlocks) {
  const bool bias = GetParam();
  model::ModelConfig cfg =
      TinyConfig(bias, bias ? model::RopeLayout::kRotateHalf : model::RopeLayout::kInterleaved);
  cfg.hidden_size = 32;  // whole blocks of 32 (the intermediate size of 24 stays f32)
  cfg.head_dim = 8;
  const std::vector<int32_t> tokens = {1, 5, 9, 2, 30, 7};
  auto run = [&](const LlamaModel& m) {
    KvCache cache = m.NewCache(1, 8);
    SequenceSpan span{0, 0, std::ssize(tokens)};
    std::vector<float> logits;
    EXPECT_TRUE(m.Forward(tokens, {&span, 1}, &cache, LogitsFor::kAllTokens, &logits).ok());
    return logits;
  };
  const model::WeightStore weights = RandomWeights(cfg, 21);
  auto f32 = LlamaModel::Create(cfg, weights);
  ASSERT_TRUE(f32.ok()) << f32.status();
  const std::vector<float> want = run(**f32);
  double scale = 0;
  for (float v : want) scale = std::max(scale, double{std::abs(v)});
  for (const auto& [format, type] : {std::pair{WeightFormat::kQ8_0, model::GgmlType::kQ8_0},
                                     std::pair{WeightFormat::kQ4_1, model::GgmlType::kQ4_1}}) {
    SCOPED_TRACE(WeightFormatName(format));
    auto quantized = LlamaModel::Create(cfg, weights, Backend::kCpu, format);
    ASSERT_TRUE(quantized.ok()) << quantized.status();
    model::WeightStore stored = RandomWeights(cfg, 21);
    std::vector<std::vector<uint8_t>> blocks;
    AddGgmlBlocks(&stored, &blocks, type);
    auto gguf = LlamaModel::Create(cfg, stored, Backend::kCpu, WeightFormat::kGguf);
    ASSERT_TRUE(gguf.ok()) << gguf.status();
    EXPECT_EQ((*quantized)->projection_bytes(), (*gguf)->projection_bytes());
    EXPECT_LT((*quantized)->projection_bytes(), (*f32)->projection_bytes());
    const std::vector<float> got = run(**quantized);
    EXPECT_EQ(got, run(**gguf));
    double err = 0;
    for (size_t i = 0; i < want.size(); ++i)
      err = std::max(err, std::abs(double{got[i]} - want[i]));
    EXPECT_LT(err, (format == WeightFormat::kQ8_0 ? 0.05 : 0.25) * scale);
  }
}

INSTANTIATE_TEST_SUITE_P(BiasAndLayout, LlamaModelTest, ::testing::Values(false, true));

// A drafter's head over part of the vocabulary (WithOutputVocab): the kept tokens' logits are the
// full model's, bit for bit, every other token's are -inf, in every weight format and both
// backends; a view of a view keeps narrowing; bad id lists are refused.
TEST_P(LlamaModelTest, OutputVocabularyKeepsTheLogitsOfItsTokens) {
  const bool bias = GetParam();  // untied head with bias, tied without
  auto cfg =
      TinyConfig(bias, bias ? model::RopeLayout::kRotateHalf : model::RopeLayout::kInterleaved);
  auto weights = RandomWeights(cfg, 13);
  const std::vector<int32_t> ids = {0, 3, 17, 35, 36}, narrower = {3, 36};
  const std::vector<int32_t> tokens = {1, 5, 9, 2};
  auto run = [&](const LlamaModel& m) {
    KvCache cache = m.NewCache(1, 8);
    std::vector<float> all;
    for (int64_t t = 0; t < std::ssize(tokens); ++t) {  // M = 1: the drafter's shape
      SequenceSpan span{0, t, 1};
      std::vector<float> logits;
      EXPECT_TRUE(m.Forward({&tokens[static_cast<size_t>(t)], 1}, {&span, 1}, &cache,
                            LogitsFor::kAllTokens, &logits)
                      .ok());
      all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
  };
  auto check = [&](const std::vector<float>& full, const std::vector<float>& part,
                   const std::vector<int32_t>& kept) {
    ASSERT_EQ(part.size(), full.size());
    for (size_t i = 0; i < full.size(); ++i) {
      const auto token = static_cast<int32_t>(i % static_cast<size_t>(cfg.vocab_size));
      if (std::ranges::find(kept, token) != kept.end()) {
        ASSERT_EQ(part[i], full[i]) << "token " << token << " at position " << i / cfg.vocab_size;
      } else {
        ASSERT_EQ(part[i], -std::numeric_limits<float>::infinity()) << "token " << token;
      }
    }
  };
  struct Case {
    Backend backend;
    WeightFormat format;
  };
  // gguf: Q8_0 blocks of the projections whose K is whole blocks (the tiny model's K of 16 and 24
  // stay f32, its hidden size is widened to 32 for the rest).
  model::ModelConfig gguf_cfg = cfg;
  gguf_cfg.hidden_size = 32;
  gguf_cfg.head_dim = 8;
  model::WeightStore gguf_weights = RandomWeights(gguf_cfg, 13);
  std::vector<std::vector<uint8_t>> blocks;
  AddGgmlBlocks(&gguf_weights, &blocks);
  for (const Case c : {Case{Backend::kReference, WeightFormat::kF32},
                       {Backend::kCpu, WeightFormat::kF32},
                       {Backend::kCpu, WeightFormat::kBF16},
                       {Backend::kCpu, WeightFormat::kW8A8},
                       {Backend::kCpu, WeightFormat::kW4A8},
                       {Backend::kCpu, WeightFormat::kQ8_0},
                       {Backend::kCpu, WeightFormat::kQ4_1},
                       {Backend::kCpu, WeightFormat::kGguf}}) {
    SCOPED_TRACE(WeightFormatName(c.format) +
                 (c.backend == Backend::kReference ? " reference" : " cpu"));
    const bool gguf = c.format == WeightFormat::kGguf || c.format == WeightFormat::kQ8_0 ||
                      c.format == WeightFormat::kQ4_1;
    auto m = LlamaModel::Create(gguf ? gguf_cfg : cfg, gguf ? gguf_weights : weights, c.backend,
                                c.format);
    ASSERT_TRUE(m.ok()) << m.status();
    auto view = (*m)->WithOutputVocab(ids);
    ASSERT_TRUE(view.ok()) << view.status();
    EXPECT_EQ(std::ssize((*view)->output_vocab()), std::ssize(ids));
    EXPECT_LT((*view)->projection_bytes(), (*m)->projection_bytes());
    const std::vector<float> full = run(**m);
    check(full, run(**view), ids);
    auto narrow = (*view)->WithOutputVocab(narrower);
    ASSERT_TRUE(narrow.ok()) << narrow.status();
    check(full, run(**narrow), narrower);
    // Bad lists: empty, unsorted, repeated, out of range, outside the view's own vocabulary.
    const std::vector<int32_t> unsorted = {3, 0}, repeated = {3, 3}, outside = {0, 37},
                               not_in_view = {1};
    EXPECT_FALSE((*m)->WithOutputVocab({}).ok());
    for (const auto* bad : {&unsorted, &repeated, &outside}) {
      auto r = (*m)->WithOutputVocab(*bad);
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find("output vocabulary"), std::string::npos) << r.status();
    }
    EXPECT_FALSE((*view)->WithOutputVocab(not_in_view).ok());
  }
}

TEST(LlamaModelErrorsTest, BadInput) {
  auto cfg = TinyConfig(false, model::RopeLayout::kInterleaved);
  auto weights = RandomWeights(cfg, 1);
  auto m = LlamaModel::Create(cfg, weights);
  ASSERT_TRUE(m.ok());
  KvCache cache = (*m)->NewCache(1, 4);
  std::vector<float> logits;
  std::vector<int32_t> too_long = {1, 2, 3, 4, 5};
  SequenceSpan span{0, 0, 5};
  auto st = (*m)->Forward(too_long, {&span, 1}, &cache, LogitsFor::kAllTokens, &logits);
  EXPECT_NE(st.message().find("do not fit the context of 4"), std::string::npos) << st;
  std::vector<int32_t> bad_id = {99};
  SequenceSpan one{0, 0, 1};
  EXPECT_FALSE((*m)->Forward(bad_id, {&one, 1}, &cache, LogitsFor::kAllTokens, &logits).ok());
  SequenceSpan bad_slot{3, 0, 1};
  std::vector<int32_t> ok_id = {1};
  EXPECT_FALSE((*m)->Forward(ok_id, {&bad_slot, 1}, &cache, LogitsFor::kAllTokens, &logits).ok());
  // A cache per sequence: as many caches as spans (or one), none null.
  std::vector<int32_t> two_ids = {1, 2};
  std::vector<SequenceSpan> two = {{0, 0, 1}, {0, 0, 1}};
  std::vector<KvCache*> three = {&cache, &cache, &cache};
  st = (*m)->Forward(two_ids, two, three, LogitsFor::kAllTokens, &logits);
  EXPECT_NE(st.message().find("3 KV caches for 2 sequences"), std::string::npos) << st;
  std::vector<KvCache*> with_null = {&cache, nullptr};
  st = (*m)->Forward(two_ids, two, with_null, LogitsFor::kAllTokens, &logits);
  EXPECT_NE(st.message().find("sequence 1: no KV cache"), std::string::npos) << st;
  // Missing and misshapen tensors.
  model::WeightStore missing = RandomWeights(cfg, 1);
  model::WeightStore partial;
  for (const auto& name : missing.Names()) {
    if (name != "model.layers.1.mlp.up_proj.weight")
      partial.PutView(name, *missing.Get(name), nullptr);
  }
  auto r = LlamaModel::Create(cfg, partial);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos);
  auto wrong = cfg;
  wrong.intermediate_size = 25;
  auto r2 = LlamaModel::Create(wrong, weights);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("shape [24, 16]"), std::string::npos) << r2.status();
}

}  // namespace
}  // namespace laminar::engine
