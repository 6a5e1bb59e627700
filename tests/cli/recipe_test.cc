// The recipe (recipe/recipe.h) and each role's builder: the reward section (one built-in with
// params, a weighted list of components, plug-ins, and the errors that name the key), the rollout's
// and actor's options, and the schema's defaults against each role's own.
#include "recipe/recipe.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "actor/actor_recipe.h"
#include "reward/reward_recipe.h"
#include "rollout/manager/manager_recipe.h"
#include "rollout/speculation/speculative_config.h"
#include "rollout/worker/worker_recipe.h"
#include "tests/test_util.h"

namespace laminar::testing {
namespace {

StatusOr<Config> Recipe(const std::string& reward_yaml) {
  return Config::FromString("model: {path: m.gguf}\ndata: {path: d.jsonl}\n" + reward_yaml,
                            "recipe.yaml", {}, recipe::RecipeSchema());
}

double Score(const reward::RewardFn& fn, const std::string& response, const std::string& truth) {
  auto r = fn(
      {.data_source = "", .solution_str = response, .ground_truth = truth, .extra_info_json = ""});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->score : -1;
}

TEST(RecipeRewardTest, DefaultIsExactMatch) {
  auto r = Recipe("");
  ASSERT_TRUE(r.ok()) << r.status();
  auto fn = reward::RewardOf(*r);
  ASSERT_TRUE(fn.ok()) << fn.status();
  EXPECT_EQ(Score(*fn, " 42 ", "42"), 1);
  EXPECT_EQ(Score(*fn, "43", "42"), 0);
}

TEST(RecipeRewardTest, ABuiltinTakesItsParams) {
  auto r = Recipe("reward: {name: format, params: {pattern: 'A+', partial_credit: 0.25}}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  auto fn = reward::RewardOf(*r);
  ASSERT_TRUE(fn.ok()) << fn.status();
  EXPECT_EQ(Score(*fn, "AAA", ""), 1);
  EXPECT_EQ(Score(*fn, "xAx", ""), 0.25);
  EXPECT_EQ(Score(*fn, "xyz", ""), 0);
}

TEST(RecipeRewardTest, ComponentsAreAWeightedSumWithEachScoreReported) {
  auto r = Recipe(
      "reward:\n  components:\n    - gsm8k\n"
      "    - {name: format, weight: 0.5, pattern: '.*####.*'}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  auto fn = reward::RewardOf(*r);
  ASSERT_TRUE(fn.ok()) << fn.status();
  auto out = (*fn)({.data_source = "",
                    .solution_str = "so #### 12",
                    .ground_truth = "12",
                    .extra_info_json = ""});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_DOUBLE_EQ(out->score, 1.5);
  EXPECT_EQ(out->extra.at("reward/gsm8k"), 1);
  EXPECT_EQ(out->extra.at("reward/format"), 1);
  EXPECT_DOUBLE_EQ(Score(*fn, "12", "12"), 1.0);  // right, without the format
}

TEST(RecipeRewardTest, FailureScoreReachesTheRollouts) {
  auto r = Recipe("reward: {failure_score: -1.0}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  auto w = rollout::RolloutWorkerOptionsOf(*r, 1024);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->reward_failure_score, -1.0);
}

// The recipe lists the drafter names without linking the rollout (it sits below the roles); they
// must be the registry's, in its order, so that every name the recipe accepts makes a drafter.
TEST(RecipeSpeculativeTest, DrafterNamesAreTheRegistrys) {
  const ConfigField* field = recipe::RecipeSchema().Find("rollout.speculative.drafter");
  ASSERT_NE(field, nullptr);
  std::vector<std::string> registry;
  for (const rollout::DrafterEntry& e : rollout::DrafterRegistry()) {
    registry.emplace_back(e.name);
  }
  EXPECT_EQ(field->choices, registry);
  EXPECT_EQ(field->default_value.as<std::string>(),
            rollout::DrafterName(rollout::DrafterKind::kOff));
}

TEST(RecipeSpeculativeTest, DrafterSettingsReachTheEngine) {
  auto r = Recipe(
      "rollout: {speculative: {drafter: layer_skip, max_draft_tokens: 5, "
      "layer_skip_keep: 3, adaptive: false}}\n");
  ASSERT_TRUE(r.ok()) << r.status();
  auto w = rollout::RolloutWorkerOptionsOf(*r, 1024);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->engine.speculative.drafter, rollout::DrafterKind::kLayerSkip);
  EXPECT_EQ(w->engine.speculative.max_draft_tokens, 5);
  EXPECT_EQ(w->engine.speculative.layer_skip_keep, 3);
  EXPECT_FALSE(w->engine.speculative.adaptive);
  EXPECT_EQ(w->engine.speculative.min_confidence, 0.0);
  // The draft model's format follows the policy's unless set; min_confidence reaches the engine.
  EXPECT_EQ(w->draft_weight_format, w->weight_format);
  auto quantized = Recipe(
      "rollout: {weight_dtype: bf16, speculative: {draft_weight_dtype: w4a8, "
      "min_confidence: 0.25}}\n");
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  auto q = rollout::RolloutWorkerOptionsOf(*quantized, 1024);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->weight_format, engine::WeightFormat::kBF16);
  EXPECT_EQ(q->draft_weight_format, engine::WeightFormat::kW4A8);
  EXPECT_DOUBLE_EQ(q->engine.speculative.min_confidence, 0.25);
  EXPECT_FALSE(Recipe("rollout: {speculative: {draft_weight_dtype: gguf}}\n").ok());
  // The policy as its own draft, in ggml's Q4_1 blocks; the worker needs no draft config.
  auto self = Recipe(
      "rollout: {weight_dtype: q8_0, speculative: {drafter: draft_model, draft_model: policy, "
      "draft_weight_dtype: q4_1}}\n");
  ASSERT_TRUE(self.ok()) << self.status();
  auto s = rollout::RolloutWorkerOptionsOf(*self, 1024);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->weight_format, engine::WeightFormat::kQ8_0);
  EXPECT_EQ(s->draft_weight_format, engine::WeightFormat::kQ4_1);
  EXPECT_EQ(s->draft_model_path, rollout::kPolicyDraftModel);
  EXPECT_FALSE(s->draft_model_config.has_value());
  EXPECT_FALSE(Recipe("rollout: {speculative: {min_confidence: 1.5}}\n").ok());
  // draft_model without its checkpoint; an unknown drafter; a size out of range.
  auto no_model = Recipe("rollout: {speculative: {drafter: draft_model}}\n");
  ASSERT_TRUE(no_model.ok());
  auto bad = rollout::RolloutWorkerOptionsOf(*no_model, 1024);
  EXPECT_NE(bad.status().message().find("rollout.speculative.draft_model"), std::string::npos)
      << bad.status();
  EXPECT_FALSE(Recipe("rollout: {speculative: {drafter: medusa}}\n").ok());
  auto too_many = Recipe("rollout: {speculative: {max_draft_tokens: 64}}\n");
  ASSERT_FALSE(too_many.ok());
  // The bounds as a user writes them.
  EXPECT_NE(too_many.status().message().find("= 64 is outside [1, 63]"), std::string::npos)
      << too_many.status();
  // The suffix drafter's settings; min_match above max_match is refused by name.
  auto suffix = Recipe(
      "rollout: {speculative: {drafter: suffix, suffix: {max_match: 12, min_share: 0.25, "
      "recent_responses: 0}}}\n");
  ASSERT_TRUE(suffix.ok()) << suffix.status();
  auto sx = rollout::RolloutWorkerOptionsOf(*suffix, 1024);
  ASSERT_TRUE(sx.ok()) << sx.status();
  EXPECT_EQ(sx->engine.speculative.suffix.max_match, 12);
  EXPECT_DOUBLE_EQ(sx->engine.speculative.suffix.min_share, 0.25);
  EXPECT_EQ(sx->engine.speculative.suffix.recent_responses, 0);
  auto crossed = Recipe("rollout: {speculative: {suffix: {max_match: 3, min_match: 4}}}\n");
  ASSERT_TRUE(crossed.ok()) << crossed.status();
  auto crossed_opts = rollout::RolloutWorkerOptionsOf(*crossed, 1024);
  EXPECT_NE(crossed_opts.status().message().find("rollout.speculative.suffix"), std::string::npos)
      << crossed_opts.status();
  EXPECT_FALSE(Recipe("rollout: {speculative: {suffix: {min_share: 1.5}}}\n").ok());
  // Drafting ahead is for the model drafters.
  auto async_suffix = Recipe("rollout: {speculative: {drafter: suffix, async_draft: true}}\n");
  ASSERT_TRUE(async_suffix.ok());
  auto refused = rollout::RolloutWorkerOptionsOf(*async_suffix, 1024);
  EXPECT_NE(refused.status().message().find("async_draft"), std::string::npos) << refused.status();
}

TEST(RecipeRewardTest, BadSpecsNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {"reward: {name: gsm9k}\n", "gsm9k"},
      {"reward: {name: format, params: {pattern: '(('}}\n", "pattern"},
      {"reward: {name: format, params: {weight: 2}}\n", "reward.params.weight"},
      {"reward: {name: gsm8k, params: {colour: red}}\n", "colour"},
      {"reward: {name: gsm8k, components: [math]}\n", "reward.components"},
      {"reward: {components: [gsm8k, {name: math, weight: high}]}\n",
       "reward.components[1].weight"},
      {"reward: {components: [{weight: 1}]}\n", "reward.components[0]"},
  };
  for (const auto& [yaml, needle] : cases) {
    auto r = Recipe(yaml);
    ASSERT_TRUE(r.ok()) << yaml << r.status();
    auto fn = reward::RewardOf(*r);
    ASSERT_FALSE(fn.ok()) << yaml;
    EXPECT_NE(fn.status().message().find(needle), std::string::npos)
        << yaml << " -> " << fn.status();
  }
  // Wrong shapes fail when the recipe loads.
  auto list_as_map = Recipe("reward: {components: {name: gsm8k}}\n");
  ASSERT_FALSE(list_as_map.ok());
  EXPECT_NE(list_as_map.status().message().find("reward.components"), std::string::npos)
      << list_as_map.status();
}

}  // namespace
}  // namespace laminar::testing

namespace laminar::testing {
namespace {

// configs/reference.yaml documents every recipe key; it must say what the parser accepts.
TEST(RecipeReferenceTest, ReferenceYamlMatchesTheSchema) {
  const std::filesystem::path committed =
      std::filesystem::path(LAMINAR_SOURCE_DIR) / "configs" / "reference.yaml";
  const std::string header =
      "# Every recipe key with its type, default and meaning (recipe/recipe.cc RecipeSchema).\n"
      "# Dotted paths here; in a recipe write nested sections (actor: {lr: 1e-6}), and on the\n"
      "# command line dotted overrides (actor.lr=1e-6). tests/cli/recipe_test.cc keeps this file\n"
      "# in sync with the parser.\n";
  const std::string want = header + recipe::RecipeSchema().ReferenceYaml();
  std::ifstream in(committed);
  std::stringstream got;
  got << in.rdbuf();
  if (got.str() != want) {
    const auto fresh = TempDir("reference") / "reference.yaml";
    std::ofstream(fresh) << want;
    FAIL() << committed << " is out of date with RecipeSchema(); the current one is in " << fresh
           << " (cp it over)";
  }
}

}  // namespace
}  // namespace laminar::testing

namespace laminar::testing {
namespace {

// Every recipe in configs/ parses against the schema, with a reward, dataset options and rollout
// options the roles accept (the data and model files are the user's to provide).
TEST(RecipeReferenceTest, EveryShippedRecipeIsValid) {
  const std::filesystem::path configs = std::filesystem::path(LAMINAR_SOURCE_DIR) / "configs";
  int recipes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(configs)) {
    if (entry.path().extension() != ".yaml" || entry.path().filename() == "reference.yaml") {
      continue;
    }
    SCOPED_TRACE(entry.path().string());
    auto r = recipe::LoadRecipe(entry.path().string(), {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(reward::RewardOf(*r).ok()) << reward::RewardOf(*r).status();
    auto data = manager::PromptDatasetOptionsOf(*r, std::nullopt);
    EXPECT_TRUE(data.ok()) << data.status();
    auto worker = rollout::RolloutWorkerOptionsOf(*r, /*kv_bytes_per_token=*/4096);
    EXPECT_TRUE(worker.ok()) << worker.status();
    auto actor_options = actor::ActorOptionsOf(*r);
    EXPECT_TRUE(actor_options.ok()) << actor_options.status();
    ++recipes;
  }
  EXPECT_GE(recipes, 5);  // quickstart, grpo_gsm8k, grpo_gsm8k_qwen2.5_0.5b, countdown, stories
}

// The schema's defaults are written out in recipe/recipe.cc (reading a recipe links no role), so a
// recipe that sets nothing must give each role the defaults of its own options structs.
TEST(RecipeDefaultsTest, EmptyRecipeGivesEachRoleItsOwnDefaults) {
  auto r = Recipe("");
  ASSERT_TRUE(r.ok()) << r.status();
  auto t = actor::TrainerConfigOf(*r);
  ASSERT_TRUE(t.ok()) << t.status();
  const trainer::TrainerConfig td;
  EXPECT_EQ(t->optimizer.name, td.optimizer.name);
  EXPECT_EQ(t->optimizer.lr, td.optimizer.lr);
  EXPECT_EQ(t->optimizer.weight_decay, td.optimizer.weight_decay);
  EXPECT_EQ(t->optimizer.grad_clip, td.optimizer.grad_clip);
  EXPECT_EQ(t->optimizer.lr_schedule, td.optimizer.lr_schedule);
  EXPECT_EQ(t->optimizer.warmup_steps, td.optimizer.warmup_steps);
  EXPECT_EQ(t->loss.loss, td.loss.loss);
  EXPECT_EQ(t->loss.agg, td.loss.agg);
  EXPECT_EQ(t->loss.clip_ratio_low, td.loss.clip_ratio_low);
  EXPECT_EQ(t->loss.clip_ratio_high, td.loss.clip_ratio_high);
  EXPECT_EQ(t->loss.is_level, td.loss.is_level);
  EXPECT_EQ(t->loss.is_cap, td.loss.is_cap);
  EXPECT_EQ(t->loss.kl_coef, td.loss.kl_coef);
  EXPECT_EQ(t->loss.kl_estimator, td.loss.kl_estimator);
  EXPECT_EQ(t->loss.entropy_coef, td.loss.entropy_coef);
  EXPECT_EQ(t->advantage.estimator, td.advantage.estimator);
  EXPECT_EQ(t->mini_batch_size, td.mini_batch_size);
  EXPECT_EQ(t->micro_batch_tokens, td.micro_batch_tokens);
  EXPECT_EQ(t->ppo_epochs, td.ppo_epochs);
  EXPECT_EQ(t->share_prompts, td.share_prompts);

  auto w = rollout::RolloutWorkerOptionsOf(*r, /*kv_bytes_per_token=*/1024);
  ASSERT_TRUE(w.ok()) << w.status();
  const rollout::RolloutWorkerOptions wd;
  EXPECT_EQ(w->max_groups, wd.max_groups);
  EXPECT_EQ(w->engine.block_size, wd.engine.block_size);
  EXPECT_EQ(w->engine.scheduler.max_num_seqs, wd.engine.scheduler.max_num_seqs);
  EXPECT_EQ(w->engine.scheduler.max_num_batched_tokens, wd.engine.scheduler.max_num_batched_tokens);
  EXPECT_EQ(w->partial_every_tokens, wd.partial_every_tokens);
  EXPECT_EQ(w->heartbeat_interval_ms, wd.heartbeat_interval_ms);
  EXPECT_EQ(w->manager_timeout_s, wd.manager_timeout_s);
  EXPECT_EQ(w->relay_timeout_s, wd.relay_timeout_s);
  const rollout::SpeculativeConfig& s = w->engine.speculative;
  const rollout::SpeculativeConfig& sd = wd.engine.speculative;
  EXPECT_EQ(s.drafter, sd.drafter);
  EXPECT_EQ(s.max_draft_tokens, sd.max_draft_tokens);
  EXPECT_EQ(s.adaptive, sd.adaptive);
  EXPECT_EQ(s.async_draft, sd.async_draft);
  EXPECT_EQ(s.layer_skip_keep, sd.layer_skip_keep);
  EXPECT_EQ(s.min_confidence, sd.min_confidence);
  EXPECT_EQ(s.draft_vocab, sd.draft_vocab);
  EXPECT_EQ(s.suffix.max_match, sd.suffix.max_match);
  EXPECT_EQ(s.suffix.min_match, sd.suffix.min_match);
  EXPECT_EQ(s.suffix.max_continuations, sd.suffix.max_continuations);
  EXPECT_EQ(s.suffix.recent_responses, sd.suffix.recent_responses);
  EXPECT_EQ(s.suffix.min_share, sd.suffix.min_share);
}

}  // namespace
}  // namespace laminar::testing
