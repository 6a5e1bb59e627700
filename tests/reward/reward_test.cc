// The reward registry: the simple built-ins, MakeReward's errors, weighted combination,
// ParseRewardSpecs and the data_source defaults.
#include "reward/reward.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>

#include "tests/reward/reward_test_util.h"

namespace laminar::reward {
namespace {

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

TEST(RewardTest, RegistryListsEveryBuiltin) {
  EXPECT_EQ(BuiltinRewardNames(),
            (std::vector<std::string>{"auto", "contains", "countdown", "exact_match", "format",
                                      "gsm8k", "math"}));
  for (const char* name : {"gsm8k", "math", "countdown", "auto"}) {
    EXPECT_TRUE(BuiltinReward(name).ok()) << name;
  }
  auto format = BuiltinReward("format");  // needs a pattern
  EXPECT_EQ(format.status().code(), StatusCode::kInvalidArgument);
  auto unknown = MakeReward({.name = "gsm8k", .weight = 1, .params = {{"strict", "1"}}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("reward gsm8k: unknown param 'strict' (params: "
                                            "format_score)"),
            std::string::npos)
      << unknown.status();
  auto no_params = MakeReward({.name = "contains", .weight = 1, .params = {{"x", "1"}}});
  EXPECT_NE(no_params.status().message().find("(params: none)"), std::string::npos)
      << no_params.status();
}

TEST(RewardTest, CombinesWithWeightsAndReportsEachComponent) {
  auto f = CombineRewards({{.name = "gsm8k", .weight = 0.8, .params = {}},
                           {.name = "format", .weight = 0.2, .params = {{"pattern", ".*#### .*"}}},
                           {.name = "format", .weight = -1, .params = {{"pattern", ".*sorry.*"}}}});
  ASSERT_TRUE(f.ok()) << f.status();
  auto r = (*f)({.data_source = "gsm8k",
                 .solution_str = "3 + 4 = 7\n#### 7",
                 .ground_truth = "7",
                 .extra_info_json = ""});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->score, 1.0);
  EXPECT_EQ(r->extra,
            (std::map<std::string, double>{
                {"reward/gsm8k", 1.0}, {"reward/format", 1.0}, {"reward/format_2", 0.0}}));
  r = (*f)({.data_source = "gsm8k",
            .solution_str = "sorry, 8",
            .ground_truth = "7",
            .extra_info_json = ""});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_DOUBLE_EQ(r->score, -1.0);
  // A component's error names it.
  auto e = (*f)({.data_source = "gsm8k",
                 .solution_str = "#### 7",
                 .ground_truth = "seven",
                 .extra_info_json = ""});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("reward/gsm8k"), std::string::npos) << e.status();
}

TEST(RewardTest, CombineRefusesEmptyBadWeightsAndBadComponents) {
  EXPECT_EQ(CombineRewards({}).status().code(), StatusCode::kInvalidArgument);
  auto nan = CombineRewards({{.name = "gsm8k", .weight = std::nan(""), .params = {}}});
  EXPECT_NE(nan.status().message().find("reward[0] (gsm8k): weight"), std::string::npos)
      << nan.status();
  auto bad = CombineRewards({{.name = "gsm8k", .weight = 1, .params = {}},
                             {.name = "format", .weight = 1, .params = {{"pattern", "("}}}});
  EXPECT_NE(bad.status().message().find("reward[1] (format)"), std::string::npos) << bad.status();
}

TEST(RewardTest, ParsesSpecsFromYaml) {
  auto one = ParseRewardSpecs(YAML::Load("gsm8k"), "reward");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].name, "gsm8k");
  EXPECT_EQ((*one)[0].weight, 1.0);
  auto map =
      ParseRewardSpecs(YAML::Load("{name: format, weight: 0.2, pattern: '^<think>'}"), "reward");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ((*map)[0].weight, 0.2);
  EXPECT_EQ((*map)[0].params, (std::map<std::string, std::string>{{"pattern", "^<think>"}}));
  auto list = ParseRewardSpecs(
      YAML::Load("[math, {name: format, weight: 0.1, pattern: 'x', partial_credit: 0.5}]"),
      "reward");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].params.at("partial_credit"), "0.5");
}

TEST(RewardTest, SpecErrorsNameThePath) {
  const std::pair<const char*, const char*> cases[] = {
      {"[gsm8k, {name: format, weight: high, pattern: x}]",
       "reward[1].weight: expected a number, got 'high'"},
      {"{weight: 1}", "reward.name: missing"},
      {"[gsm8k, {name: format}]", "reward[1]: reward format: param pattern: missing"},
      {"[gsm9k]", "reward[0]: no built-in reward named 'gsm9k'"},
      {"{name: format, pattern: [a, b]}", "reward.pattern: expected a scalar value"},
      {"[]", "reward: the list of rewards is empty"},
      {"~", "reward: missing"},
      {"[[gsm8k]]", "reward[0]: expected a reward name or a map with a name"},
      {"{name: math, format_score: x}",
       "reward: reward math: param format_score: expected a number"},
  };
  for (const auto& [yaml, what] : cases) {
    auto r = ParseRewardSpecs(YAML::Load(yaml), "reward");
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_EQ(r.status().code() == StatusCode::kInvalidArgument ||
                  r.status().code() == StatusCode::kNotFound,
              true);
    EXPECT_NE(r.status().message().find(what), std::string::npos) << yaml << ": " << r.status();
  }
}

TEST(RewardTest, DefaultRewardFollowsVerlsDataSources) {
  const std::pair<const char*, const char*> cases[] = {
      {"openai/gsm8k", "gsm8k"},
      {"gsm8k", "gsm8k"},
      {"lighteval/MATH", "math"},
      {"DigitalLearningGmbH/MATH-lighteval", "math"},
      {"HuggingFaceH4/MATH-500", "math"},
      {"math500", "math"},
      {"Jiayi-Pan/Countdown-Tasks-3to4", "countdown"},
      {"countdown", "countdown"},
  };
  for (const auto& [source, reward] : cases) {
    auto r = DefaultRewardForDataSource(source);
    ASSERT_TRUE(r.ok()) << source << ": " << r.status();
    EXPECT_EQ(*r, reward) << source;
  }
  auto unknown = DefaultRewardForDataSource("openai/humaneval");
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("'openai/humaneval'"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("lighteval/MATH"), std::string::npos);
}

TEST(RewardTest, AutoRewardDispatchesOnTheDataSource) {
  auto f = BuiltinReward("auto");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Score(*f, "#### 7", "7", "openai/gsm8k"), 1.0);
  EXPECT_EQ(Score(*f, "\\boxed{\\frac{1}{2}}", "0.5", "HuggingFaceH4/MATH-500"), 1.0);
  EXPECT_EQ(Score(*f, "<answer>1 + 2</answer>", R"({"target": 3, "numbers": [1, 2]})", "countdown"),
            1.0);
  auto r = (*f)(
      {.data_source = "unknown", .solution_str = "1", .ground_truth = "1", .extra_info_json = ""});
  EXPECT_NE(r.status().message().find("reward auto"), std::string::npos) << r.status();
}

TEST(RewardTest, ArbitraryInputNeverCrashesAnyReward) {
  // Responses and ground truths stitched from the tokens the parsers care about, fixed seed.
  const char* tokens[] = {"\\boxed{",
                          "{",
                          "}",
                          "\\frac",
                          "\\sqrt",
                          "\\left(",
                          "\\right)",
                          "\\text{",
                          " ",
                          "####",
                          "-",
                          "+",
                          "*",
                          "/",
                          "^",
                          "(",
                          ")",
                          ",",
                          "1",
                          "23",
                          "0",
                          ".",
                          "=",
                          "<answer>",
                          "</answer>",
                          "\\",
                          "x",
                          "$",
                          "\\pi",
                          "\xff",
                          "\xE2\x88\x92",
                          "\n",
                          "\\{",
                          "\\}",
                          "&",
                          "\\begin{pmatrix}",
                          "\\end{pmatrix}",
                          "\\cup",
                          "_"};
  std::vector<RewardFn> rewards;
  for (const char* name : {"gsm8k", "math", "countdown", "exact_match", "auto"}) {
    rewards.push_back(MustMake({.name = name, .weight = 1, .params = {}}));
  }
  rewards.push_back(MustMake({.name = "format", .weight = 1, .params = {{"pattern", "(\\d+)+x"}}}));
  uint64_t state = 42;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>(state >> 33);
  };
  auto random_text = [&] {
    std::string t;
    const size_t n = next() % 40;
    for (size_t i = 0; i < n; ++i) t += tokens[next() % std::size(tokens)];
    return t;
  };
  const char* sources[] = {"gsm8k", "math", "countdown", "other"};
  for (int i = 0; i < 3000; ++i) {
    const std::string response = random_text();
    std::string truth = random_text();
    if (i % 3 == 0) truth = R"({"target": 23, "numbers": [30, 100, 93]})";
    for (const RewardFn& f : rewards) {
      auto r = f({.data_source = sources[i % 4],
                  .solution_str = response,
                  .ground_truth = truth,
                  .extra_info_json = ""});
      if (r.ok()) {
        EXPECT_TRUE(std::isfinite(r->score));
      } else {
        EXPECT_TRUE(r.status().code() == StatusCode::kInvalidArgument ||
                    r.status().code() == StatusCode::kNotFound)
            << r.status();
      }
    }
  }
}

}  // namespace
}  // namespace laminar::reward
