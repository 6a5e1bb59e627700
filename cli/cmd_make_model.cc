// `laminar make-model --preset tiny-llama --seed 1 --out DIR`: writes a seeded synthetic model
// (DIR/model.gguf and the Hugging Face folder DIR/hf) that runs anywhere laminar runs, for tests
// and for trying the tools without downloading a model.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command.h"
#include "model/synthetic/synthetic_model.h"

namespace laminar::cli {
namespace {

struct MakeModelArgs {
  std::string preset = "tiny-llama";
  uint64_t seed = 1;
  std::string out;
  bool overwrite = false;
};

int Fail(const std::string& message) { return CommandFail("make-model", message); }

int Run(const MakeModelArgs& a) {
  auto preset = model::FindSyntheticPreset(a.preset);
  if (!preset.ok()) return Fail(preset.status().message());
  auto m = model::MakeSyntheticModel(*preset, a.seed);
  if (!m.ok()) return Fail(m.status().message());
  Status st = model::WriteSyntheticModel(*m, a.out, a.overwrite);
  if (!st.ok()) return Fail(st.message());
  std::printf("wrote %s (%s: vocab %lld, %lld layers, %zu tensors): model.gguf and hf/\n",
              a.out.c_str(), m->description.c_str(), static_cast<long long>(m->config.vocab_size),
              static_cast<long long>(m->config.num_hidden_layers), m->weights.size());
  return 0;
}

std::function<int()> SetupMakeModel(CLI::App* app) {
  auto a = std::make_shared<MakeModelArgs>();
  std::string presets;
  for (const std::string& p : model::SyntheticPresetNames()) {
    presets += (presets.empty() ? "" : ", ") + p;
  }
  app->add_option("--preset", a->preset, "model shape (" + presets + ")")->capture_default_str();
  app->add_option("--seed", a->seed, "weights seed: the same seed writes the same bytes")
      ->check(kNonNegative)
      ->capture_default_str();
  app->add_option("--out", a->out, "folder to write (model.gguf, hf/)")->required();
  app->add_flag("--overwrite", a->overwrite, "replace an existing folder");
  return [a] { return Run(*a); };
}
LAMINAR_REGISTER_COMMAND("make-model", "write a seeded synthetic model (GGUF + HF folder)",
                         SetupMakeModel);

}  // namespace
}  // namespace laminar::cli
