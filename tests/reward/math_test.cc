// The math reward: every MATH-500 answer scores 1 against itself and against reformatted
// equivalents built here; normalization, evaluation and known non-equivalents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <numbers>
#include <regex>
#include <string>
#include <vector>

#include "reward/answer.h"
#include "reward/reward.h"
#include "tests/reward/reward_test_util.h"
#include "tests/test_util.h"

namespace laminar::reward {
namespace {

std::string Replaced(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) {
    s.replace(pos, from.size(), to);
  }
  return s;
}

bool IsInteger(const std::string& s) { return std::regex_match(s, std::regex("-?[0-9]+")); }

// Equivalent spellings of a MATH answer, each a different normalization rule's business.
std::vector<std::string> Reformattings(const std::string& a) {
  std::vector<std::string> out;
  if (a.find("\\frac") != std::string::npos) out.push_back(Replaced(a, "\\frac", "\\dfrac"));
  if (a.find("\\dfrac") != std::string::npos) out.push_back(Replaced(a, "\\dfrac", "\\frac"));
  // Spaces around separators and operators.
  std::string spaced;
  for (char c : a) {
    if (c == ',' || c == '+' || c == '=') {
      spaced += std::string("  ") + c + " ";
    } else {
      spaced += c;
    }
  }
  out.push_back(" " + spaced + " ");
  // \left \right added to parentheses and brackets, or dropped where the answer has them.
  if (a.find("\\left") != std::string::npos) {
    out.push_back(Replaced(Replaced(a, "\\left", ""), "\\right", ""));
  } else if (a.find_first_of("()[]") != std::string::npos &&
             a.find("\\sqrt[") == std::string::npos) {
    std::string lr;
    for (char c : a) {
      if (c == '(' || c == '[') {
        lr += std::string("\\left") + c;
      } else if (c == ')' || c == ']') {
        lr += std::string("\\right") + c;
      } else {
        lr += c;
      }
    }
    out.push_back(lr);
  }
  // \text{} wrapping and unwrapping; units; degrees; a leading "x =".
  std::smatch m;
  if (std::regex_match(a, m, std::regex(R"(\\text\{([A-Za-z() ]+)\})"))) {
    out.push_back(m[1]);
  }
  if (std::regex_match(a, std::regex(R"(-?[0-9.]+)"))) {
    out.push_back("\\text{" + a + "}");
    out.push_back(a + " \\text{ units}");
    out.push_back(a + "^\\circ");
    out.push_back(a + "^{\\circ}");
    out.push_back("x = " + a);
    out.push_back("$" + a + "$.");
  }
  if (a.find("^\\circ") != std::string::npos) out.push_back(Replaced(a, "^\\circ", ""));
  // Equal numbers: N as N.0 and 2N/2; \frac{p}{q} as p/q and as a decimal; decimals as fractions.
  if (IsInteger(a)) {
    out.push_back(a + ".0");
    out.push_back("\\frac{" + std::to_string(2 * std::stoll(a)) + "}{2}");
  }
  if (std::regex_match(a, m, std::regex(R"((-?)\\d?frac\{([0-9]+)\}\{([0-9]+)\})"))) {
    out.push_back(std::string(m[1]) + std::string(m[2]) + "/" + std::string(m[3]));
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%s%.12g", std::string(m[1]).c_str(),
                  std::stod(m[2]) / std::stod(m[3]));
    out.push_back(buf);
  }
  if (std::regex_match(a, m, std::regex(R"(([0-9]*)\.([0-9]+))"))) {
    const std::string frac = std::string(m[1]) + std::string(m[2]);
    out.push_back("\\frac{" + std::to_string(std::stoll(frac)) + "}{1" +
                  std::string(std::string(m[2]).size(), '0') + "}");
  }
  return out;
}

// Each row's answer scores 1 against itself and against its reformattings; returns how many
// reformattings were checked.
int CheckMathRows(const std::vector<nlohmann::json>& rows) {
  RewardFn f = MustMake({.name = "math", .weight = 1, .params = {}});
  int reformatted = 0;
  for (const auto& row : rows) {
    const std::string answer = row["answer"].get<std::string>();
    SCOPED_TRACE("answer " + answer);
    EXPECT_EQ(Score(f, "Thus the answer is $\\boxed{" + answer + "}$.", answer), 1.0);
    EXPECT_TRUE(MathAnswersEquivalent(answer, answer));
    for (const std::string& variant : Reformattings(answer)) {
      EXPECT_EQ(Score(f, "So \\boxed{" + variant + "}", answer), 1.0) << "variant " << variant;
      EXPECT_EQ(Score(f, "So \\boxed{" + answer + "}", variant), 1.0) << "variant " << variant;
      ++reformatted;
    }
  }
  return reformatted;
}

// The project's MATH-shaped answers: fractions (nested too), intervals, lists, degrees, text,
// radicals, bases, negatives, sets.
TEST(MathRewardTest, ProjectAnswersScoreOneAgainstThemselvesAndTheirReformattings) {
  auto rows = ReadJsonl(std::string(LAMINAR_SOURCE_DIR) + "/tests/data/datasets/math_shaped.jsonl");
  ASSERT_EQ(rows.size(), 14u);
  EXPECT_GT(CheckMathRows(rows), 10);
}

// MATH-500 (an outside golden).
TEST(MathRewardTest, EveryMath500AnswerScoresOneAgainstItselfAndItsReformattings) {
  LAMINAR_SHARED_OR_SKIP(path, "datasets/math500/test.jsonl");
  auto rows = ReadJsonl(path);
  ASSERT_EQ(rows.size(), 500u);
  EXPECT_GT(CheckMathRows(rows), 1000);
}

TEST(MathRewardTest, KnownNonEquivalentsScoreZero) {
  RewardFn f = MustMake({.name = "math", .weight = 1, .params = {}});
  const std::pair<const char*, const char*> cases[] = {
      {"\\frac{1}{2}", "\\frac{1}{3}"},
      {"90^\\circ", "91"},
      {"x^3+3x-6", "x^3+3x+6"},
      {"(3,4]", "[3,4]"},
      {"\\text{east}", "\\text{west}"},
      {"(6,31,-1)", "(6,31,1)"},
      {"\\sqrt{51}", "\\sqrt{52}"},
      {"3\\sqrt{13}", "13\\sqrt{3}"},
      {"1,-2", "1,2"},
      {"2k+2", "2k"},
      {"6 - 5i", "6+5i"},
      {"52_8", "52"},
      {"\\pi", "3.14"},
      {"(-\\infty, 0]", "(-\\infty, 0)"},
      {"\\text{(C)}", "\\text{(B)}"},
      {"10,\\!080", "10,008"},
      {"\\frac{3}{56}", "\\frac{56}{3}"},
      {"(2,4)", "(4,2)"},
  };
  for (const auto& [truth, response] : cases) {
    EXPECT_EQ(Score(f, std::string("\\boxed{") + response + "}", truth), 0.0)
        << truth << " vs " << response;
    EXPECT_FALSE(MathAnswersEquivalent(truth, response)) << truth << " vs " << response;
  }
}

TEST(MathRewardTest, EquivalentsAcrossRules) {
  const std::pair<const char*, const char*> cases[] = {
      {"\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}"},
      {"1\\frac{4}{5}", "1.8"},
      {"137 \\frac{1}{2}", "275/2"},
      {"\\$32,\\!348", "32348"},
      {"11,\\! 111,\\! 111,\\! 100", "11111111100"},
      {"1,-2", "-2, 1"},
      {"\\{1\\pm\\sqrt{5},-2\\}", "\\{-2, 1\\pm\\sqrt{5}\\}"},
      {"(0,9) \\cup (9,36)", "(0, 9)\\cup(9, 36)"},
      {"\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}",
       "\\begin{pmatrix} -\\frac{1}{3} \\\\ \\frac23 \\\\ \\frac{5}{3} \\end{pmatrix}"},
      {"864 \\mbox{ inches}^2", "864"},
      {"\\frac{270}7\\text{ degrees}", "\\frac{270}{7}"},
      {"5.4 \\text{ cents}", "5.4"},
      {"y = 2x + 3", "2x+3"},
      {"x \\in [-2,7]", "[-2, 7]"},
      {"\\text{(C)}", "C"},
      {"50\\%", "50"},
      {"\\frac 59", "\\dfrac{5}{9}"},
      {"11\\sqrt2", "11 \\sqrt{2}"},
      {"\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\pi/2)"},
      {"2\\sqrt{2}", "\\sqrt{8}"},
      {"90^\\circ", "90\xC2\xB0"},
  };
  for (const auto& [a, b] : cases) {
    EXPECT_TRUE(MathAnswersEquivalent(a, b))
        << a << " vs " << b << ": normalized '" << NormalizeMathAnswer(a) << "' vs '"
        << NormalizeMathAnswer(b) << "'";
  }
}

TEST(MathRewardTest, NormalizesLatex) {
  EXPECT_EQ(NormalizeMathAnswer("\\left( 3, \\dfrac{\\pi}{2} \\right)"), "(3,\\frac{\\pi}{2})");
  EXPECT_EQ(NormalizeMathAnswer("\\frac12"), "\\frac{1}{2}");
  EXPECT_EQ(NormalizeMathAnswer("\\frac{270}7\\text{ degrees}"), "\\frac{270}{7}");
  EXPECT_EQ(NormalizeMathAnswer("\\text{Evelyn}"), "Evelyn");
  EXPECT_EQ(NormalizeMathAnswer("x = 5."), "5");
  EXPECT_EQ(NormalizeMathAnswer("10,\\!080"), "10,080");
  EXPECT_EQ(NormalizeMathAnswer("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
            "\\begin{pmatrix}1\\\\2\\end{pmatrix}");
  EXPECT_EQ(NormalizeMathAnswer("\\leftarrow"), "\\leftarrow");
}

TEST(MathRewardTest, EvaluatesNumbersOnly) {
  EXPECT_DOUBLE_EQ(EvaluateMathNumber("\\frac{3}{2}").value(), 1.5);
  EXPECT_DOUBLE_EQ(EvaluateMathNumber("-\\frac{\\pi}{6}").value(), -std::numbers::pi / 6);
  EXPECT_DOUBLE_EQ(EvaluateMathNumber("3\\sqrt{13}").value(), 3 * std::sqrt(13.0));
  EXPECT_DOUBLE_EQ(EvaluateMathNumber(".0000672").value(), 0.0000672);
  EXPECT_DOUBLE_EQ(EvaluateMathNumber("2^{10}").value(), 1024);
  EXPECT_DOUBLE_EQ(EvaluateMathNumber("\\sqrt[3]{27}").value(), 3);
  for (const char* s :
       {"2k", "x", "1,-2", "6-5i", "52_8", "\\frac{1}{0}", "", "(1", "\\infty", "2^{100000}"}) {
    EXPECT_FALSE(EvaluateMathNumber(s).has_value()) << s;
  }
  // Deep nesting is refused, not a stack overflow.
  EXPECT_FALSE(
      EvaluateMathNumber(std::string(100000, '(') + "1" + std::string(100000, ')')).has_value());
  EXPECT_FALSE(EvaluateMathNumber(std::string(100000, '-') + "1").has_value());
  EXPECT_DOUBLE_EQ(EvaluateMathNumber("--1").value(), 1);
}

TEST(MathRewardTest, ExtractsTheLastBoxWithNestedBraces) {
  EXPECT_EQ(LastBoxedContent("\\boxed{1} then \\boxed{\\frac{1}{2}}").value(), "\\frac{1}{2}");
  EXPECT_EQ(LastBoxedContent("$\\boxed 5$").value(), "5");
  EXPECT_EQ(LastBoxedContent("\\fbox{x}").value(), "x");
  EXPECT_EQ(LastBoxedContent("\\boxed{\\{1,2\\}}").value(), "\\{1,2\\}");
  EXPECT_FALSE(LastBoxedContent("\\boxed{\\frac{1}{2}").has_value());
  EXPECT_FALSE(LastBoxedContent("no box").has_value());
}

TEST(MathRewardTest, GroundTruthMayBeASolutionAndNoBoxScoresZero) {
  RewardFn f = MustMake({.name = "math", .weight = 1, .params = {{"format_score", "0.25"}}});
  EXPECT_EQ(Score(f, "\\boxed{14/3}", "We get $x = \\boxed{\\frac{14}{3}}$."), 1.0);
  EXPECT_EQ(Score(f, "the answer is 14/3", "\\frac{14}{3}"), 0.0);
  EXPECT_EQ(Score(f, "\\boxed{5}", "\\frac{14}{3}"), 0.25);
  auto r = f({.data_source = "math",
              .solution_str = "\\boxed{1}",
              .ground_truth = "\\boxed{1",
              .extra_info_json = ""});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  auto empty = f({.data_source = "math",
                  .solution_str = "\\boxed{1}",
                  .ground_truth = "  ",
                  .extra_info_json = ""});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace laminar::reward
