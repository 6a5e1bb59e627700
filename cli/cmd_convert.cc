// `laminar convert SRC --out DIR`: any checkpoint we read (GGUF, llama2.c, Hugging Face folder)
// written as a Hugging Face folder (safetensors + config.json + tokenizer files) that
// transformers loads; q/k are converted to the rotate-half RoPE layout on the way.
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "model/checkpoint.h"
#include "model/hf_checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::cli {
namespace {

struct ConvertArgs {
  std::string model;
  std::string out;
  std::string tokenizer;
  std::string dtype;
  bool overwrite = false;
};

int Fail(const std::string& message) { return CommandFail("convert", message); }

int Run(const ConvertArgs& a) {
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status().message());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail(ckpt.status().message());
  model::HfSaveOptions opts;
  opts.overwrite = a.overwrite;
  if (!a.dtype.empty()) {
    DType d;
    if (!ParseDType(a.dtype, &d) || (d != DType::kF32 && d != DType::kBF16 && d != DType::kF16)) {
      return Fail("--dtype must be f32, bf16 or f16, got '" + a.dtype + "'");
    }
    opts.dtype = d;
  }
  auto tok = model::LoadTokenizerForModel(*path, a.tokenizer);
  if (!tok.ok()) return Fail("tokenizer: " + tok.status().message());
  auto files = model::ExportHfTokenizerFiles(**tok, ckpt->chat_template);
  if (!files.ok()) return Fail("tokenizer export: " + files.status().message());
  opts.tokenizer_files = std::move(*files);
  Status st = model::SaveHfCheckpoint(a.out, ckpt->config, ckpt->weights, opts);
  if (!st.ok()) return Fail(st.message());
  std::printf("wrote %s (%s -> hf, %zu tensors)\n", a.out.c_str(),
              model::CheckpointFormatName(ckpt->format).c_str(), ckpt->weights.size());
  return 0;
}

std::function<int()> SetupConvert(CLI::App* app) {
  auto a = std::make_shared<ConvertArgs>();
  app->add_option("model", a->model,
                  "source checkpoint (GGUF, llama2.c .bin, HF folder) or model name")
      ->required();
  app->add_option("--out", a->out, "Hugging Face folder to write")->required();
  app->add_option("--tokenizer", a->tokenizer, "tokenizer file overriding the checkpoint's");
  app->add_option("--dtype", a->dtype, "f32, bf16 or f16 (default: as loaded)");
  app->add_flag("--overwrite", a->overwrite, "replace an existing folder");
  return [a] { return Run(*a); };
}
LAMINAR_REGISTER_COMMAND("convert", "write a checkpoint as a Hugging Face folder", SetupConvert);

}  // namespace
}  // namespace laminar::cli
