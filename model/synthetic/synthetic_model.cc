// The synthetic models; see synthetic_model.h.
#include "model/synthetic/synthetic_model.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "model/gguf_writer.h"
#include "model/hf_checkpoint.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/bpe_trainer.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::model {
namespace {

namespace fs = std::filesystem;

const std::vector<SyntheticPreset>& Presets() {
  static const std::vector<SyntheticPreset> presets = {
      {.name = "tiny-llama",
       .num_merges = 250,
       .hidden_size = 64,
       .intermediate_size = 192,
       .num_hidden_layers = 4,
       .num_attention_heads = 4,
       .num_key_value_heads = 2,
       .max_position_embeddings = 1024,
       .embedding_std = 1.0f,
       .output_std = 0.5f},
  };
  return presets;
}

// ChatML, written for these models: each turn is <|im_start|>role\ncontent<|im_end|>\n.
constexpr std::string_view kChatTemplate =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

constexpr const char* kSpecials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

// Normal(0, 1) draws that do not depend on the standard library's distributions (whose
// algorithms differ between implementations): 53-bit uniforms through Box-Muller.
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : rng_(seed) {}
  float Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = (static_cast<double>(rng_() >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;          // [0, 1)
    const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * M_PI * u2;
    spare_ = static_cast<float>(r * std::sin(t));
    has_spare_ = true;
    return static_cast<float>(r * std::cos(t));
  }

 private:
  std::mt19937_64 rng_;
  float spare_ = 0.f;
  bool has_spare_ = false;
};

// The weights: every tensor in ExpectedHfTensors order (sorted by name), so the stream assigns
// the same values to the same tensor whatever else changes.
WeightStore MakeWeights(const ModelConfig& c, const SyntheticPreset& preset, uint64_t seed) {
  WeightStore store;
  NormalStream normal(seed);
  for (const auto& [name, shape] : ExpectedHfTensors(c)) {
    Tensor t(DType::kF32, shape);
    float* v = t.data_as<float>();
    if (name.ends_with("norm.weight")) {
      for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = 1.f;
    } else {
      float std = 1.f / std::sqrt(static_cast<float>(shape[shape.rank() - 1]));
      if (name == "model.embed_tokens.weight") std = preset.embedding_std;
      if (name == "lm_head.weight") std = preset.output_std;
      for (int64_t i = 0; i < t.num_elements(); ++i) v[i] = std * normal.Next();
    }
    store.Put(name, std::move(t));
  }
  return store;
}

// Hugging Face tensor name -> GGUF name (llama.cpp's), for the tensors a synthetic model has.
std::string GgufName(const std::string& hf) {
  static const std::vector<std::pair<std::string, std::string>> layer = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string prefix = "model.layers.";
  const size_t dot = hf.find('.', prefix.size());
  const std::string index = hf.substr(prefix.size(), dot - prefix.size());
  const std::string rest = hf.substr(dot + 1);
  for (const auto& [h, g] : layer) {
    if (rest == h) return "blk." + index + "." + g;
  }
  LAMINAR_CHECK(false) << "no GGUF name for " << hf;
  return "";
}

GgufWriter GgufOf(const SyntheticModel& m) {
  const ModelConfig& c = m.config;
  GgufWriter w;
  w.String("general.architecture", "llama");
  w.String("general.name", "laminar " + m.description);
  w.U32("general.alignment", 32);
  w.U32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.U32("llama.context_length", static_cast<uint32_t>(c.max_position_embeddings));
  w.U32("llama.embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.U32("llama.feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  w.U32("llama.block_count", static_cast<uint32_t>(c.num_hidden_layers));
  w.U32("llama.attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  w.U32("llama.attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  w.U32("llama.attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.U32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.F32("llama.rope.freq_base", static_cast<float>(c.rope_theta));
  w.F32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.String("tokenizer.ggml.model", "gpt2");
  w.String("tokenizer.ggml.pre", m.pre_tokenizer);
  w.StringArray("tokenizer.ggml.tokens", m.vocab.pieces);
  std::vector<int32_t> types;
  for (TokenType t : m.vocab.types) types.push_back(static_cast<int32_t>(t));
  w.Array<int32_t>("tokenizer.ggml.token_type", 5, types);
  std::vector<std::string> merges;
  for (const auto& [a, b] : m.merges) merges.push_back(a + " " + b);
  w.StringArray("tokenizer.ggml.merges", merges);
  w.U32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(m.vocab.bos_id));
  w.U32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(m.vocab.eos_id));
  w.U32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(m.vocab.pad_id));
  w.Bool("tokenizer.ggml.add_bos_token", m.vocab.add_bos);
  w.String("tokenizer.chat_template", m.vocab.chat_template);
  for (const auto& [name, shape] : ExpectedHfTensors(c)) {
    auto t = m.weights.Get(name);
    LAMINAR_CHECK(t.ok()) << t.status();
    std::vector<uint64_t> ne;  // innermost first
    for (size_t d = shape.rank(); d-- > 0;) ne.push_back(static_cast<uint64_t>(shape[d]));
    std::string bytes(static_cast<const char*>(t->data()), t->size_bytes());
    w.Tensor(GgufName(name), ne, 0, bytes);
  }
  return w;
}

}  // namespace

std::vector<std::string> SyntheticPresetNames() {
  std::vector<std::string> names;
  for (const SyntheticPreset& p : Presets()) names.push_back(p.name);
  return names;
}

StatusOr<SyntheticPreset> FindSyntheticPreset(std::string_view name) {
  std::string known;
  for (const SyntheticPreset& p : Presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  return InvalidArgumentError("unknown model preset '" + std::string(name) +
                              "' (presets: " + known + ")");
}

StatusOr<SyntheticModel> MakeSyntheticModel(const SyntheticPreset& preset, uint64_t seed) {
  SyntheticModel m;
  m.description = preset.name + " seed " + std::to_string(seed);
  LAMINAR_ASSIGN_OR_RETURN(std::vector<std::string> regexes, PreTokenizerRegexes(m.pre_tokenizer));
  LAMINAR_ASSIGN_OR_RETURN(LearnedBpe bpe,
                           LearnByteLevelBpe(SyntheticCorpus(), regexes, preset.num_merges));
  for (const char* s : kSpecials) {
    m.vocab.pieces.emplace_back(s);
    m.vocab.types.push_back(TokenType::kControl);
  }
  for (std::string& p : bpe.pieces) {
    m.vocab.pieces.push_back(std::move(p));
    m.vocab.types.push_back(TokenType::kNormal);
  }
  m.vocab.scores.assign(m.vocab.pieces.size(), 0.f);
  m.vocab.pad_id = 0;  // <|endoftext|>
  m.vocab.bos_id = 1;  // <|im_start|>
  m.vocab.eos_id = 2;  // <|im_end|>
  m.vocab.chat_template = std::string(kChatTemplate);
  m.merges = std::move(bpe.merges);

  ModelConfig& c = m.config;
  c.architecture = "llama";
  c.vocab_size = m.vocab.size();
  c.hidden_size = preset.hidden_size;
  c.intermediate_size = preset.intermediate_size;
  c.num_hidden_layers = preset.num_hidden_layers;
  c.num_attention_heads = preset.num_attention_heads;
  c.num_key_value_heads = preset.num_key_value_heads;
  c.head_dim = preset.hidden_size / preset.num_attention_heads;
  c.max_position_embeddings = preset.max_position_embeddings;
  c.tie_word_embeddings = false;
  c.bos_token_id = m.vocab.bos_id;
  c.eos_token_ids = {m.vocab.eos_id};
  c.rope_layout = RopeLayout::kInterleaved;
  LAMINAR_RETURN_IF_ERROR(c.Validate(m.description));
  m.weights = MakeWeights(c, preset, seed);
  return m;
}

StatusOr<std::unique_ptr<Tokenizer>> SyntheticTokenizer(const SyntheticModel& model) {
  ByteLevelBpeTokenizer::Options options;
  options.pre_tokenizer_name = model.pre_tokenizer;
  LAMINAR_ASSIGN_OR_RETURN(options.pre_tokenizer_regexes, PreTokenizerRegexes(model.pre_tokenizer));
  LAMINAR_ASSIGN_OR_RETURN(auto tok, ByteLevelBpeTokenizer::Create(model.vocab, model.merges,
                                                                   options, model.description));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

Status WriteSyntheticModel(const SyntheticModel& model, const std::string& dir_in, bool overwrite) {
  fs::path dir = fs::path(dir_in).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();
  std::error_code ec;
  if (fs::exists(dir, ec) && !overwrite) {
    return AlreadyExistsError(dir.string() + " exists (pass --overwrite to replace it)");
  }
  const fs::path partial = dir.string() + ".partial-" + std::to_string(getpid());
  fs::remove_all(partial, ec);
  fs::create_directories(partial, ec);
  if (ec) return InternalError("cannot create " + partial.string() + ": " + ec.message());
  auto cleanup = [&](Status st) {
    std::error_code ignored;
    fs::remove_all(partial, ignored);
    return st;
  };
  Status st = GgufOf(model).WriteFile((partial / "model.gguf").string());
  if (!st.ok()) return cleanup(st);
  auto tokenizer = SyntheticTokenizer(model);
  if (!tokenizer.ok()) return cleanup(tokenizer.status());
  auto files = ExportHfTokenizerFiles(**tokenizer, model.vocab.chat_template);
  if (!files.ok()) return cleanup(files.status());
  HfSaveOptions options;
  options.tokenizer_files = std::move(*files);
  st = SaveHfCheckpoint((partial / "hf").string(), model.config, model.weights, options);
  if (!st.ok()) return cleanup(st);
  fs::remove_all(dir, ec);
  if (ec) return cleanup(InternalError("cannot remove " + dir.string() + ": " + ec.message()));
  fs::rename(partial, dir, ec);
  if (ec) return cleanup(InternalError("cannot rename into " + dir.string() + ": " + ec.message()));
  return OkStatus();
}

}  // namespace laminar::model
