// The format reward: full match, partial credit, no match, options, and PCRE2 errors.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "reward/reward.h"
#include "tests/reward/reward_test_util.h"

namespace laminar::reward {
namespace {

constexpr const char* kThinkAnswer = R"(<think>.*</think>\s*<answer>.*</answer>)";

TEST(FormatRewardTest, FullMatchPartialAndNone) {
  RewardFn f = MustMake({.name = "format",
                         .weight = 1,
                         .params = {{"pattern", kThinkAnswer}, {"partial_credit", "0.5"}}});
  EXPECT_EQ(Score(f, "<think>a\nb</think>\n<answer>42</answer>\n", ""), 1.0);  // trimmed; dotall
  EXPECT_EQ(Score(f, "Sure! <think>a</think><answer>42</answer>", ""), 0.5);
  EXPECT_EQ(Score(f, "<answer>42</answer>", ""), 0.0);
  EXPECT_EQ(Score(f, "", ""), 0.0);
  RewardFn strict =
      MustMake({.name = "format", .weight = 1, .params = {{"pattern", kThinkAnswer}}});
  EXPECT_EQ(Score(strict, "Sure! <think>a</think><answer>42</answer>", ""), 0.0);
  // Invalid UTF-8 in a response is not an error; its bytes match nothing, not even '.'.
  EXPECT_EQ(Score(strict, "<think>\xff\xfe</think><answer>1</answer>", ""), 0.0);
  EXPECT_EQ(Score(f, "\xff<think></think><answer>1</answer>", ""), 0.5);
}

TEST(FormatRewardTest, DotallAndMultilineOptions) {
  RewardFn no_dotall = MustMake(
      {.name = "format", .weight = 1, .params = {{"pattern", "a.b"}, {"dotall", "false"}}});
  EXPECT_EQ(Score(no_dotall, "a\nb", ""), 0.0);
  EXPECT_EQ(Score(no_dotall, "axb", ""), 1.0);
  RewardFn multiline = MustMake(
      {.name = "format",
       .weight = 1,
       .params = {{"pattern", "^#### \\d+$"}, {"multiline", "yes"}, {"partial_credit", "0.25"}}});
  EXPECT_EQ(Score(multiline, "work\n#### 12\n", ""), 0.25);
}

TEST(FormatRewardTest, BadParamsAreErrorsNamingThem) {
  auto bad_regex = MakeReward({.name = "format", .weight = 1, .params = {{"pattern", "(<think>"}}});
  ASSERT_FALSE(bad_regex.ok());
  EXPECT_EQ(bad_regex.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_regex.status().message().find("at offset 8"), std::string::npos)
      << bad_regex.status();
  EXPECT_NE(bad_regex.status().message().find("missing closing parenthesis"), std::string::npos)
      << bad_regex.status();
  const std::pair<std::map<std::string, std::string>, std::string> cases[] = {
      {{}, "param pattern: missing"},
      {{{"pattern", "x"}, {"patern", "y"}}, "unknown param 'patern'"},
      {{{"pattern", "x"}, {"partial_credit", "half"}},
       "partial_credit: expected a number, got 'half'"},
      {{{"pattern", "x"}, {"partial_credit", "2"}}, "not in [0, 1]"},
      {{{"pattern", "x"}, {"dotall", "maybe"}}, "dotall: expected true or false"},
  };
  for (const auto& [params, what] : cases) {
    auto r = MakeReward({.name = "format", .weight = 1, .params = params});
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  }
}

TEST(FormatRewardTest, PathologicalPatternIsAnErrorNotAHang) {
  RewardFn f = MustMake({.name = "format", .weight = 1, .params = {{"pattern", "(a+)+$"}}});
  auto r = f({.data_source = "",
              .solution_str = std::string(40, 'a') + "!",
              .ground_truth = "",
              .extra_info_json = ""});
  // PCRE2's own optimizations may find the answer quickly; either way no crash and no hang.
  if (r.ok()) {
    EXPECT_EQ(r->score, 0.0);
  } else {
    EXPECT_NE(r.status().message().find("matching failed"), std::string::npos) << r.status();
  }
}

TEST(FormatRewardTest, OneRewardServesManyThreads) {
  RewardFn f = MustMake({.name = "format", .weight = 1, .params = {{"pattern", "\\d+"}}});
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto r = f({.data_source = "",
                    .solution_str = (i % 2 == 0 ? "123" : "12a"),
                    .ground_truth = "",
                    .extra_info_json = ""});
        if (!r.ok() || r->score != (i % 2 == 0 ? 1.0 : 0.0)) ++wrong[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int w : wrong) EXPECT_EQ(w, 0);
}

}  // namespace
}  // namespace laminar::reward
