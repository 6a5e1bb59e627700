// libFuzzer target: arbitrary bytes as a YAML recipe with command-line overrides. The input's
// first line is one override ("a.b=value"), the rest the recipe; Config::FromString against the
// recipe schema must return a validated config or an error naming the key and line, and a config
// that validates must build its reward.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "recipe/recipe.h"
#include "reward/reward_recipe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  std::vector<std::string> overrides;
  std::string yaml = input;
  if (newline != std::string::npos) {
    if (newline > 0) overrides.push_back(input.substr(0, newline));
    yaml = input.substr(newline + 1);
  }
  auto config = Config::FromString(yaml, "fuzz.yaml", overrides, recipe::RecipeSchema());
  if (!config.ok()) return 0;
  (void)config->ToYaml().size();
  // Built-in rewards only: a recipe naming a plug-in would start processes.
  if (config->GetNode("reward.python").size() == 0 && config->GetNode("reward.c").size() == 0 &&
      config->GetNode("reward.components").size() == 0) {
    reward::RewardOf(*config).status().IgnoreError();
  }
  return 0;
}
