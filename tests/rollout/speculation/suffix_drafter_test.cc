// The suffix drafter: drafts what a group sibling or a recent response wrote after the same
// suffix, and nothing below its thresholds.
#include <gtest/gtest.h>

#include "tests/rollout/speculation/speculation_test_util.h"

namespace laminar::rollout {
namespace {

using namespace spec_test;  // NOLINT(google-build-using-namespace): the tests' own helpers

TEST(SuffixDrafterTest, DraftsWhatAGroupSiblingWroteAfterTheSameSuffix) {
  SuffixDrafter d({});
  const std::vector<int32_t> prompt = {50, 51, 52};
  std::vector<int32_t> sibling = prompt, other_group = prompt;
  for (int32_t t : {7, 8, 9, 10, 11, 12}) sibling.push_back(t);
  for (int32_t t : {7, 8, 30, 31, 32, 33}) other_group.push_back(t);
  DraftContext ctx{.seq = 1,
                   .group = 5,
                   .tokens = sibling,
                   .num_prompt_tokens = 3,
                   .max_nodes = 8,
                   .sampling = nullptr};
  d.Propose(ctx);  // indexes the sibling
  ctx = {.seq = 3,
         .group = 6,
         .tokens = other_group,
         .num_prompt_tokens = 3,
         .max_nodes = 8,
         .sampling = nullptr};
  d.Propose(ctx);  // another group: never visible to group 5
  std::vector<int32_t> me = prompt;
  me.push_back(7);
  me.push_back(8);
  ctx = {.seq = 2,
         .group = 5,
         .tokens = me,
         .num_prompt_tokens = 3,
         .max_nodes = 3,
         .sampling = nullptr};
  DraftTree tree = d.Propose(ctx);
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{9, 10, 11}));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{0, 1, 2}));
  // The sibling finishes: its response stays visible to everyone as a recent response.
  d.OnSequenceEnd(1, 5, sibling, 3);
  d.OnSequenceEnd(3, 6, other_group, 3);
  ctx = {.seq = 9,
         .group = 77,
         .tokens = me,
         .num_prompt_tokens = 3,
         .max_nodes = 8,
         .sampling = nullptr};
  tree = d.Propose(ctx);
  // Two continuations of "7 8": 9 10 11 12 (older) and 30 31 32 33 (newer), a branch at the root.
  ASSERT_EQ(tree.size(), 8);
  EXPECT_EQ(std::count(tree.parents.begin(), tree.parents.end(), 0), 2);
  EXPECT_TRUE(tree.Validate(100).ok());
  d.OnSequenceEnd(2, 5, me, 3);
  d.OnSequenceEnd(9, 77, me, 3);
  EXPECT_EQ(d.num_documents(), 4);  // four recent responses, no running sequence
}

TEST(SuffixDrafterTest, NoMatchNoDraftAndSharesBelowTheThresholdAreDropped) {
  SuffixDrafterConfig c;
  c.min_share = 0.6;
  c.recent_responses = 1;
  SuffixDrafter d(c);
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 5, 6}, q = {9, 1, 2};
  DraftContext ctx{.seq = 1,
                   .group = 1,
                   .tokens = a,
                   .num_prompt_tokens = 0,
                   .max_nodes = 4,
                   .sampling = nullptr};
  EXPECT_EQ(d.Propose(ctx).size(), 0);  // nothing indexed yet but itself
  ctx.seq = 2;
  ctx.tokens = b;
  d.Propose(ctx);
  ctx.seq = 3;
  ctx.tokens = q;
  // "1 2" continues as "3 4" and "5 6": each half the continuations, under min_share 0.6.
  EXPECT_EQ(d.Propose(ctx).size(), 0);
  d.OnSequenceEnd(1, 1, a, 0);
  d.OnSequenceEnd(2, 1, b, 0);
  d.OnSequenceEnd(3, 1, q, 0);
  EXPECT_EQ(d.num_documents(), 1);  // recent_responses = 1
}

}  // namespace
}  // namespace laminar::rollout
