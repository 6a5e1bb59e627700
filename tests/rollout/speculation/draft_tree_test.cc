// VerifyTree's exactness on a synthetic Markov model: greedy paths, and chi-square tests of the
// one- and two-token distributions for deterministic and sampling drafters at temperature 1 and 0.7
// with top-p; DraftTree's validation and truncation.
#include <gtest/gtest.h>

#include "tests/rollout/speculation/speculation_test_util.h"

namespace laminar::rollout {
namespace {

using namespace spec_test;  // NOLINT(google-build-using-namespace): the tests' own helpers

TEST(ChiSquareTest, KnownPValues) {
  // Chi-square upper tails: (3.841, 1 dof) and (18.307, 10 dof) are the 5% points.
  EXPECT_NEAR(GammaQ(0.5, 3.841 / 2), 0.05, 1e-3);
  EXPECT_NEAR(GammaQ(5, 18.307 / 2), 0.05, 1e-3);
}

TEST(VerifyTreeTest, DeterministicDrafterKeepsTheDistribution) {
  for (const Setting s : {Setting{1.0f, 1.0f}, Setting{0.7f, 0.9f}}) {
    CheckTwoTokenDistribution(FixedTree, s, 11);
  }
}

TEST(VerifyTreeTest, SamplingDrafterKeepsTheDistribution) {
  const auto q_logits = RandomLogits(99, 1.0f);
  for (const Setting s : {Setting{1.0f, 1.0f}, Setting{0.7f, 0.9f}}) {
    engine::SamplingParams drafter_params;
    drafter_params.temperature = s.temperature;
    drafter_params.top_p = s.top_p;
    CheckTwoTokenDistribution(SampledTree(q_logits, drafter_params), s, 12);
  }
}

TEST(VerifyTreeTest, GreedyAcceptsExactlyTheArgmaxPath) {
  const auto m = RandomLogits(3, 2.0f);
  engine::SamplingParams params;
  params.temperature = 0;
  params.logprobs = 2;
  auto argmax = [&](int32_t t) {
    return static_cast<int32_t>(std::max_element(m[t].begin(), m[t].end()) - m[t].begin());
  };
  const int32_t root = 1, g1 = argmax(root), g2 = argmax(g1), g3 = argmax(g2);
  DraftTree tree;
  // root -> {wrong, g1}, g1 -> {g2}, g2 -> {wrong}: accepts g1, g2, then emits g3.
  tree.tokens = {(g1 + 1) % static_cast<int32_t>(kV), g1, g2, (g3 + 1) % static_cast<int32_t>(kV)};
  tree.parents = {0, 0, 2, 3};
  engine::Sampler sampler(params);
  const VerifiedPath path = VerifyTree(tree, TreeLogits(m, root, tree), kV, sampler);
  EXPECT_EQ(path.accepted_nodes, (std::vector<int32_t>{2, 3}));
  ASSERT_EQ(path.tokens.size(), 3u);
  int32_t last = root;
  for (const auto& t : path.tokens) {
    engine::Sampler plain(params);
    const engine::SampledToken want = plain.Sample(m[last]);
    EXPECT_EQ(t.id, want.id);
    EXPECT_EQ(t.logprob, want.logprob);
    EXPECT_EQ(t.top, want.top);
    last = t.id;
  }
}

TEST(DraftTreeTest, ValidateAndTruncate) {
  DraftTree t;
  t.tokens = {1, 2, 3};
  t.parents = {0, 1, 1};
  EXPECT_TRUE(t.Validate(kV).ok());
  EXPECT_EQ(t.SpanParents(), (std::vector<int32_t>{-1, 0, 1, 1}));
  t.Truncate(2);
  EXPECT_EQ(t.size(), 2);
  t.parents = {0, 2};
  EXPECT_NE(t.Validate(kV).message().find("node 2 has parent 2"), std::string::npos);
  t.parents = {0, 1};
  t.tokens = {1, 9};
  EXPECT_NE(t.Validate(kV).message().find("outside the vocabulary"), std::string::npos);
}

}  // namespace
}  // namespace laminar::rollout
