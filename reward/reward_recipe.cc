// Recipe keys to options; see reward_recipe.h.
#include "reward/reward_recipe.h"

namespace laminar::reward {

StatusOr<RewardFn> RewardOf(const Config& r) {
  const YAML::Node components = r.GetNode("reward.components");
  const YAML::Node python = r.GetNode("reward.python"), c = r.GetNode("reward.c");
  const bool has_python = python.IsMap() && python.size() > 0;
  const bool has_c = c.IsMap() && c.size() > 0;
  if (components.IsSequence() && components.size() > 0) {
    if (has_python || has_c || r.IsSet("reward.name")) {
      return InvalidArgumentError(
          "recipe reward: set reward.components or one of reward.name, reward.python, reward.c");
    }
    LAMINAR_ASSIGN_OR_RETURN(auto specs, ParseRewardSpecs(components, "reward.components"));
    return CombineRewards(specs);
  }
  const YAML::Node params = r.GetNode("reward.params");
  if ((has_python || has_c) && params.IsMap() && params.size() > 0) {
    return InvalidArgumentError(
        "recipe reward.params: parameters of reward.name; a plug-in takes none");
  }
  if (has_python + has_c + r.IsSet("reward.name") > 1) {
    return InvalidArgumentError(
        "recipe reward: set only one of reward.name, reward.python, reward.c");
  }
  // One spec in ParseRewardSpecs' map form: {name: N, <params>...}, {python: {...}} or {c: {...}}.
  YAML::Node spec(YAML::NodeType::Map);
  if (has_python) {
    spec["python"] = python;
  } else if (has_c) {
    spec["c"] = c;
  } else {
    spec["name"] = r.GetString("reward.name");
    if (params.IsMap()) {
      for (auto it = params.begin(); it != params.end(); ++it) {
        const std::string key = it->first.Scalar();
        if (key == "name" || key == "weight") {
          return InvalidArgumentError("recipe reward.params." + key +
                                      ": not a parameter (set reward." + key + ")");
        }
        spec[key] = it->second;
      }
    }
  }
  LAMINAR_ASSIGN_OR_RETURN(auto specs, ParseRewardSpecs(spec, "reward"));
  return MakeReward(specs.front());
}

}  // namespace laminar::reward
