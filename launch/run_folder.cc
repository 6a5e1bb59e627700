#include "launch/run_folder.h"

#include <utility>

#include "recipe/recipe.h"

namespace laminar::launch {

namespace fs = std::filesystem;

fs::path RunFolderOf(const std::string& flag, const Config& recipe,
                     const std::string& recipe_path) {
  if (!flag.empty()) return flag;
  if (const std::string dir = recipe.GetString("run.dir"); !dir.empty()) return dir;
  return fs::path("runs") / fs::path(recipe_path).stem();
}

std::vector<std::string> RunFolderOverrides(const Config& recipe, const fs::path& dir) {
  const std::pair<const char*, const char*> files[] = {
      {"actor.metrics", "metrics.jsonl"},
      {"actor.progress_file", "progress.json"},
      {"actor.checkpoint_dir", "checkpoints"},
      {"actor.export_dir", "model"},
      {"run.faults", "faults.jsonl"},
      {"actor.tensorboard_dir", "tensorboard"},
      {"actor.trajectory_log", "trajectories.jsonl"},
  };
  std::vector<std::string> overrides;
  for (const auto& [key, name] : files) {
    if (recipe::RecipeSchema().Find(key) == nullptr || recipe.IsSet(key)) continue;
    overrides.push_back(std::string(key) + "=" + (dir / name).string());
  }
  return overrides;
}

}  // namespace laminar::launch
