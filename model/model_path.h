// Resolving what a user types after --model: a path (file or folder) or the name of a model that
// scripts/setup.sh installs into the model cache.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace laminar::model {

// A model that setup installs by name.
struct KnownModel {
  std::string name;  // e.g. "smollm2-135m-instruct"
  std::string file;  // file name inside the model cache
  std::string description;
};

const std::vector<KnownModel>& KnownModels();

// The model cache: $LAMINAR_MODEL_CACHE, else $HOME/.cache/laminar/models.
std::string ModelCacheDir();

// Returns `name_or_path` if it exists on disk (a leading "~/" is $HOME, as a shell expands it);
// else the cached file of a known model name (matched in any case).
// Errors: NotFound naming the path, or for a known name that is not installed, naming the setup
// command; for anything else, the list of known names.
StatusOr<std::string> ResolveModelPath(const std::string& name_or_path);

}  // namespace laminar::model
