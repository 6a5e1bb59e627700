// Config: YAML recipes, dotted overrides, schema validation and its error messages.
#include "core/config.h"

#include <gtest/gtest.h>

#include "core/mapped_file.h"
#include "tests/test_util.h"

namespace laminar {
namespace {

ConfigSchema TestSchema() {
  ConfigSchema s;
  s.AddFloat("actor.lr", 1e-6, "learning rate", 0.0)
      .AddInt("actor.ppo_epochs", 1, "epochs per batch", 1, 100)
      .AddInt("rollout.num_workers", 1, "rollout processes", 1)
      .AddBool("rollout.allow_version_switch", false, "continue in-flight work on new weights")
      .AddString("algorithm.adv_estimator", "grpo", "advantage estimator",
                 {"grpo", "rloo", "dr_grpo"})
      .AddRequired("model.path", ConfigType::kString, "checkpoint")
      .AddStringList("rollout.stop", {}, "stop strings")
      .AddMap("reward.args", "free-form reward arguments");
  return s;
}

constexpr char kRecipe[] = R"(
model:
  path: /models/m.gguf
actor:
  lr: 2e-6
rollout:
  num_workers: 4
  stop: ["</answer>", "\n\n"]
reward:
  args: {k: 3, nested: {x: 1}}
)";

TEST(ConfigTest, LoadsRecipeWithDefaults) {
  auto cfg = Config::FromString(kRecipe, "recipe.yaml", {}, TestSchema());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_DOUBLE_EQ(cfg->GetFloat("actor.lr"), 2e-6);
  EXPECT_EQ(cfg->GetInt("rollout.num_workers"), 4);
  EXPECT_EQ(cfg->GetInt("actor.ppo_epochs"), 1);
  EXPECT_FALSE(cfg->GetBool("rollout.allow_version_switch"));
  EXPECT_EQ(cfg->GetString("algorithm.adv_estimator"), "grpo");
  EXPECT_EQ(cfg->GetStringList("rollout.stop").size(), 2u);
  EXPECT_EQ(cfg->GetNode("reward.args")["nested"]["x"].as<int>(), 1);
  EXPECT_TRUE(cfg->IsSet("actor.lr"));
  EXPECT_FALSE(cfg->IsSet("actor.ppo_epochs"));
}

TEST(ConfigTest, DottedOverrides) {
  auto cfg =
      Config::FromString(kRecipe, "recipe.yaml",
                         {"actor.lr=1e-5", "rollout.num_workers=8", "algorithm.adv_estimator=rloo",
                          "rollout.stop=[a]", "rollout.allow_version_switch=true"},
                         TestSchema());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_DOUBLE_EQ(cfg->GetFloat("actor.lr"), 1e-5);
  EXPECT_EQ(cfg->GetInt("rollout.num_workers"), 8);
  EXPECT_EQ(cfg->GetString("algorithm.adv_estimator"), "rloo");
  EXPECT_EQ(cfg->GetStringList("rollout.stop"), std::vector<std::string>{"a"});
  EXPECT_TRUE(cfg->GetBool("rollout.allow_version_switch"));
}

TEST(ConfigTest, UnknownKeyNamesFileLineAndSuggestion) {
  auto cfg =
      Config::FromString("model: {path: x}\nactor:\n  lrr: 1e-6\n", "my.yaml", {}, TestSchema());
  ASSERT_FALSE(cfg.ok());
  const std::string m = cfg.status().message();
  EXPECT_NE(m.find("my.yaml:3"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown key 'actor.lrr'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'actor.lr'"), std::string::npos) << m;
}

TEST(ConfigTest, UnknownOverrideNamesOverride) {
  auto cfg = Config::FromString(kRecipe, "r.yaml", {"rollout.num_worker=4"}, TestSchema());
  ASSERT_FALSE(cfg.ok());
  const std::string m = cfg.status().message();
  EXPECT_NE(m.find("override 'rollout.num_worker=4'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'rollout.num_workers'"), std::string::npos) << m;
}

TEST(ConfigTest, WrongTypeNamesExpectedType) {
  auto cfg = Config::FromString(kRecipe, "r.yaml", {"actor.lr=fast"}, TestSchema());
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("expects a float, got 'fast'"), std::string::npos)
      << cfg.status();
  auto cfg2 = Config::FromString(kRecipe, "r.yaml", {"rollout.num_workers=2.5"}, TestSchema());
  ASSERT_FALSE(cfg2.ok());
  EXPECT_NE(cfg2.status().message().find("expects an int"), std::string::npos);
  auto cfg3 = Config::FromString("model: {path: [1, 2]}", "r.yaml", {}, TestSchema());
  ASSERT_FALSE(cfg3.ok());
  EXPECT_NE(cfg3.status().message().find("r.yaml:1"), std::string::npos) << cfg3.status();
  EXPECT_NE(cfg3.status().message().find("expects a string, got a list"), std::string::npos);
}

TEST(ConfigTest, RangesChoicesAndRequired) {
  EXPECT_FALSE(Config::FromString(kRecipe, "r", {"actor.ppo_epochs=0"}, TestSchema()).ok());
  auto bad_choice = Config::FromString(kRecipe, "r", {"algorithm.adv_estimator=ppo"}, TestSchema());
  ASSERT_FALSE(bad_choice.ok());
  EXPECT_NE(bad_choice.status().message().find("not one of: grpo, rloo, dr_grpo"),
            std::string::npos);
  auto missing = Config::FromString("actor: {lr: 1.0}", "r.yaml", {}, TestSchema());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("missing required key 'model.path'"),
            std::string::npos);
}

TEST(ConfigTest, MalformedInput) {
  auto syntax = Config::FromString("actor:\n  lr: [1,\n", "broken.yaml", {}, TestSchema());
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("broken.yaml"), std::string::npos);
  EXPECT_NE(syntax.status().message().find("YAML syntax error"), std::string::npos);
  EXPECT_FALSE(Config::FromString("- a\n- b\n", "list.yaml", {}, TestSchema()).ok());
  EXPECT_FALSE(Config::FromString(kRecipe, "r", {"actor.lr"}, TestSchema()).ok());
  EXPECT_FALSE(Config::FromString(kRecipe, "r", {"actor..lr=1"}, TestSchema()).ok());
  EXPECT_FALSE(Config::FromString("actor: 3\nmodel: {path: x}", "r", {}, TestSchema()).ok());
  EXPECT_FALSE(Config::FromString(kRecipe, "r", {"actor.lr.x=1"}, TestSchema()).ok());
  auto missing_file = Config::Load("/nonexistent/recipe.yaml", {}, TestSchema());
  ASSERT_FALSE(missing_file.ok());
  EXPECT_NE(missing_file.status().message().find("/nonexistent/recipe.yaml"), std::string::npos);
}

TEST(ConfigTest, LoadFromFileAndReference) {
  auto dir = testing::TempDir("config");
  std::string path = (dir / "r.yaml").string();
  ASSERT_TRUE(WriteFileAtomic(path, kRecipe).ok());
  auto cfg = Config::Load(path, {}, TestSchema());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->GetString("model.path"), "/models/m.gguf");
  // The resolved YAML parses back to the same values.
  auto again = Config::FromString(cfg->ToYaml(), "resolved", {}, TestSchema());
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << cfg->ToYaml();
  EXPECT_DOUBLE_EQ(again->GetFloat("actor.lr"), 2e-6);
  std::string ref = TestSchema().ReferenceYaml();
  EXPECT_NE(ref.find("actor.lr: "), std::string::npos);
  EXPECT_NE(ref.find("model.path: <required>"), std::string::npos);
}

TEST(ConfigTest, DottedAndDuplicateKeysInAFileAreErrors) {
  auto dotted =
      Config::FromString("model: {path: m}\nactor.lr: 5e-6\n", "r.yaml", {}, TestSchema());
  ASSERT_FALSE(dotted.ok());
  EXPECT_NE(dotted.status().message().find("r.yaml:2: dotted key 'actor.lr'"), std::string::npos)
      << dotted.status();
  auto dup = Config::FromString("model: {path: m}\nactor: {lr: 1e-5, lr: 2e-5}\n", "r.yaml", {},
                                TestSchema());
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("'actor.lr' appears twice"), std::string::npos)
      << dup.status();
  auto dup_section =
      Config::FromString("model: {path: m}\nactor:\n  lr: 1e-5\nactor:\n  ppo_epochs: 3\n",
                         "r.yaml", {}, TestSchema());
  ASSERT_FALSE(dup_section.ok());
  EXPECT_NE(dup_section.status().message().find("r.yaml:4"), std::string::npos)
      << dup_section.status();
  auto two_docs =
      Config::FromString("model: {path: m}\n---\nactor: {lr: 1}\n", "r.yaml", {}, TestSchema());
  ASSERT_FALSE(two_docs.ok());
  EXPECT_NE(two_docs.status().message().find("more than one YAML document"), std::string::npos)
      << two_docs.status();
  // A ',' outside a flow collection at the top level: an error, not the endless stream of empty
  // documents yaml-cpp 0.7's LoadAll collects (found by tests/fuzz/recipe_fuzz.cc).
  for (const char* stray : {",tE", "[1],\n", "# c\n,", "'x',"}) {
    auto r = Config::FromString(stray, "r.yaml", {}, TestSchema());
    ASSERT_FALSE(r.ok()) << stray;
    EXPECT_NE(r.status().message().find("r.yaml"), std::string::npos) << r.status();
  }
}

TEST(ConfigTest, HexIntsAndNaN) {
  auto hex = Config::FromString(kRecipe, "r.yaml", {"rollout.num_workers=0x10"}, TestSchema());
  ASSERT_TRUE(hex.ok()) << hex.status();
  EXPECT_EQ(hex->GetInt("rollout.num_workers"), 16);
  auto nan = Config::FromString(kRecipe, "r.yaml", {"actor.lr=.nan"}, TestSchema());
  ASSERT_FALSE(nan.ok());
  EXPECT_NE(nan.status().message().find("'actor.lr' is NaN"), std::string::npos) << nan.status();
}

TEST(ConfigTest, EditDistance) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
}

}  // namespace
}  // namespace laminar
