// A run's folder: where `laminar run` and the multi-machine launchers put a run's files
// (metrics.jsonl, progress.json, checkpoints/, model/, faults.jsonl, trajectories.jsonl,
// tensorboard/, logs/), as recipe overrides for the keys the recipe leaves unset, so that every
// launcher lays a run out the same way and the roles need no notion of a folder.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/config.h"

namespace laminar::launch {

// The folder of a run of `recipe_path`: `flag` (a --run-dir) when given, else the recipe's
// run.dir, else runs/<recipe file name without extension>.
std::filesystem::path RunFolderOf(const std::string& flag, const Config& recipe,
                                  const std::string& recipe_path);

// "key=value" overrides that put each of the run's files under `dir`, one for every such key
// that `recipe` (the recipe with the user's overrides) leaves unset.
std::vector<std::string> RunFolderOverrides(const Config& recipe, const std::filesystem::path& dir);

}  // namespace laminar::launch
