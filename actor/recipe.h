// The recipe (DESIGN.md §1): one YAML file with dotted overrides that every role reads, so the
// manager, rollouts and actor of a run agree. RecipeSchema() documents every key; the builders
// turn a validated Config into each role's options. `mode` chooses sync, one_step_off or async
// (issue 8 item 5) from one code base.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "actor/actor.h"
#include "core/config.h"
#include "core/status.h"
#include "reward/reward.h"
#include "rollout/manager/prompt_dataset.h"
#include "rollout/worker.h"
#include "trainer/trainer.h"

namespace laminar::actor {

// Every recipe key, with its type, default and documentation (ConfigSchema::ReferenceYaml
// prints them).
const ConfigSchema& RecipeSchema();

// Loads `path` with `overrides` ("actor.lr=2e-6") against RecipeSchema(). Errors as Config::Load.
StatusOr<Config> LoadRecipe(const std::string& path, const std::vector<std::string>& overrides);

// The trainer's configuration from actor.* keys. Errors: InvalidArgument naming the key for
// values the trainer refuses (an unknown loss, optimizer, schedule or estimator).
StatusOr<trainer::TrainerConfig> TrainerConfigOf(const Config& recipe);

// The rollout worker's options from rollout.* keys, for a model with `kv_bytes_per_token` bytes of
// K and V per token (sizes the KV pool from rollout.kv_cache_mb). Endpoints and id are left for
// the caller.
StatusOr<rollout::RolloutWorkerOptions> RolloutWorkerOptionsOf(const Config& recipe,
                                                               int64_t kv_bytes_per_token);

// How to read the prompt dataset, from the data.* keys (field names, chat format, overlong
// filter). data.chat_format "auto" takes the policy's own template, `checkpoint_chat_template`
// (model::ResolveChatFormat); std::nullopt leaves `chat` unset, for a caller that resolves it
// once the checkpoint is loaded. Errors: InvalidArgument naming data.chat_format for an unknown
// format, or for "auto" with a checkpoint without a (known) template.
StatusOr<manager::PromptDatasetOptions> PromptDatasetOptionsOf(
    const Config& recipe, std::optional<std::string_view> checkpoint_chat_template);

// The actor's options from actor.* keys (trainer included). Endpoints are left for the caller.
StatusOr<ActorOptions> ActorOptionsOf(const Config& recipe);

// The recipe's reward: reward.components (a weighted sum), reward.python, reward.c, or the
// built-in reward.name with reward.params. Errors: InvalidArgument naming the key for a bad spec
// or more than one of them set; NotFound listing the built-ins for an unknown name; a plug-in's
// load error (a Python file that does not compile, a missing function or symbol).
StatusOr<reward::RewardFn> RewardOf(const Config& recipe);

}  // namespace laminar::actor
