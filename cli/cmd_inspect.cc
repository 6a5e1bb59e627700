// `laminar inspect PATH|NAME`: a checkpoint's format, architecture, tensors and dtypes, and its
// tokenizer and chat format; what a user checks before pointing a recipe at a model.
#include <cstdio>
#include <map>
#include <string>

#include "cli/command.h"
#include "model/checkpoint.h"
#include "model/ggml_quants.h"
#include "model/gguf.h"
#include "model/model_path.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::cli {
namespace {

struct InspectArgs {
  std::string model;
  std::string tokenizer;
  bool all_tensors = false;
  bool metadata = false;
};

int Fail(const std::string& message) { return CommandFail("inspect", message); }

void PrintConfig(const model::ModelConfig& c) {
  std::printf("architecture   %s\n", c.architecture.c_str());
  std::printf("layers         %lld\n", static_cast<long long>(c.num_hidden_layers));
  std::printf("hidden size    %lld   ffn %lld   head dim %lld\n",
              static_cast<long long>(c.hidden_size), static_cast<long long>(c.intermediate_size),
              static_cast<long long>(c.head_dim));
  std::printf("heads          %lld (kv %lld)\n", static_cast<long long>(c.num_attention_heads),
              static_cast<long long>(c.num_key_value_heads));
  std::printf("vocab          %lld   context %lld\n", static_cast<long long>(c.vocab_size),
              static_cast<long long>(c.max_position_embeddings));
  std::printf("rope           theta %g, %s layout%s\n", c.rope_theta,
              c.rope_layout == model::RopeLayout::kInterleaved ? "interleaved" : "rotate-half",
              c.rope_scaling ? (", scaling " + c.rope_scaling->type).c_str() : "");
  std::printf("rms norm eps   %g   qkv bias %s   tied embeddings %s\n", c.rms_norm_eps,
              c.attention_bias ? "yes" : "no", c.tie_word_embeddings ? "yes" : "no");
}

void PrintTensors(const model::Checkpoint& ckpt, bool all) {
  const auto names = ckpt.weights.Names();
  std::map<std::string, int64_t> by_type;
  int64_t params = 0;
  for (const auto& name : names) {
    TensorView v = *ckpt.weights.Get(name);
    params += v.num_elements();
    const model::QuantizedTensor* q = ckpt.weights.GetQuantized(name);
    std::string stored =
        q ? model::GgmlTypeName(static_cast<uint32_t>(q->type)) : std::string(DTypeName(v.dtype()));
    by_type[stored] += v.num_elements();
  }
  std::printf("parameters     %.2f M in %zu tensors", double(params) / 1e6, names.size());
  std::string types;
  for (const auto& [t, n] : by_type)
    types += (types.empty() ? "" : ", ") + t + " " +
             std::to_string(n * 100 / std::max<int64_t>(params, 1)) + "%";
  std::printf(" (stored: %s)\n", types.c_str());
  size_t shown = 0;
  for (const auto& name : names) {
    // By default the shared tensors and layer 0 stand for the rest.
    if (!all && name.rfind("model.layers.", 0) == 0 && name.rfind("model.layers.0.", 0) != 0)
      continue;
    TensorView v = *ckpt.weights.Get(name);
    const model::QuantizedTensor* q = ckpt.weights.GetQuantized(name);
    std::printf(
        "  %-50s %-5s %-16s%s\n", name.c_str(), std::string(DTypeName(v.dtype())).c_str(),
        v.shape().ToString().c_str(),
        q ? (" (stored " + model::GgmlTypeName(static_cast<uint32_t>(q->type)) + ")").c_str() : "");
    ++shown;
  }
  if (shown < names.size()) {
    std::printf("  ... %zu more (layers 1..; --all-tensors lists them)\n", names.size() - shown);
  }
}

void PrintTokenizer(const std::string& model_path, const std::string& override_path,
                    const std::string& chat_template) {
  auto tok = model::LoadTokenizerForModel(model_path, override_path);
  if (!tok.ok()) {
    std::printf("tokenizer      none: %s\n", tok.status().message().c_str());
  } else {
    const auto& t = **tok;
    auto piece = [&](int32_t id) {
      return id < 0 ? std::string("none") : std::to_string(id) + " " + t.TokenToPiece(id);
    };
    std::printf("tokenizer      %s, %lld tokens, %zu special; bos %s, eos %s\n",
                t.kind() == model::TokenizerKind::kSentencePieceBpe ? "SentencePiece BPE"
                                                                    : "byte-level BPE",
                static_cast<long long>(t.vocab_size()), t.SpecialTokens().size(),
                piece(t.bos_id()).c_str(), piece(t.eos_id()).c_str());
  }
  if (chat_template.empty()) {
    std::printf("chat format    none in the checkpoint (choose one in the recipe)\n");
    return;
  }
  auto f = model::DetectChatFormat(chat_template);
  std::printf("chat format    %s%s\n", f.ok() ? f->Name().c_str() : "unrecognised template",
              f.ok() && !f->default_system.empty()
                  ? (" (default system: \"" + f->default_system + "\")").c_str()
                  : "");
}

int RunInspect(const InspectArgs& a) {
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status().message());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail(ckpt.status().message());
  std::printf("path           %s\nformat         %s\n", path->c_str(),
              model::CheckpointFormatName(ckpt->format).c_str());
  PrintConfig(ckpt->config);
  PrintTensors(*ckpt, a.all_tensors);
  PrintTokenizer(*path, a.tokenizer, ckpt->chat_template);
  if (a.metadata && ckpt->format == model::CheckpointFormat::kGguf) {
    auto gguf = model::GgufFile::Open(*path);
    if (gguf.ok()) {
      std::printf("GGUF metadata (v%u, alignment %llu):\n", gguf->version(),
                  static_cast<unsigned long long>(gguf->alignment()));
      for (const auto& [key, value] : gguf->metadata()) {
        std::printf("  %-40s %s\n", key.c_str(), value.ToString().c_str());
      }
    }
  }
  return 0;
}

std::function<int()> SetupInspect(CLI::App* app) {
  auto a = std::make_shared<InspectArgs>();
  app->add_option("model", a->model,
                  "checkpoint (GGUF file, llama2.c .bin, Hugging Face folder) or model name")
      ->required();
  app->add_option("--tokenizer", a->tokenizer, "tokenizer file overriding the checkpoint's");
  app->add_flag("--all-tensors", a->all_tensors, "list every tensor, not only layer 0");
  app->add_flag("--metadata", a->metadata, "print every GGUF metadata key");
  return [a] { return RunInspect(*a); };
}
LAMINAR_REGISTER_COMMAND("inspect",
                         "print a checkpoint's architecture, tensors, dtypes and tokenizer",
                         SetupInspect);

}  // namespace
}  // namespace laminar::cli
