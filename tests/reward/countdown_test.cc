// The countdown reward: a solution found by brute force for each of the 256 Countdown problems
// scores 1; reusing, missing or foreign numbers, forbidden operators and wrong values score 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "reward/answer.h"
#include "reward/reward.h"
#include "tests/reward/reward_test_util.h"
#include "tests/test_util.h"

namespace laminar::reward {
namespace {

struct Expr {
  double value;
  std::string text;
};

std::optional<Expr> Apply(const Expr& a, char op, const Expr& b) {
  double v = 0;
  switch (op) {
    case '+':
      v = a.value + b.value;
      break;
    case '-':
      v = a.value - b.value;
      break;
    case '*':
      v = a.value * b.value;
      break;
    default:
      if (b.value == 0) return std::nullopt;
      v = a.value / b.value;
  }
  return Expr{v, "(" + a.text + " " + op + " " + b.text + ")"};
}

// An expression over all of `numbers` (each once) equal to `target`, by brute force over orders,
// operators and both tree shapes of three leaves.
std::optional<std::string> Solve(const std::vector<int64_t>& numbers, int64_t target) {
  std::vector<int64_t> n = numbers;
  std::sort(n.begin(), n.end());
  const char ops[] = {'+', '-', '*', '/'};
  do {
    const Expr a{double(n[0]), std::to_string(n[0])}, b{double(n[1]), std::to_string(n[1])},
        c{double(n[2]), std::to_string(n[2])};
    for (char p : ops) {
      for (char q : ops) {
        for (int shape = 0; shape < 2; ++shape) {
          std::optional<Expr> e;
          if (shape == 0) {
            if (auto ab = Apply(a, p, b)) e = Apply(*ab, q, c);
          } else {
            if (auto bc = Apply(b, q, c)) e = Apply(a, p, *bc);
          }
          if (e && std::fabs(e->value - double(target)) < 1e-9) return e->text;
        }
      }
    }
  } while (std::next_permutation(n.begin(), n.end()));
  return std::nullopt;
}

std::string ProblemJson(const std::vector<int64_t>& numbers, int64_t target) {
  nlohmann::json j = {{"target", target}, {"numbers", numbers}};
  return j.dump();
}

// Each row's brute-force solution scores 1 in every answer form, and broken ones score 0.
void CheckCountdownRows(const std::vector<nlohmann::json>& rows) {
  RewardFn f = MustMake({.name = "countdown", .weight = 1, .params = {}});
  for (const auto& row : rows) {
    const std::string d1 = row.dump();  // the d1 dataset's own row as the ground truth
    CountdownProblem p = ParseCountdownProblem(d1).value();
    ASSERT_EQ(p.numbers.size(), 3u) << d1;
    const std::string verl = ProblemJson(p.numbers, p.target);
    SCOPED_TRACE(d1);
    std::optional<std::string> eq = Solve(p.numbers, p.target);
    ASSERT_TRUE(eq.has_value()) << "no solution found for " << d1;
    EXPECT_EQ(Score(f, "<think>search</think>\n<answer>" + *eq + "</answer>", d1), 1.0);
    EXPECT_EQ(Score(f, "<answer>" + *eq + " = " + std::to_string(p.target) + "</answer>", verl),
              1.0);
    EXPECT_EQ(Score(f, "I found it:\n" + *eq + " = " + std::to_string(p.target) + ".", verl), 1.0);
    EXPECT_TRUE(CheckCountdownEquation(*eq, p).ok());

    const std::string a = std::to_string(p.numbers[0]), b = std::to_string(p.numbers[1]),
                      c = std::to_string(p.numbers[2]);
    // A number used twice, one missing, and a foreign one.
    EXPECT_EQ(Score(f, "<answer>" + *eq + " + " + a + " - " + a + "</answer>", verl), 0.0);
    EXPECT_EQ(Score(f, "<answer>" + a + " + " + b + "</answer>", verl), 0.0);
    EXPECT_EQ(Score(f, "<answer>" + *eq + " * 1</answer>", verl), 0.0);
    // Forbidden operators and syntax, and a wrong value.
    EXPECT_EQ(Score(f, "<answer>" + a + " ^ " + b + " + " + c + "</answer>", verl), 0.0);
    EXPECT_EQ(Score(f, "<answer>" + a + " ** " + b + " + " + c + "</answer>", verl), 0.0);
    EXPECT_EQ(Score(f, "<answer>-" + a + " + " + b + " + " + c + "</answer>", verl), 0.0);
    EXPECT_EQ(Score(f, "<answer>" + *eq + "</answer>", ProblemJson(p.numbers, p.target + 1)), 0.0);
  }
}

// The project's Countdown-shaped rows: a subtraction inside parentheses, a product, equal
// numbers, a target of 0.
TEST(CountdownRewardTest, ProjectProblemsScoreOneSolvedAndZeroBroken) {
  auto rows =
      ReadJsonl(std::string(LAMINAR_SOURCE_DIR) + "/tests/data/datasets/countdown_shaped.jsonl");
  ASSERT_EQ(rows.size(), 10u);
  CheckCountdownRows(rows);
}

// The d1 Countdown test problems (an outside golden).
TEST(CountdownRewardTest, EveryProblemsBruteForceSolutionScoresOneAndBrokenOnesZero) {
  LAMINAR_SHARED_OR_SKIP(path, "datasets/countdown/countdown_cd3_test.jsonl");
  auto rows = ReadJsonl(path);
  ASSERT_EQ(rows.size(), 256u);
  CheckCountdownRows(rows);
}

TEST(CountdownRewardTest, ChecksEquationsWithReasons) {
  const CountdownProblem p{.target = 23, .numbers = {30, 100, 93}};
  EXPECT_TRUE(CheckCountdownEquation("100 - 93 + 30 - 14 + 14 - 14", p).message().find("14") !=
              std::string::npos);
  EXPECT_TRUE(CheckCountdownEquation("30 - (100 - 93)", p).ok());
  EXPECT_TRUE(CheckCountdownEquation("30 \xE2\x88\x92 (100 \xE2\x88\x92 93)", p).ok());  // U+2212
  auto msg = [&](std::string_view eq) { return CheckCountdownEquation(eq, p).message(); };
  EXPECT_NE(msg("30 - (100 - 93) + 30 - 30").find("uses 30 3 times"), std::string::npos);
  EXPECT_NE(msg("30 + 100").find("does not use 93"), std::string::npos);
  EXPECT_NE(msg("30 + 100 + 93").find("equals 223, not 23"), std::string::npos);
  EXPECT_NE(msg("30 / (100 - 93)").find("equals 30/7, not 23"), std::string::npos);
  EXPECT_NE(msg("30 ^ 100 - 93").find("'^' at offset 3"), std::string::npos);
  EXPECT_NE(msg("-30 + 100 - 93").find("no unary signs"), std::string::npos);
  EXPECT_NE(msg("(30 + 100 - 93").find("missing ')'"), std::string::npos);
  EXPECT_NE(msg("30.0 - (100 - 93)").find("'.' at offset 2"), std::string::npos);
  EXPECT_NE(msg("30 / (100 - 100) + 93").find("100"), std::string::npos);
  const CountdownProblem q{.target = 3, .numbers = {10, 5, 5}};
  EXPECT_NE(CheckCountdownEquation("10 / (5 - 5)", q).message().find("divides by zero"),
            std::string::npos);
  EXPECT_TRUE(CheckCountdownEquation("(10 + 5) / 5", q).ok());  // a repeated number, used twice
  EXPECT_EQ(CheckCountdownEquation("(10 + 5) / 5 / 5 * 5", q).code(), StatusCode::kInvalidArgument);
  const CountdownProblem half{.target = 1, .numbers = {1, 2, 2}};
  EXPECT_NE(CheckCountdownEquation("1 / 2 + 2", half).message().find("equals 5/2"),
            std::string::npos);
  // Huge values are refused, never wrapped around.
  const CountdownProblem big{.target = 1, .numbers = {999999999999999999, 999999999999999999, 9}};
  EXPECT_FALSE(CheckCountdownEquation("999999999999999999 * 999999999999999999 * 9", big).ok());
}

TEST(CountdownRewardTest, ExtractsTheEquation) {
  auto eq = [](std::string_view s) { return ExtractCountdownEquation(s).value_or("<none>"); };
  EXPECT_EQ(eq("<answer>1 + 2</answer> then <answer> (3 * 4) = 12 </answer>"), "(3 * 4)");
  EXPECT_EQ(eq("Step 1: 100 - 93 = 7\nStep 2: 30 - 7 = 23\nDone."), "30 - 7");
  EXPECT_EQ(eq("so 100 \xC3\xB7 4 \xC3\x97 2 works"), "100 \xC3\xB7 4 \xC3\x97 2");
  EXPECT_EQ(eq("no equation here, just 42"), "<none>");
  EXPECT_EQ(eq("<answer>   </answer>"), "<none>");
  EXPECT_EQ(eq(""), "<none>");
}

TEST(CountdownRewardTest, ParsesBothGroundTruthFormsAndNamesWhatIsWrong) {
  auto p = ParseCountdownProblem(R"({"target": "23", "numbers": "30, 100,93"})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->target, 23);
  EXPECT_EQ(p->numbers, (std::vector<int64_t>{30, 100, 93}));
  auto d1 = ParseCountdownProblem(R"({"input": "30,100,93", "output": "23"})");
  ASSERT_TRUE(d1.ok()) << d1.status();
  EXPECT_EQ(d1->numbers, p->numbers);
  const std::pair<const char*, const char*> bad[] = {
      {"not json", "not a JSON object"},
      {"[1, 2]", "not a JSON object"},
      {R"({"target": 23})", "missing 'numbers'"},
      {R"({"numbers": [1]})", "missing 'output'"},
      {R"({"target": 2.5, "numbers": [1]})", "'target' is not an integer"},
      {R"({"target": 2, "numbers": [1, "x"]})", "'numbers' is not a list of integers"},
      {R"({"target": 2, "numbers": []})", "'numbers' is not a list of integers"},
  };
  for (const auto& [truth, what] : bad) {
    auto r = ParseCountdownProblem(truth);
    ASSERT_FALSE(r.ok()) << truth;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
  }
  RewardFn f = MustMake({.name = "countdown", .weight = 1, .params = {{"format_score", "0.1"}}});
  EXPECT_EQ(Score(f, "<answer>30 + 100 + 93</answer>", R"({"target": 23, "numbers": [30,100,93]})"),
            0.1);
  auto err = f({.data_source = "countdown",
                .solution_str = "<answer>1</answer>",
                .ground_truth = "23",
                .extra_info_json = ""});
  EXPECT_NE(err.status().message().find("reward countdown"), std::string::npos) << err.status();
}

}  // namespace
}  // namespace laminar::reward
