// GGUF llama/mistral/qwen2 loader: metadata -> ModelConfig, GGUF tensor names -> Hugging Face
// names, F32 as views, everything else dequantized (raw blocks kept for quantized kernels).
#include "model/gguf_model.h"

#include <cstring>
#include <set>
#include <vector>

#include "model/ggml_quants.h"

namespace laminar::model {
namespace {

struct ArchInfo {
  const char* name;
  RopeLayout rope_layout;
};
// llama.cpp's converter permutes q/k rows into the interleaved layout for llama-type models and
// leaves qwen2 in Hugging Face's rotate-half layout (NEOX RoPE).
constexpr ArchInfo kArchs[] = {
    {"llama", RopeLayout::kInterleaved},
    {"mistral", RopeLayout::kInterleaved},
    {"qwen2", RopeLayout::kRotateHalf},
};

std::string LayerName(int64_t layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}
std::string BlockName(int64_t layer, const char* suffix) {
  return "blk." + std::to_string(layer) + "." + suffix;
}

// True when output.weight holds exactly token_embd.weight's bytes (tied in the source model).
bool OutputIsEmbedding(const GgufFile& g) {
  const GgufTensorInfo* out = g.FindTensor("output.weight");
  const GgufTensorInfo* emb = g.FindTensor("token_embd.weight");
  if (out == nullptr || emb == nullptr) return out == nullptr;
  if (out->type != emb->type || out->ne != emb->ne) return false;
  auto a = g.TensorBytes(*out);
  auto b = g.TensorBytes(*emb);
  return a.ok() && b.ok() && a->size() == b->size() &&
         (a->empty() || std::memcmp(a->data(), b->data(), a->size()) == 0);
}

Status ReadRopeScaling(const GgufFile& g, const std::string& arch, ModelConfig* cfg) {
  LAMINAR_ASSIGN_OR_RETURN(std::string type, g.GetStringOr(arch + ".rope.scaling.type", "none"));
  LAMINAR_ASSIGN_OR_RETURN(double legacy_linear, g.GetFloatOr(arch + ".rope.scale_linear", 1.0));
  if (type == "none" && legacy_linear != 1.0) type = "linear";
  if (type == "none") return OkStatus();
  if (type != "linear") {
    return UnimplementedError(g.name() + ": rope scaling type '" + type +
                              "' is not supported (supported: none, linear)");
  }
  RopeScaling s;
  s.type = "linear";
  LAMINAR_ASSIGN_OR_RETURN(s.factor, g.GetFloatOr(arch + ".rope.scaling.factor", legacy_linear));
  if (!(s.factor > 0)) {
    return InvalidArgumentError(g.name() + ": rope scaling factor must be positive");
  }
  cfg->rope_scaling = s;
  return OkStatus();
}

StatusOr<int64_t> VocabSize(const GgufFile& g, const std::string& arch) {
  if (g.Has(arch + ".vocab_size")) return g.GetInt(arch + ".vocab_size");
  if (const GgufValue* tokens = g.Find("tokenizer.ggml.tokens"); tokens && tokens->is_array()) {
    return static_cast<int64_t>(tokens->array_size());
  }
  if (const GgufTensorInfo* emb = g.FindTensor("token_embd.weight"); emb && emb->ne.size() == 2) {
    return emb->ne[1];
  }
  return NotFoundError(g.name() + ": cannot tell the vocabulary size (no " + arch +
                       ".vocab_size, tokenizer.ggml.tokens or token_embd.weight)");
}

Status ReadSpecialTokens(const GgufFile& g, ModelConfig* cfg) {
  LAMINAR_ASSIGN_OR_RETURN(cfg->bos_token_id, g.GetIntOr("tokenizer.ggml.bos_token_id", -1));
  LAMINAR_ASSIGN_OR_RETURN(int64_t eos, g.GetIntOr("tokenizer.ggml.eos_token_id", -1));
  LAMINAR_ASSIGN_OR_RETURN(int64_t eot, g.GetIntOr("tokenizer.ggml.eot_token_id", -1));
  cfg->eos_token_ids.clear();
  if (eos >= 0) cfg->eos_token_ids.push_back(eos);
  if (eot >= 0 && eot != eos) cfg->eos_token_ids.push_back(eot);
  return OkStatus();
}

// Bounds every size so that products of two (q = H * D, a [V, C] shape) cannot overflow.
Status CheckDims(const GgufFile& g, const ModelConfig& c) {
  constexpr int64_t kMaxDim = int64_t{1} << 31;
  const std::pair<const char*, int64_t> dims[] = {
      {"vocab_size", c.vocab_size},
      {"embedding_length", c.hidden_size},
      {"feed_forward_length", c.intermediate_size},
      {"block_count", c.num_hidden_layers},
      {"attention.head_count", c.num_attention_heads},
      {"attention.head_count_kv", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"context_length", c.max_position_embeddings}};
  for (const auto& [name, v] : dims) {
    if (v > kMaxDim) {
      return InvalidArgumentError(g.name() + ": " + c.architecture + "." + name + " = " +
                                  std::to_string(v) + " is implausibly large");
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<ModelConfig> GgufModelConfig(const GgufFile& g) {
  LAMINAR_ASSIGN_OR_RETURN(std::string arch, g.GetString("general.architecture"));
  const ArchInfo* info = nullptr;
  for (const ArchInfo& a : kArchs) {
    if (arch == a.name) info = &a;
  }
  if (info == nullptr) {
    return UnimplementedError(g.name() + ": architecture '" + arch +
                              "' is not supported (supported: llama, mistral, qwen2)");
  }
  ModelConfig cfg;
  cfg.architecture = arch;
  cfg.rope_layout = info->rope_layout;
  const std::string p = arch + ".";
  LAMINAR_ASSIGN_OR_RETURN(cfg.max_position_embeddings, g.GetInt(p + "context_length"));
  LAMINAR_ASSIGN_OR_RETURN(cfg.hidden_size, g.GetInt(p + "embedding_length"));
  LAMINAR_ASSIGN_OR_RETURN(cfg.num_hidden_layers, g.GetInt(p + "block_count"));
  LAMINAR_ASSIGN_OR_RETURN(cfg.intermediate_size, g.GetInt(p + "feed_forward_length"));
  LAMINAR_ASSIGN_OR_RETURN(cfg.num_attention_heads, g.GetInt(p + "attention.head_count"));
  LAMINAR_ASSIGN_OR_RETURN(cfg.num_key_value_heads,
                           g.GetIntOr(p + "attention.head_count_kv", cfg.num_attention_heads));
  LAMINAR_ASSIGN_OR_RETURN(cfg.rope_theta, g.GetFloatOr(p + "rope.freq_base", 10000.0));
  LAMINAR_ASSIGN_OR_RETURN(cfg.rms_norm_eps,
                           g.GetFloatOr(p + "attention.layer_norm_rms_epsilon", 1e-5));
  LAMINAR_ASSIGN_OR_RETURN(cfg.vocab_size, VocabSize(g, arch));
  if (cfg.num_attention_heads <= 0) {
    return InvalidArgumentError(g.name() + ": " + p + "attention.head_count must be positive");
  }
  int64_t default_head_dim = cfg.hidden_size / cfg.num_attention_heads;
  LAMINAR_ASSIGN_OR_RETURN(cfg.head_dim, g.GetIntOr(p + "attention.key_length", default_head_dim));
  LAMINAR_ASSIGN_OR_RETURN(int64_t rope_dims, g.GetIntOr(p + "rope.dimension_count", cfg.head_dim));
  if (rope_dims != cfg.head_dim) {
    return UnimplementedError(g.name() + ": partial rotary embeddings (" + p +
                              "rope.dimension_count " + std::to_string(rope_dims) +
                              " != head_dim " + std::to_string(cfg.head_dim) + ") not supported");
  }
  LAMINAR_RETURN_IF_ERROR(CheckDims(g, cfg));
  LAMINAR_RETURN_IF_ERROR(ReadRopeScaling(g, arch, &cfg));
  LAMINAR_RETURN_IF_ERROR(ReadSpecialTokens(g, &cfg));
  cfg.attention_bias = g.FindTensor("blk.0.attn_q.bias") != nullptr;
  cfg.tie_word_embeddings = OutputIsEmbedding(g);
  LAMINAR_RETURN_IF_ERROR(cfg.Validate(g.name()));
  return cfg;
}

namespace {

struct Expected {
  std::string gguf_name;
  std::string hf_name;
  Shape shape;  // row-major
};

// The non-layer tensors.
std::vector<Expected> GlobalTensors(const ModelConfig& c) {
  std::vector<Expected> e = {
      {"token_embd.weight", "model.embed_tokens.weight", Shape{c.vocab_size, c.hidden_size}},
      {"output_norm.weight", "model.norm.weight", Shape{c.hidden_size}},
  };
  if (!c.tie_word_embeddings) {
    e.push_back({"output.weight", "lm_head.weight", Shape{c.vocab_size, c.hidden_size}});
  }
  return e;
}

// The tensors of layer `i`. Built one layer at a time so that an absurd block_count fails at
// the first missing tensor instead of allocating a list for every claimed layer.
std::vector<Expected> LayerTensors(const ModelConfig& c, int64_t i) {
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  std::vector<Expected> e;
  auto add = [&](const char* gguf, const char* hf, Shape s) {
    e.push_back({BlockName(i, gguf), LayerName(i, hf), std::move(s)});
  };
  add("attn_norm.weight", "input_layernorm.weight", Shape{C});
  add("attn_q.weight", "self_attn.q_proj.weight", Shape{q, C});
  add("attn_k.weight", "self_attn.k_proj.weight", Shape{kv, C});
  add("attn_v.weight", "self_attn.v_proj.weight", Shape{kv, C});
  add("attn_output.weight", "self_attn.o_proj.weight", Shape{C, q});
  if (c.attention_bias) {
    add("attn_q.bias", "self_attn.q_proj.bias", Shape{q});
    add("attn_k.bias", "self_attn.k_proj.bias", Shape{kv});
    add("attn_v.bias", "self_attn.v_proj.bias", Shape{kv});
  }
  add("ffn_norm.weight", "post_attention_layernorm.weight", Shape{C});
  add("ffn_gate.weight", "mlp.gate_proj.weight", Shape{F, C});
  add("ffn_up.weight", "mlp.up_proj.weight", Shape{F, C});
  add("ffn_down.weight", "mlp.down_proj.weight", Shape{C, F});
  return e;
}

Status LoadTensor(const GgufFile& g, const GgufTensorInfo& t, const std::string& hf_name,
                  WeightStore* w) {
  LAMINAR_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, g.TensorBytes(t));
  const Shape shape = t.shape();
  if (t.type == static_cast<uint32_t>(GgmlType::kF32)) {
    TensorView view(bytes.data(), DType::kF32, shape);
    if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0) {
      w->PutView(hf_name, view, g.file());
    } else {
      w->Put(hf_name, Tensor::FromView(view));  // alignment < 4: copy into aligned storage
    }
    return OkStatus();
  }
  const GgmlTypeTraits* traits = FindGgmlType(t.type);
  if (traits == nullptr || !traits->dequantizable) {
    return UnimplementedError(g.name() + ": tensor '" + t.name + "' has ggml type " +
                              GgmlTypeName(t.type) +
                              ", which cannot be loaded (supported: f32, f16, bf16, q8_0, q4_0, "
                              "q4_1, q4_K, q6_K)");
  }
  Tensor out(DType::kF32, shape);
  std::span<float> dst(out.data_as<float>(), static_cast<size_t>(t.num_elements));
  LAMINAR_RETURN_IF_ERROR(DequantizeGgml(t.type, bytes, dst),
                          g.name() + ": tensor '" + t.name + "'");
  w->Put(hf_name, std::move(out));
  QuantizedTensor q;
  q.type = static_cast<GgmlType>(t.type);
  q.shape = Shape{t.ne[0] == 0 ? 0 : t.num_elements / t.ne[0], t.ne[0]};
  q.bytes = bytes.data();
  q.size_bytes = bytes.size();
  q.backing = g.file();
  w->PutQuantized(hf_name, std::move(q));
  return OkStatus();
}

}  // namespace

Status LoadGgufModel(const GgufFile& g, ModelConfig* config, WeightStore* weights) {
  LAMINAR_CHECK(config != nullptr && weights != nullptr);
  LAMINAR_ASSIGN_OR_RETURN(ModelConfig cfg, GgufModelConfig(g));
  WeightStore w;
  std::set<std::string, std::less<>> used;
  if (cfg.tie_word_embeddings) used.insert("output.weight");  // absent, or a copy of token_embd
  auto load_all = [&](const std::vector<Expected>& expected) -> Status {
    for (const Expected& e : expected) {
      const GgufTensorInfo* t = g.FindTensor(e.gguf_name);
      if (t == nullptr) {
        return NotFoundError(g.name() + ": tensor '" + e.gguf_name + "' (for " + e.hf_name +
                             ") is missing");
      }
      if (t->shape() != e.shape) {
        return InvalidArgumentError(g.name() + ": tensor '" + e.gguf_name + "' has shape " +
                                    t->shape().ToString() + ", expected " + e.shape.ToString() +
                                    " from the model config");
      }
      LAMINAR_RETURN_IF_ERROR(LoadTensor(g, *t, e.hf_name, &w));
      used.insert(e.gguf_name);
    }
    return OkStatus();
  };
  LAMINAR_RETURN_IF_ERROR(load_all(GlobalTensors(cfg)));
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    LAMINAR_RETURN_IF_ERROR(load_all(LayerTensors(cfg, i)));
  }
  for (const GgufTensorInfo& t : g.tensors()) {
    if (used.count(t.name) == 0) {
      return UnimplementedError(g.name() + ": unexpected tensor '" + t.name + "' for a " +
                                cfg.architecture + " model (not supported)");
    }
  }
  *config = std::move(cfg);
  *weights = std::move(w);
  return OkStatus();
}

Status LoadGgufModel(const std::string& path, ModelConfig* config, WeightStore* weights) {
  LAMINAR_ASSIGN_OR_RETURN(GgufFile g, GgufFile::Open(path));
  return LoadGgufModel(g, config, weights);
}

}  // namespace laminar::model
