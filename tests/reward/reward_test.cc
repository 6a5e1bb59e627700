// Built-in rewards: scores on hand-made responses and the registry's errors.
#include "reward/reward.h"

#include <gtest/gtest.h>

namespace laminar::reward {
namespace {

double Score(const RewardFn& f, std::string_view response, std::string_view truth) {
  auto r = f({.data_source = "test",
              .solution_str = response,
              .ground_truth = truth,
              .extra_info_json = ""});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->score : -1;
}

TEST(RewardTest, ExactMatchIgnoresSurroundingWhitespaceOnly) {
  auto f = BuiltinReward("exact_match");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Score(*f, "  42\n", "42"), 1.0);
  EXPECT_EQ(Score(*f, "4 2", "42"), 0.0);
  EXPECT_EQ(Score(*f, "", ""), 1.0);
}

TEST(RewardTest, ContainsFindsTheGroundTruthAnywhere) {
  auto f = BuiltinReward("contains");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Score(*f, "Once upon a time the cat", "cat"), 1.0);
  EXPECT_EQ(Score(*f, "Once upon a time", "dog"), 0.0);
  auto empty =
      (*f)({.data_source = "", .solution_str = "x", .ground_truth = "", .extra_info_json = ""});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
}

TEST(RewardTest, UnknownNamesListTheBuiltins) {
  auto f = BuiltinReward("gsm9k");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("gsm9k"), std::string::npos);
  EXPECT_NE(f.status().message().find("exact_match"), std::string::npos);
}

}  // namespace
}  // namespace laminar::reward
