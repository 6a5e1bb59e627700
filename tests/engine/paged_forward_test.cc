// Paged forward: the same logits as the contiguous KV-cache forward for packed sequences, several
// block sizes and shuffled block tables, through a prefill and decode steps; copy-on-write copies;
// bad tables refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "engine/llama_model.h"
#include "kernels/tolerance.h"
#include "tests/model/random_weights.h"

namespace laminar::engine {
namespace {

struct Case {
  Backend backend;
  int64_t block_size;
};

class PagedForwardTest : public ::testing::TestWithParam<Case> {};

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const auto tol = kernels::kAttentionF32;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol.abs + tol.rel * std::abs(want[i])) << what << " at " << i;
  }
}

TEST_P(PagedForwardTest, EqualsContiguousForPrefillThenDecode) {
  const Case c = GetParam();
  model::ModelConfig cfg = testing::TinyLlamaConfig();
  auto weights = testing::RandomWeights(cfg, 11, 0.3f);
  auto m = LlamaModel::Create(cfg, weights, c.backend);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 5, 9, 2, 30, 4, 4, 17, 3}, {3}, {7, 7, 8, 21, 0}};
  const int64_t max_len = 16, decode_steps = 4;
  const int64_t blocks_per_seq = (max_len + c.block_size - 1) / c.block_size;
  const int64_t num_blocks = blocks_per_seq * static_cast<int64_t>(prompts.size()) + 3;
  // Shuffled, disjoint block tables.
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::mt19937 rng(static_cast<uint32_t>(c.block_size));
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<std::vector<int32_t>> tables(prompts.size());
  for (size_t s = 0; s < prompts.size(); ++s) {
    tables[s].assign(ids.begin() + static_cast<int64_t>(s) * blocks_per_seq,
                     ids.begin() + static_cast<int64_t>(s + 1) * blocks_per_seq);
  }
  std::vector<std::span<const int32_t>> table_spans(tables.begin(), tables.end());
  KvCache contiguous = (*m)->NewCache(static_cast<int64_t>(prompts.size()), max_len);
  PagedKvCache paged = (*m)->NewPagedCache(num_blocks, c.block_size);

  // Prefill all, all logits.
  std::vector<int32_t> packed;
  std::vector<SequenceSpan> spans;
  for (size_t s = 0; s < prompts.size(); ++s) {
    packed.insert(packed.end(), prompts[s].begin(), prompts[s].end());
    spans.push_back({static_cast<int64_t>(s), 0, static_cast<int64_t>(prompts[s].size())});
  }
  std::vector<float> want, got;
  ASSERT_TRUE((*m)->Forward(packed, spans, &contiguous, LogitsFor::kAllTokens, &want).ok());
  ASSERT_TRUE((*m)->Forward(packed, spans, table_spans, &paged, LogitsFor::kAllTokens, &got).ok());
  ExpectClose(got, want, "prefill");

  // Decode: one token per sequence per step, fed from the contiguous run's argmax.
  const int64_t v = cfg.vocab_size;
  for (int64_t step = 0; step < decode_steps; ++step) {
    std::vector<int32_t> next;
    int64_t end = 0;
    for (size_t s = 0; s < prompts.size(); ++s) {
      end += spans[s].num_tokens;
      const int64_t row = step == 0 ? end - 1 : static_cast<int64_t>(s);
      auto begin = want.begin() + row * v;
      next.push_back(static_cast<int32_t>(std::max_element(begin, begin + v) - begin));
    }
    for (auto& span : spans) {
      span.start_position += span.num_tokens;
      span.num_tokens = 1;
    }
    ASSERT_TRUE(
        (*m)->Forward(next, spans, &contiguous, LogitsFor::kLastTokenOfEachSequence, &want).ok());
    ASSERT_TRUE(
        (*m)->Forward(next, spans, table_spans, &paged, LogitsFor::kLastTokenOfEachSequence, &got)
            .ok());
    ExpectClose(got, want, "decode");
  }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, PagedForwardTest,
                         ::testing::Values(Case{Backend::kReference, 1},
                                           Case{Backend::kReference, 4}, Case{Backend::kCpu, 3},
                                           Case{Backend::kCpu, 4}, Case{Backend::kCpu, 16}));

TEST(PagedForwardTest, CopiedBlockContinuesLikeTheOriginal) {
  model::ModelConfig cfg = testing::TinyLlamaConfig();
  auto weights = testing::RandomWeights(cfg, 5, 0.3f);
  auto m = LlamaModel::Create(cfg, weights, Backend::kReference);
  ASSERT_TRUE(m.ok()) << m.status();
  PagedKvCache paged = (*m)->NewPagedCache(6, 4);
  std::vector<int32_t> prompt = {2, 4, 6, 8, 10, 12};  // 1.5 blocks
  std::vector<int32_t> parent = {0, 1}, child = {0, 5};
  std::vector<std::span<const int32_t>> t1 = {parent};
  SequenceSpan span{0, 0, 6};
  std::vector<float> logits;
  ASSERT_TRUE((*m)->Forward(prompt, {&span, 1}, t1, &paged, LogitsFor::kAllTokens, &logits).ok());
  paged.CopyBlock(1, 5);  // the child's copy-on-write of the partial last block
  SequenceSpan next{0, 6, 1};
  std::vector<int32_t> tok = {3};
  std::vector<float> a, b;
  std::vector<std::span<const int32_t>> tp = {parent}, tc = {child};
  ASSERT_TRUE((*m)->Forward(tok, {&next, 1}, tp, &paged, LogitsFor::kAllTokens, &a).ok());
  ASSERT_TRUE((*m)->Forward(tok, {&next, 1}, tc, &paged, LogitsFor::kAllTokens, &b).ok());
  EXPECT_EQ(a, b);
}

TEST_P(PagedForwardTest, TreeEqualsEachRootToLeafChain) {
  const Case c = GetParam();
  model::ModelConfig cfg = testing::TinyLlamaConfig();
  auto weights = testing::RandomWeights(cfg, 12, 0.3f);
  auto m = LlamaModel::Create(cfg, weights, c.backend);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 30, 4, 4};
  // Root (the next fed token) and 6 drafted nodes: 0 -> 1 -> 3 -> 5, 0 -> 2 -> 4, 1 -> 6.
  const std::vector<int32_t> tree_tokens = {17, 3, 8, 21, 3, 0, 12};
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 2, 3, 1};
  const std::vector<std::vector<int32_t>> chains = {{0, 1, 3, 5}, {0, 2, 4}, {0, 1, 6}};
  const int64_t num_blocks = 32 / c.block_size + 2;
  std::vector<int32_t> table(static_cast<size_t>(num_blocks));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(table.size() - 1 - i);
  std::vector<std::span<const int32_t>> tables = {table};
  const int64_t n = std::ssize(prompt);
  std::vector<float> logits;
  auto prefill = [&](PagedKvCache* cache) {
    SequenceSpan span{0, 0, n};
    ASSERT_TRUE(
        (*m)->Forward(prompt, {&span, 1}, tables, cache, LogitsFor::kAllTokens, &logits).ok());
  };
  PagedKvCache tree_cache = (*m)->NewPagedCache(num_blocks, c.block_size);
  prefill(&tree_cache);
  SequenceSpan tree{0, n, std::ssize(tree_tokens), parents};
  std::vector<float> tree_logits;
  ASSERT_TRUE((*m)->Forward(tree_tokens, {&tree, 1}, tables, &tree_cache,
                            LogitsFor::kLastTokenOfEachSequence, &tree_logits)
                  .ok());
  const int64_t v = cfg.vocab_size;
  ASSERT_EQ(std::ssize(tree_logits), std::ssize(tree_tokens) * v);
  for (const auto& chain : chains) {
    PagedKvCache cache = (*m)->NewPagedCache(num_blocks, c.block_size);
    prefill(&cache);
    std::vector<int32_t> tokens;
    for (int32_t j : chain) tokens.push_back(tree_tokens[j]);
    SequenceSpan span{0, n, std::ssize(tokens)};
    std::vector<float> chain_logits;
    ASSERT_TRUE(
        (*m)->Forward(tokens, {&span, 1}, tables, &cache, LogitsFor::kAllTokens, &chain_logits)
            .ok());
    for (size_t i = 0; i < chain.size(); ++i) {
      std::vector<float> got(tree_logits.begin() + chain[i] * v,
                             tree_logits.begin() + (chain[i] + 1) * v);
      std::vector<float> want(chain_logits.begin() + static_cast<int64_t>(i) * v,
                              chain_logits.begin() + static_cast<int64_t>(i + 1) * v);
      ExpectClose(got, want, "tree node vs chain");
    }
  }
}

TEST(PagedForwardTest, RefusesMalformedTrees) {
  model::ModelConfig cfg = testing::TinyLlamaConfig();
  auto weights = testing::RandomWeights(cfg, 5, 0.3f);
  auto m = LlamaModel::Create(cfg, weights, Backend::kReference);
  ASSERT_TRUE(m.ok()) << m.status();
  PagedKvCache paged = (*m)->NewPagedCache(4, 4);
  std::vector<int32_t> tokens = {1, 2, 3}, table = {0, 1};
  std::vector<std::span<const int32_t>> tables = {table};
  std::vector<float> logits;
  const std::vector<int32_t> later = {-1, 2, 0}, no_root = {0, 0, 1}, short_parents = {-1, 0};
  for (const auto* parents : {&later, &no_root, &short_parents}) {
    SequenceSpan span{0, 0, 3, *parents};
    Status s = (*m)->Forward(tokens, {&span, 1}, tables, &paged, LogitsFor::kAllTokens, &logits);
    EXPECT_NE(s.message().find("token tree"), std::string::npos) << s;
  }
  KvCache contiguous = (*m)->NewCache(1, 8);
  SequenceSpan span{0, 0, 3, later};
  Status s = (*m)->Forward(tokens, {&span, 1}, &contiguous, LogitsFor::kAllTokens, &logits);
  EXPECT_NE(s.message().find("paged KV cache"), std::string::npos) << s;
}

TEST(PagedForwardTest, RefusesShortTablesAndBadBlockIds) {
  model::ModelConfig cfg = testing::TinyLlamaConfig();
  auto weights = testing::RandomWeights(cfg, 5, 0.3f);
  auto m = LlamaModel::Create(cfg, weights, Backend::kReference);
  ASSERT_TRUE(m.ok()) << m.status();
  PagedKvCache paged = (*m)->NewPagedCache(4, 2);
  std::vector<int32_t> tokens = {1, 2, 3};
  SequenceSpan span{0, 0, 3};
  std::vector<float> logits;
  std::vector<int32_t> short_table = {0}, bad = {0, 9};
  std::vector<std::span<const int32_t>> t1 = {short_table}, t2 = {bad}, none;
  Status s = (*m)->Forward(tokens, {&span, 1}, t1, &paged, LogitsFor::kAllTokens, &logits);
  EXPECT_NE(s.message().find("holds 2 tokens"), std::string::npos) << s;
  s = (*m)->Forward(tokens, {&span, 1}, t2, &paged, LogitsFor::kAllTokens, &logits);
  EXPECT_NE(s.message().find("block id 9"), std::string::npos) << s;
  s = (*m)->Forward(tokens, {&span, 1}, none, &paged, LogitsFor::kAllTokens, &logits);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace laminar::engine
