// llama2.c checkpoint reader. Weight order: run.c's memory_map_weights (legacy) and export.py's
// version1_export (version 1); every tensor is fp32 row-major [out, in], stacked over layers.
#include "model/llama2c.h"

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

namespace laminar::model {
namespace {

constexpr uint32_t kVersion1Magic = 0x616b3432;  // "ak42"
constexpr size_t kLegacyHeaderBytes = 7 * 4;
constexpr size_t kVersion1HeaderBytes = 256;

std::string LayerName(int64_t layer, const char* suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

// Number of f32 values in the weights, by the format's layout. Returns false on overflow.
bool CountFloats(const Llama2cHeader& h, uint64_t* out) {
  const uint64_t head = static_cast<uint64_t>(h.dim / h.n_heads);
  const uint64_t kv_dim = static_cast<uint64_t>(h.n_kv_heads) * head;
  const uint64_t c = h.dim, f = h.hidden_dim, l = h.n_layers, v = h.vocab_size;
  bool overflow = false;
  auto mul = [&](uint64_t a, uint64_t b) {
    uint64_t r = 0;
    overflow |= __builtin_mul_overflow(a, b, &r);
    return r;
  };
  auto add = [&](uint64_t a, uint64_t b) {
    uint64_t r = 0;
    overflow |= __builtin_add_overflow(a, b, &r);
    return r;
  };
  // rms_att + rms_ffn, wq + wo, wk + wv, w1 + w2 + w3.
  uint64_t per_layer =
      add(add(mul(2, c), mul(2, mul(c, c))), add(mul(2, mul(c, kv_dim)), mul(3, mul(c, f))));
  uint64_t total = add(mul(per_layer, l), add(mul(v, c), c));  // + embedding, final norm
  if (!h.shared_classifier) total = add(total, mul(v, c));
  if (h.format == Llama2cFormat::kLegacy) total = add(total, mul(h.seq_len, head));
  *out = total;
  return !overflow;
}

std::string Describe(const Llama2cHeader& h) {
  return "dim " + std::to_string(h.dim) + ", hidden_dim " + std::to_string(h.hidden_dim) +
         ", n_layers " + std::to_string(h.n_layers) + ", n_heads " + std::to_string(h.n_heads) +
         ", n_kv_heads " + std::to_string(h.n_kv_heads) + ", vocab_size " +
         std::to_string(h.vocab_size) + ", seq_len " + std::to_string(h.seq_len) +
         (h.shared_classifier ? ", shared classifier" : ", separate classifier");
}

Status ValidateParams(const Llama2cHeader& h, const std::string& name) {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError(name + ": invalid llama2.c header (" + Describe(h) + "): " + what);
  };
  const std::array<std::pair<const char*, int64_t>, 7> fields = {{{"dim", h.dim},
                                                                  {"hidden_dim", h.hidden_dim},
                                                                  {"n_layers", h.n_layers},
                                                                  {"n_heads", h.n_heads},
                                                                  {"n_kv_heads", h.n_kv_heads},
                                                                  {"vocab_size", h.vocab_size},
                                                                  {"seq_len", h.seq_len}}};
  for (const auto& [field, value] : fields) {
    if (value <= 0) return bad(std::string(field) + " must be positive");
  }
  if (h.dim % h.n_heads != 0) return bad("dim is not a multiple of n_heads");
  if (h.n_heads % h.n_kv_heads != 0) return bad("n_heads is not a multiple of n_kv_heads");
  if ((h.dim / h.n_heads) % 2 != 0) return bad("head size must be even for RoPE");
  return OkStatus();
}

int32_t LoadI32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

StatusOr<Llama2cHeader> ParseLlama2cHeader(std::span<const uint8_t> bytes,
                                           const std::string& name) {
  Llama2cHeader h;
  if (bytes.size() < kLegacyHeaderBytes) {
    return DataLossError(name + ": file is " + std::to_string(bytes.size()) +
                         " bytes, too short for a llama2.c header (28 bytes)");
  }
  const uint8_t* p = bytes.data();
  size_t params_at = 0;
  if (static_cast<uint32_t>(LoadI32(p)) == kVersion1Magic) {
    if (bytes.size() < kVersion1HeaderBytes) {
      return DataLossError(name + ": file is " + std::to_string(bytes.size()) +
                           " bytes, too short for a llama2.c version 1 header (256 bytes)");
    }
    int32_t version = LoadI32(p + 4);
    if (version != 1) {
      return UnimplementedError(name + ": llama2.c export version " + std::to_string(version) +
                                " is not supported (only 1, fp32, and the legacy format)");
    }
    h.format = Llama2cFormat::kVersion1;
    h.header_bytes = kVersion1HeaderBytes;
    params_at = 8;
    uint8_t shared = p[8 + 7 * 4];
    if (shared > 1) {
      return InvalidArgumentError(name + ": llama2.c shared_classifier flag is " +
                                  std::to_string(shared) + ", expected 0 or 1");
    }
    h.shared_classifier = shared == 1;
  } else {
    h.header_bytes = kLegacyHeaderBytes;
  }
  std::array<int64_t, 7> v{};
  for (size_t i = 0; i < v.size(); ++i) v[i] = LoadI32(p + params_at + 4 * i);
  h.dim = v[0], h.hidden_dim = v[1], h.n_layers = v[2], h.n_heads = v[3];
  h.n_kv_heads = v[4], h.vocab_size = v[5], h.seq_len = v[6];
  if (h.format == Llama2cFormat::kLegacy) {
    h.shared_classifier = h.vocab_size > 0;
    h.vocab_size = h.vocab_size < 0 ? -h.vocab_size : h.vocab_size;
  }
  LAMINAR_RETURN_IF_ERROR(ValidateParams(h, name));
  uint64_t floats = 0;
  if (!CountFloats(h, &floats) || floats > (SIZE_MAX - h.header_bytes) / 4) {
    return InvalidArgumentError(name + ": llama2.c header (" + Describe(h) +
                                ") implies an impossibly large file");
  }
  h.expected_bytes = h.header_bytes + 4 * floats;
  if (bytes.size() != h.expected_bytes) {
    return DataLossError(
        name + ": file is " + std::to_string(bytes.size()) + " bytes, but its llama2.c " +
        (h.format == Llama2cFormat::kLegacy ? "legacy" : "version 1") + " header (" + Describe(h) +
        ") implies " + std::to_string(h.expected_bytes) + " bytes");
  }
  return h;
}

namespace {

// Hands out consecutive f32 tensors of the mapping.
class F32Cursor {
 public:
  F32Cursor(const uint8_t* base, size_t offset) : base_(base), offset_(offset) {}
  TensorView Take(Shape shape) {
    TensorView v(base_ + offset_, DType::kF32, shape);
    offset_ += static_cast<size_t>(shape.num_elements()) * 4;
    return v;
  }
  void Skip(int64_t floats) { offset_ += static_cast<size_t>(floats) * 4; }
  size_t offset() const { return offset_; }

 private:
  const uint8_t* base_;
  size_t offset_;
};

// One tensor per layer, stacked: names[layer] get consecutive slices of `shape`.
void TakeLayers(F32Cursor* cur, const Llama2cHeader& h, const char* suffix, const Shape& shape,
                const std::shared_ptr<MappedFile>& file, WeightStore* w) {
  for (int64_t l = 0; l < h.n_layers; ++l) w->PutView(LayerName(l, suffix), cur->Take(shape), file);
}

}  // namespace

Status LoadLlama2c(std::shared_ptr<MappedFile> file, ModelConfig* config, WeightStore* weights) {
  LAMINAR_CHECK(file != nullptr && config != nullptr && weights != nullptr);
  LAMINAR_ASSIGN_OR_RETURN(Llama2cHeader h, ParseLlama2cHeader(file->bytes(), file->path()));
  const int64_t c = h.dim, f = h.hidden_dim, v = h.vocab_size;
  const int64_t head = h.dim / h.n_heads, kv = h.n_kv_heads * head;

  ModelConfig cfg;
  cfg.architecture = "llama";
  cfg.vocab_size = v;
  cfg.hidden_size = c;
  cfg.intermediate_size = f;
  cfg.num_hidden_layers = h.n_layers;
  cfg.num_attention_heads = h.n_heads;
  cfg.num_key_value_heads = h.n_kv_heads;
  cfg.head_dim = head;
  cfg.max_position_embeddings = h.seq_len;
  cfg.rope_theta = 10000.0;
  cfg.rms_norm_eps = 1e-5;
  cfg.tie_word_embeddings = h.shared_classifier;
  cfg.attention_bias = false;
  if (v > 2) {  // run.c's encode() and generate() use BOS = 1 and EOS = 2
    cfg.bos_token_id = 1;
    cfg.eos_token_ids = {2};
  }
  cfg.rope_layout = RopeLayout::kInterleaved;
  LAMINAR_RETURN_IF_ERROR(cfg.Validate(file->path()));

  WeightStore w;
  F32Cursor cur(file->data(), h.header_bytes);
  auto norms = [&] {
    TakeLayers(&cur, h, "input_layernorm.weight", Shape{c}, file, &w);
    TakeLayers(&cur, h, "post_attention_layernorm.weight", Shape{c}, file, &w);
    w.PutView("model.norm.weight", cur.Take(Shape{c}), file);
  };
  if (h.format == Llama2cFormat::kVersion1) norms();
  w.PutView("model.embed_tokens.weight", cur.Take(Shape{v, c}), file);
  if (h.format == Llama2cFormat::kLegacy) {
    TakeLayers(&cur, h, "input_layernorm.weight", Shape{c}, file, &w);
  }
  TakeLayers(&cur, h, "self_attn.q_proj.weight", Shape{h.n_heads * head, c}, file, &w);
  TakeLayers(&cur, h, "self_attn.k_proj.weight", Shape{kv, c}, file, &w);
  TakeLayers(&cur, h, "self_attn.v_proj.weight", Shape{kv, c}, file, &w);
  TakeLayers(&cur, h, "self_attn.o_proj.weight", Shape{c, h.n_heads * head}, file, &w);
  if (h.format == Llama2cFormat::kLegacy) {
    TakeLayers(&cur, h, "post_attention_layernorm.weight", Shape{c}, file, &w);
  }
  TakeLayers(&cur, h, "mlp.gate_proj.weight", Shape{f, c}, file, &w);  // w1
  TakeLayers(&cur, h, "mlp.down_proj.weight", Shape{c, f}, file, &w);  // w2
  TakeLayers(&cur, h, "mlp.up_proj.weight", Shape{f, c}, file, &w);    // w3
  if (h.format == Llama2cFormat::kLegacy) {
    w.PutView("model.norm.weight", cur.Take(Shape{c}), file);
    cur.Skip(h.seq_len * head);  // freq_cis_real and freq_cis_imag, [seq_len, head / 2] each
  }
  if (!h.shared_classifier) w.PutView("lm_head.weight", cur.Take(Shape{v, c}), file);
  LAMINAR_CHECK(cur.offset() == h.expected_bytes) << file->path() << ": layout mismatch";
  *config = std::move(cfg);
  *weights = std::move(w);
  return OkStatus();
}

Status LoadLlama2c(const std::string& path, ModelConfig* config, WeightStore* weights) {
  LAMINAR_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  return LoadLlama2c(std::move(file), config, weights);
}

}  // namespace laminar::model
