// The gsm8k reward: every GSM8K test answer scores 1 against itself and 0 against N+1, and the
// number extraction rules on hand-made responses.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "reward/answer.h"
#include "reward/reward.h"
#include "tests/reward/reward_test_util.h"
#include "tests/test_util.h"

namespace laminar::reward {
namespace {

// Each row's final answer (after "####") scores 1 against the row's answer in GSM8K's and in
// \boxed{} form, and its successor scores 0. Returns the rows checked.
int CheckGsm8kRows(const std::vector<nlohmann::json>& rows) {
  RewardFn f = MustMake({.name = "gsm8k", .weight = 1, .params = {}});
  int checked = 0;
  for (const auto& row : rows) {
    const std::string answer = row["answer"].get<std::string>();
    const size_t hashes = answer.rfind("####");
    EXPECT_NE(hashes, std::string::npos) << answer;
    if (hashes == std::string::npos) continue;
    std::string n = answer.substr(hashes + 4);
    n = n.substr(n.find_first_not_of(' '));
    n = n.substr(0, n.find(' '));  // text after the number ("#### 13 dollars")
    std::string digits;
    for (char c : n) {
      if (c != ',') digits += c;
    }
    const double value = std::stod(digits);
    EXPECT_EQ(value, std::floor(value)) << n;
    if (row.contains("expected")) {
      EXPECT_EQ(value, row["expected"].get<double>()) << answer;
    }
    const std::string plus_one = std::to_string(static_cast<long long>(value) + 1);
    SCOPED_TRACE("answer " + n);
    EXPECT_EQ(Score(f, "The total is computed above.\n#### " + n, answer), 1.0);
    EXPECT_EQ(Score(f, "So the answer is $\\boxed{" + n + "}$.", answer), 1.0);
    EXPECT_EQ(Score(f, "#### " + n, n), 1.0);  // a bare number as the ground truth
    EXPECT_EQ(Score(f, "#### " + n, plus_one), 0.0);
    EXPECT_EQ(Score(f, "\\boxed{" + n + "}", plus_one), 0.0);
    ++checked;
  }
  return checked;
}

// The project's GSM8K-shaped rows: thousands separators, negatives, no space after "####", text
// after the number, a curly apostrophe.
TEST(Gsm8kRewardTest, ProjectRowsScoreOneAgainstThemselvesAndZeroAgainstNPlusOne) {
  auto rows =
      ReadJsonl(std::string(LAMINAR_SOURCE_DIR) + "/tests/data/datasets/gsm8k_shaped.jsonl");
  ASSERT_EQ(rows.size(), 10u);
  EXPECT_EQ(CheckGsm8kRows(rows), 10);
}

// GSM8K's real test split (an outside golden).
TEST(Gsm8kRewardTest, EveryTestAnswerScoresOneAgainstItselfAndZeroAgainstNPlusOne) {
  LAMINAR_SHARED_OR_SKIP(path, "datasets/gsm8k/test.jsonl");
  auto rows = ReadJsonl(path);
  ASSERT_EQ(rows.size(), 1319u);
  EXPECT_EQ(CheckGsm8kRows(rows), 1319);
}

TEST(Gsm8kRewardTest, FindsNumbersWithCommasSignsAndCurrency) {
  EXPECT_EQ(FindNumbers("1,000 and 2,5 and 12,3456"), (std::vector<double>{1000, 2, 5, 12, 3456}));
  EXPECT_EQ(FindNumbers("-5 apples, 5-3, x-2, (-7), $-4, -$6, \\$1,234.50"),
            (std::vector<double>{-5, 5, 3, 2, -7, -4, -6, 1234.5}));
  EXPECT_EQ(FindNumbers("\xE2\x88\x92"
                        "12 apples"),
            (std::vector<double>{-12}));
  EXPECT_EQ(FindNumbers("18. Then .5 and 3.25."), (std::vector<double>{18, 0.5, 3.25}));
  EXPECT_TRUE(FindNumbers("no numbers here").empty());
}

TEST(Gsm8kRewardTest, ExtractsHashesThenBoxedThenTheLastNumber) {
  auto v = [](std::string_view s) { return ExtractGsm8kAnswer(s).value_or(-999); };
  EXPECT_EQ(v("She pays 3 * 4 = 12 dollars.\n#### $1,000."), 1000);
  EXPECT_EQ(v("#### 18 dollars\nand then 99 more words"), 18);
  EXPECT_EQ(v("#### -10"), -10);
  EXPECT_EQ(v("First 5.\n#### 7\nnoise\n#### 9"), 9);  // the last ####
  EXPECT_EQ(v("$\\boxed{42}$ and later 17"), 42);
  EXPECT_EQ(v("\\boxed{2 \\times 9 = 18 \\text{ eggs}}"), 18);
  EXPECT_EQ(v("\\boxed{\\$1,200}"), 1200);
  EXPECT_EQ(v("So 16 - 3 - 4 = 9 eggs are sold, at $2 each: 18 dollars."), 18);
  EXPECT_EQ(v("The answer is 7.5 kg."), 7.5);
  EXPECT_FALSE(ExtractGsm8kAnswer("I do not know.").has_value());
  EXPECT_EQ(v("#### none\n the answer is 4"), 4);  // no number after ####: falls back
}

TEST(Gsm8kRewardTest, ScoresNumericallyWithTolerance) {
  RewardFn f = MustMake({.name = "gsm8k", .weight = 1, .params = {}});
  EXPECT_EQ(Score(f, "#### 18.0", "18"), 1.0);
  EXPECT_EQ(Score(f, "#### 18.001", "18"), 0.0);
  EXPECT_EQ(Score(f, "#### 18.000001", "18"), 0.0);
  EXPECT_EQ(Score(f, "#### 18.0000000001", "18"), 1.0);  // within the relative 1e-9
  EXPECT_EQ(Score(f, "#### 1000", "1,000"), 1.0);
  EXPECT_EQ(Score(f, "#### -3", "-3"), 1.0);
  EXPECT_EQ(Score(f, "#### 3", "-3"), 0.0);
  EXPECT_EQ(Score(f, "the answer is $1,000.", "#### 1000"), 1.0);
  EXPECT_EQ(Score(f, "nothing", "5"), 0.0);
  EXPECT_TRUE(NumbersEqual(1e10, 1e10 + 1));
  EXPECT_FALSE(NumbersEqual(1e8, 1e8 + 1));
  EXPECT_FALSE(NumbersEqual(0, 1e-12));
}

TEST(Gsm8kRewardTest, FormatScoreRewardsAWrongButExtractedAnswer) {
  RewardFn f = MustMake({.name = "gsm8k", .weight = 1, .params = {{"format_score", "0.1"}}});
  EXPECT_EQ(Score(f, "#### 4", "5"), 0.1);
  EXPECT_EQ(Score(f, "no answer", "5"), 0.0);
  EXPECT_EQ(Score(f, "#### 5", "5"), 1.0);
}

TEST(Gsm8kRewardTest, BadGroundTruthIsAnErrorQuotingIt) {
  RewardFn f = MustMake({.name = "gsm8k", .weight = 1, .params = {}});
  for (std::string_view truth : {"", "many", "#### lots", "3 or 4"}) {
    auto r = f({.data_source = "gsm8k",
                .solution_str = "#### 3",
                .ground_truth = truth,
                .extra_info_json = ""});
    ASSERT_FALSE(r.ok()) << truth;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("gsm8k"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("'" + std::string(truth)), std::string::npos) << r.status();
  }
  EXPECT_EQ(ParseGsm8kGroundTruth(" $42. ").value(), 42);
}

}  // namespace
}  // namespace laminar::reward
