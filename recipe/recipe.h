// The recipe (docs/architecture.md): one YAML file with dotted overrides that every role reads, so
// the manager, rollouts and actor of a run agree. RecipeSchema() documents every key; each role
// turns a loaded recipe into its own options (actor/actor_recipe.h, rollout/worker/worker_recipe.h,
// rollout/manager/manager_recipe.h, reward/reward_recipe.h), so reading a recipe links no role.
// `mode` chooses sync, one_step_off or async from one code base.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace laminar::recipe {

// Every recipe key, with its type, default and documentation (ConfigSchema::ReferenceYaml
// prints them).
const ConfigSchema& RecipeSchema();

// Loads `path` with `overrides` ("actor.lr=2e-6") against RecipeSchema(). Errors as Config::Load.
StatusOr<Config> LoadRecipe(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace laminar::recipe
