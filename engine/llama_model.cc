// Llama-family forward pass over packed sequences, on the reference kernels.
#include "engine/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "core/dtype.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/vec_ops.h"
#include "kernels/reference/paged_attention.h"
#include "model/ggml_quants.h"

namespace laminar::engine {

// Activation buffers of one Forward call, sized once and reused by every layer.
struct Workspace {
  std::vector<float> hn, q, k, v, att, out, gate, up;
};

namespace {

std::string LayerName(int64_t i, const char* suffix) {
  return "model.layers." + std::to_string(i) + "." + suffix;
}

constexpr WeightFormat kWeightFormats[] = {
    WeightFormat::kF32,  WeightFormat::kBF16, WeightFormat::kW8A8, WeightFormat::kW4A8,
    WeightFormat::kQ8_0, WeightFormat::kQ4_1, WeightFormat::kGguf};

// A [n, k] f32 matrix quantized to ggml blocks of `type` (Q8_0 or Q4_1; k a multiple of 32) and
// packed for the block kernels.
StatusOr<kernels::GgufQuantWeights> QuantizeToGgmlBlocks(model::GgmlType type,
                                                         std::span<const float> w, int64_t n,
                                                         int64_t k) {
  LAMINAR_ASSIGN_OR_RETURN(size_t bytes, model::GgmlRowBytes(static_cast<uint32_t>(type), n * k));
  for (const float x : w) {
    if (!std::isfinite(x)) return InvalidArgumentError("a weight is not finite");
  }
  std::vector<uint8_t> blocks(bytes);
  if (type == model::GgmlType::kQ8_0) {
    model::QuantizeQ8_0(w.data(), blocks.data(), n * k);
  } else {
    model::QuantizeQ4_1(w.data(), blocks.data(), n * k);
  }
  return kernels::PackGgufWeights(static_cast<uint32_t>(type), blocks, n, k);
}

}  // namespace

std::string WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kW8A8:
      return "w8a8";
    case WeightFormat::kW4A8:
      return "w4a8";
    case WeightFormat::kQ8_0:
      return "q8_0";
    case WeightFormat::kQ4_1:
      return "q4_1";
    case WeightFormat::kGguf:
      return "gguf";
  }
  return "?";
}

std::vector<std::string> WeightFormatNames() {
  std::vector<std::string> names;
  for (WeightFormat f : kWeightFormats) names.push_back(WeightFormatName(f));
  return names;
}

StatusOr<WeightFormat> ParseWeightFormat(std::string_view name) {
  std::string known;
  for (WeightFormat f : kWeightFormats) {
    if (name == WeightFormatName(f)) return f;
    known += (known.empty() ? "" : ", ") + WeightFormatName(f);
  }
  return InvalidArgumentError("weight format '" + std::string(name) +
                              "' is unknown; known: " + known);
}

kernels::RopeScalingParams RopeScalingOf(const model::ModelConfig& c) {
  return kernels::RopeScalingFrom(c.rope_scaling);
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Create(const model::ModelConfig& config,
                                                         const model::WeightStore& weights,
                                                         Backend backend, WeightFormat format) {
  if (backend == Backend::kReference && format != WeightFormat::kF32) {
    return InvalidArgumentError("the reference backend runs f32 weights only, not " +
                                WeightFormatName(format));
  }
  LAMINAR_RETURN_IF_ERROR(config.Validate("model"));
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->config_ = config;
  m->backend_ = backend;
  m->format_ = format;
  m->bf16_dot_ = format == WeightFormat::kBF16 && kernels::cpu::HasBF16Dot();
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads > 1) m->pool_ = std::make_shared<ThreadPool>(threads - 1);
  LAMINAR_RETURN_IF_ERROR(m->Bind(weights));
  LAMINAR_RETURN_IF_ERROR(m->Quantize());
  m->inv_freq_.resize(static_cast<size_t>(config.head_dim / 2));
  kernels::ref::RopeInvFreq(config.head_dim, config.rope_theta, RopeScalingOf(config),
                            m->inv_freq_);
  // Up to 16k positions tabulated (16 MB at head_dim 128); later ones are computed per call.
  m->rope_ = std::make_shared<const kernels::cpu::RopeTable>(
      m->inv_freq_, std::min<int64_t>(config.max_position_embeddings, 16384));
  return m;
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::LayerSubset(
    std::span<const int64_t> layers) const {
  if (layers.empty()) return InvalidArgumentError("layer subset: no layer");
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= std::ssize(layers_) ||
        (i > 0 && layers[i] <= layers[i - 1])) {
      return InvalidArgumentError("layer subset: layer " + std::to_string(layers[i]) + " (entry " +
                                  std::to_string(i) + ") is not ascending in [0, " +
                                  std::to_string(layers_.size()) + ")");
    }
  }
  std::unique_ptr<LlamaModel> m = SharedView();
  m->config_.num_hidden_layers = static_cast<int64_t>(layers.size());
  m->layers_.clear();
  for (int64_t l : layers) m->layers_.push_back(layers_[static_cast<size_t>(l)]);
  m->projection_bytes_ = projection_bytes_ * static_cast<int64_t>(layers.size()) /
                         std::max<int64_t>(1, std::ssize(layers_));
  return m;
}

std::unique_ptr<LlamaModel> LlamaModel::SharedView() const {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->config_ = config_;
  m->backend_ = backend_;
  m->format_ = format_;
  m->bf16_dot_ = bf16_dot_;
  m->projection_bytes_ = projection_bytes_;
  m->pool_ = pool_;
  m->embed_ = embed_;
  m->final_norm_ = final_norm_;
  m->lm_head_ = lm_head_;
  m->output_ids_ = output_ids_;
  m->layers_ = layers_;
  m->inv_freq_ = inv_freq_;
  m->rope_ = rope_;
  return m;
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::WithOutputVocab(
    std::span<const int32_t> ids) const {
  const int64_t v = config_.vocab_size, c = config_.hidden_size;
  if (ids.empty()) return InvalidArgumentError("output vocabulary: no token");
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= v || (i > 0 && ids[i] <= ids[i - 1])) {
      return InvalidArgumentError("output vocabulary: token " + std::to_string(ids[i]) +
                                  " (entry " + std::to_string(i) + ") is not ascending in [0, " +
                                  std::to_string(v) + ")");
    }
  }
  // The rows of this model's head (itself possibly a subset) that the tokens are.
  std::vector<int32_t> rows(ids.begin(), ids.end());
  if (!output_ids_.empty()) {
    for (int32_t& r : rows) {
      auto it = std::ranges::lower_bound(output_ids_, r);
      if (it == output_ids_.end() || *it != r) {
        return InvalidArgumentError("output vocabulary: token " + std::to_string(r) +
                                    " is not in this model's output vocabulary");
      }
      r = static_cast<int32_t>(it - output_ids_.begin());
    }
  }
  std::unique_ptr<LlamaModel> m = SharedView();
  m->output_ids_.assign(ids.begin(), ids.end());
  const int64_t n = std::ssize(rows);
  Weight head;
  const Weight& from = lm_head_;
  if (!from.f32.empty() || !from.bf16.empty()) {
    const bool f32 = !from.f32.empty();
    Tensor t(f32 ? DType::kF32 : DType::kBF16, {n, c});
    const size_t row_bytes = static_cast<size_t>(c) * (f32 ? 4 : 2);
    const auto* src = f32 ? static_cast<const void*>(from.f32.data()) : from.bf16.data();
    for (int64_t r = 0; r < n; ++r) {
      std::memcpy(static_cast<uint8_t*>(t.data()) + r * row_bytes,
                  static_cast<const uint8_t*>(src) + rows[r] * row_bytes, row_bytes);
    }
    m->owned_.push_back(std::move(t));
    if (f32) {
      head.f32 = {m->owned_.back().data_as<const float>(), static_cast<size_t>(n * c)};
    } else {
      head.bf16 = {m->owned_.back().data_as<const uint16_t>(), static_cast<size_t>(n * c)};
    }
  } else if (from.w8a8) {
    // Drafting runs the head on one row: the many-row packing is left out (int8_packed null).
    head.w8a8 = std::make_shared<const kernels::W8A8Weights>(kernels::GatherRows(*from.w8a8, rows));
  } else if (from.gguf) {
    head.gguf = std::make_shared<const kernels::cpu::GgufRowGroups>(
        kernels::cpu::GatherRows(*from.gguf, rows));
  } else {
    return InvalidArgumentError("output vocabulary: the head's format (" +
                                WeightFormatName(format_) + ") has no row gather");
  }
  m->projection_bytes_ += WeightBytes(head) - WeightBytes(lm_head_);
  m->lm_head_ = std::move(head);
  return m;
}

StatusOr<std::span<const float>> LlamaModel::Tensor2D(const model::WeightStore& weights,
                                                      const std::string& name, int64_t rows,
                                                      int64_t cols) {
  LAMINAR_ASSIGN_OR_RETURN(TensorView view, weights.Get(name));
  Shape want = rows == 0 ? Shape{cols} : Shape{rows, cols};
  if (view.shape() != want) {
    return InvalidArgumentError("tensor '" + name + "' has shape " + view.shape().ToString() +
                                ", the config implies " + want.ToString());
  }
  if (view.dtype() == DType::kF32) {
    return std::span<const float>(view.data_as<const float>(),
                                  static_cast<size_t>(view.num_elements()));
  }
  LAMINAR_ASSIGN_OR_RETURN(Tensor f32, ToF32(view), "tensor '" + name + "'");
  owned_.push_back(std::move(f32));
  const Tensor& t = owned_.back();
  return std::span<const float>(t.data_as<const float>(), static_cast<size_t>(t.num_elements()));
}

StatusOr<LlamaModel::Weight> LlamaModel::Projection(const model::WeightStore& weights,
                                                    const std::string& name, int64_t rows,
                                                    int64_t cols) {
  Weight w;
  if (format_ == WeightFormat::kGguf) {
    const model::QuantizedTensor* q = weights.GetQuantized(name);
    const bool runnable =
        q != nullptr && (q->type == model::GgmlType::kQ4_0 || q->type == model::GgmlType::kQ4_1 ||
                         q->type == model::GgmlType::kQ8_0);
    if (runnable) {
      if (q->shape != Shape{rows, cols}) {
        return InvalidArgumentError("tensor '" + name + "' has shape " + q->shape.ToString() +
                                    ", the config implies " + Shape{rows, cols}.ToString());
      }
      LAMINAR_ASSIGN_OR_RETURN(kernels::GgufQuantWeights packed,
                               kernels::PackGgufWeights(static_cast<uint32_t>(q->type),
                                                        {q->bytes, q->size_bytes}, rows, cols),
                               "tensor '" + name + "'");
      w.gguf = std::make_shared<const kernels::cpu::GgufRowGroups>(
          kernels::cpu::PackGgufRowGroups(packed));
      return w;
    }
  }
  if (format_ != WeightFormat::kBF16) {  // f32 now; quantized later for the integer formats
    LAMINAR_ASSIGN_OR_RETURN(w.f32, Tensor2D(weights, name, rows, cols));
    return w;
  }
  LAMINAR_ASSIGN_OR_RETURN(TensorView view, weights.Get(name));
  if (view.dtype() == DType::kBF16 && view.shape() == Shape{rows, cols}) {
    w.bf16 = {view.data_as<const uint16_t>(), static_cast<size_t>(view.num_elements())};
    return w;
  }
  LAMINAR_ASSIGN_OR_RETURN(std::span<const float> f32, Tensor2D(weights, name, rows, cols));
  Tensor bf16(DType::kBF16, {rows, cols});
  uint16_t* dst = bf16.data_as<uint16_t>();
  for (size_t i = 0; i < f32.size(); ++i) dst[i] = FloatToBF16(f32[i]);
  owned_.push_back(std::move(bf16));
  w.bf16 = {owned_.back().data_as<const uint16_t>(), f32.size()};
  return w;
}

int64_t LlamaModel::WeightBytes(const Weight& w) {
  int64_t bytes = static_cast<int64_t>(w.f32.size() * 4 + w.bf16.size() * 2);
  if (w.w8a8) bytes += static_cast<int64_t>(w.w8a8->u.size() + 4 * w.w8a8->n);
  if (w.w4a8) {
    bytes += static_cast<int64_t>(w.w4a8->q4.size() + w.w4a8->group_scale.size() +
                                  w.w4a8->group_offset.size() + 4 * w.w4a8->n);
  }
  if (w.gguf) {
    bytes += static_cast<int64_t>(w.gguf->data.size());
  }
  return bytes;
}

Status LlamaModel::Quantize() {
  std::vector<Weight*> all = {&lm_head_};
  for (Layer& l : layers_) {
    for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) all.push_back(w);
  }
  const int64_t k_of_head = config_.hidden_size;
  const int64_t q_dim = config_.num_attention_heads * config_.head_dim;
  // [N, K] of each entry of `all`, in the same order.
  std::vector<std::pair<int64_t, int64_t>> shapes = {{config_.vocab_size, k_of_head}};
  const int64_t kv_dim = config_.num_key_value_heads * config_.head_dim, c = config_.hidden_size,
                f = config_.intermediate_size;
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (auto nk :
         {std::pair{q_dim, c}, {kv_dim, c}, {kv_dim, c}, {c, q_dim}, {f, c}, {f, c}, {c, f}}) {
      shapes.push_back(nk);
    }
  }
  const bool blocks = format_ == WeightFormat::kQ8_0 || format_ == WeightFormat::kQ4_1;
  const bool quantize = format_ == WeightFormat::kW8A8 || format_ == WeightFormat::kW4A8 || blocks;
  if (format_ == WeightFormat::kGguf &&
      std::none_of(all.begin(), all.end(), [](const Weight* w) { return w->gguf != nullptr; })) {
    return InvalidArgumentError(
        "weights gguf runs a GGUF checkpoint's Q4_0/Q4_1/Q8_0 blocks as stored, and this "
        "checkpoint has none among its projections; use f32, bf16, w8a8, w4a8, q8_0 or q4_1");
  }
  std::vector<Status> errors(all.size());
  std::vector<const void*> replaced(all.size(), nullptr);  // f32 data the quantized copies replace
  const int64_t threads = pool_ == nullptr ? 1 : pool_->num_threads() + 1;
  auto run = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      Weight& w = *all[i];
      if (!quantize || w.f32.empty()) continue;
      const auto [n, k] = shapes[i];
      if (blocks) {
        // ggml's blocks span 32 elements of a row: a tensor with another K stays f32, as a GGUF
        // checkpoint's unquantized tensors do. The head stays Q8_0 under q4_1, as in GGUF's Q4
        // files.
        if (k % 32 != 0) continue;
        const model::GgmlType type = format_ == WeightFormat::kQ8_0 || &w == &lm_head_
                                         ? model::GgmlType::kQ8_0
                                         : model::GgmlType::kQ4_1;
        auto q = QuantizeToGgmlBlocks(type, w.f32, n, k);
        if (!q.ok()) {
          errors[i] = q.status();
        } else {
          w.gguf = std::make_shared<const kernels::cpu::GgufRowGroups>(
              kernels::cpu::PackGgufRowGroups(*q));
          replaced[i] = w.f32.data();
          w.f32 = {};
        }
        continue;
      }
      // The output head stays 8-bit under w4a8, as GGUF's Q4 files keep theirs at Q8_0/Q6_K: the
      // logits are what the sampled tokens and their logprobs come from.
      if (format_ == WeightFormat::kW8A8 || &w == &lm_head_) {
        auto q = kernels::QuantizeW8A8(w.f32, n, k);
        if (!q.ok())
          errors[i] = q.status();
        else
          w.w8a8 = std::make_shared<const kernels::W8A8Weights>(*std::move(q));
        if (w.w8a8 && backend_ == Backend::kCpu) {
          w.int8_packed = kernels::cpu::PackManyRowInt8(*w.w8a8, threads);
        }
      } else {
        auto q = kernels::QuantizeW4A8(w.f32, n, k, kW4A8GroupSize);
        if (!q.ok())
          errors[i] = q.status();
        else
          w.w4a8 = std::make_shared<const kernels::W4A8Weights>(*std::move(q));
        if (w.w4a8 && backend_ == Backend::kCpu) {
          w.int8_packed = kernels::cpu::PackManyRowInt8(*w.w4a8, threads);
        }
      }
      if (errors[i].ok()) {
        replaced[i] = w.f32.data();
        w.f32 = {};
      }
    }
  };
  if (pool_ != nullptr && quantize) {
    pool_->ParallelFor(static_cast<int64_t>(all.size()), 1, run);
  } else {
    run(0, static_cast<int64_t>(all.size()));
  }
  for (const Status& e : errors)
    LAMINAR_RETURN_IF_ERROR(e, "quantizing to " + WeightFormatName(format_));
  // f32 conversions (of f16/bf16 checkpoints) that only fed the quantizer can go.
  std::erase_if(owned_, [&](const Tensor& t) {
    return std::find(replaced.begin(), replaced.end(), t.data()) != replaced.end();
  });
  projection_bytes_ = 0;
  for (const Weight* w : all) projection_bytes_ += WeightBytes(*w);
  return OkStatus();
}

Status LlamaModel::Bind(const model::WeightStore& w) {
  const auto& c = config_;
  int64_t q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  LAMINAR_ASSIGN_OR_RETURN(embed_,
                           Tensor2D(w, "model.embed_tokens.weight", c.vocab_size, c.hidden_size));
  LAMINAR_ASSIGN_OR_RETURN(final_norm_, Tensor2D(w, "model.norm.weight", 0, c.hidden_size));
  LAMINAR_ASSIGN_OR_RETURN(
      lm_head_,
      Projection(w, c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight",
                 c.vocab_size, c.hidden_size));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    Layer l;
    LAMINAR_ASSIGN_OR_RETURN(l.attn_norm,
                             Tensor2D(w, LayerName(i, "input_layernorm.weight"), 0, c.hidden_size));
    LAMINAR_ASSIGN_OR_RETURN(
        l.wq, Projection(w, LayerName(i, "self_attn.q_proj.weight"), q_dim, c.hidden_size));
    LAMINAR_ASSIGN_OR_RETURN(
        l.wk, Projection(w, LayerName(i, "self_attn.k_proj.weight"), kv_dim, c.hidden_size));
    LAMINAR_ASSIGN_OR_RETURN(
        l.wv, Projection(w, LayerName(i, "self_attn.v_proj.weight"), kv_dim, c.hidden_size));
    LAMINAR_ASSIGN_OR_RETURN(
        l.wo, Projection(w, LayerName(i, "self_attn.o_proj.weight"), c.hidden_size, q_dim));
    if (c.attention_bias) {
      LAMINAR_ASSIGN_OR_RETURN(l.bq, Tensor2D(w, LayerName(i, "self_attn.q_proj.bias"), 0, q_dim));
      LAMINAR_ASSIGN_OR_RETURN(l.bk, Tensor2D(w, LayerName(i, "self_attn.k_proj.bias"), 0, kv_dim));
      LAMINAR_ASSIGN_OR_RETURN(l.bv, Tensor2D(w, LayerName(i, "self_attn.v_proj.bias"), 0, kv_dim));
    }
    LAMINAR_ASSIGN_OR_RETURN(
        l.ffn_norm, Tensor2D(w, LayerName(i, "post_attention_layernorm.weight"), 0, c.hidden_size));
    LAMINAR_ASSIGN_OR_RETURN(l.w_gate, Projection(w, LayerName(i, "mlp.gate_proj.weight"),
                                                  c.intermediate_size, c.hidden_size));
    LAMINAR_ASSIGN_OR_RETURN(l.w_up, Projection(w, LayerName(i, "mlp.up_proj.weight"),
                                                c.intermediate_size, c.hidden_size));
    LAMINAR_ASSIGN_OR_RETURN(l.w_down, Projection(w, LayerName(i, "mlp.down_proj.weight"),
                                                  c.hidden_size, c.intermediate_size));
    layers_.push_back(l);
  }
  return OkStatus();
}

void LlamaModel::Linear(std::span<const float> x, const Weight& w, std::span<const float> bias,
                        int64_t m, int64_t n, int64_t k, std::span<float> out) const {
  if (backend_ == Backend::kReference) {
    kernels::ref::MatMul(x, w.f32, bias, m, n, k, out);
    return;
  }
  if (!w.f32.empty()) {
    LAMINAR_CHECK_OK(kernels::cpu::MatMul(x, w.f32, bias, m, n, k, out, pool_.get()));
    return;
  }
  if (w.w8a8 || w.w4a8) {
    thread_local kernels::Int8Activations xq;
    kernels::QuantizeActivationsPerToken(x, m, k, &xq);
    const kernels::cpu::QuantIsa isa = kernels::cpu::BestQuantIsa();
    if (w.w8a8) {
      kernels::cpu::MatMulW8A8(xq, *w.w8a8, bias, out, pool_.get(), isa, w.int8_packed.get());
    } else {
      kernels::cpu::MatMulW4A8(xq, *w.w4a8, bias, out, pool_.get(), isa, w.int8_packed.get());
    }
    return;
  }
  if (w.gguf) {
    thread_local kernels::Q8BlockActivations xq;
    kernels::QuantizeActivationsQ8Blocks(x, m, k, &xq);
    kernels::cpu::MatMulGguf(xq, *w.gguf, bias, out, pool_.get());
    return;
  }
  kernels::cpu::MatMulBF16Weights(x, w.bf16, bias, m, n, k, out, pool_.get(), bf16_dot_);
}

void LlamaModel::Norm(std::span<const float> x, std::span<const float> weight, int64_t t, int64_t c,
                      double eps, std::span<float> out) const {
  if (backend_ == Backend::kReference) {
    kernels::ref::RmsNorm(x, weight, t, c, eps, out);
  } else {
    kernels::cpu::RmsNorm(x, weight, t, c, eps, out);
  }
}

KvCache LlamaModel::NewCache(int64_t num_slots, int64_t max_positions) const {
  return KvCache(config_.num_hidden_layers, num_slots, max_positions, config_.num_key_value_heads,
                 config_.head_dim);
}

// The step of an attention block that depends on where K/V live: store the new tokens' keys and
// values of one span and attend over the span's whole cache. One implementation per cache layout.
class KvAttention {
 public:
  KvAttention(int64_t h, int64_t hkv, int64_t d, bool reference)
      : h_(h), hkv_(hkv), d_(d), reference_(reference) {}
  virtual ~KvAttention() = default;
  // Span `si` = s of layer `layer`: q [n, H, D], k / v [n, Hkv, D] (RoPE applied), positions [n];
  // out [n, H, D]; heads split over `pool` when given. Spans write disjoint cache rows, so
  // distinct spans may run at once.
  virtual void Run(int64_t layer, size_t si, const SequenceSpan& s, std::span<const float> q,
                   std::span<const float> k, std::span<const float> v,
                   std::span<const int32_t> positions, std::span<float> out,
                   ThreadPool* pool) const = 0;

 protected:
  int64_t h_, hkv_, d_;
  bool reference_;
};

namespace {

// KvCache: each slot holds positions contiguously. Span i lives in caches[i], or all spans in
// caches[0] when only one is given.
class ContiguousKvAttention final : public KvAttention {
 public:
  ContiguousKvAttention(std::span<KvCache* const> caches, int64_t h, int64_t hkv, int64_t d,
                        bool reference)
      : KvAttention(h, hkv, d, reference), caches_(caches) {}
  void Run(int64_t layer, size_t si, const SequenceSpan& s, std::span<const float> q,
           std::span<const float> k, std::span<const float> v, std::span<const int32_t> pos,
           std::span<float> out, ThreadPool* pool) const override {
    const int64_t row = hkv_ * d_;
    KvCache* cache = caches_[caches_.size() == 1 ? 0 : si];
    auto kc = cache->Keys(layer, s.slot), vc = cache->Values(layer, s.slot);
    std::copy(k.begin(), k.end(), kc.begin() + s.start_position * row);
    std::copy(v.begin(), v.end(), vc.begin() + s.start_position * row);
    const int64_t cached = s.start_position + s.num_tokens;
    std::span<const float> ks(kc.data(), cached * row), vs(vc.data(), cached * row);
    if (reference_) {
      kernels::ref::CausalAttention(q, ks, vs, pos, s.num_tokens, h_, hkv_, d_, cached, out);
    } else {
      kernels::cpu::CausalAttention(q, ks, vs, pos, s.num_tokens, h_, hkv_, d_, cached, out, pool);
    }
  }

 private:
  std::span<KvCache* const> caches_;
};

// PagedKvCache: span i reaches its positions through tables[i].
class PagedKvAttention final : public KvAttention {
 public:
  PagedKvAttention(PagedKvCache* cache, std::span<const std::span<const int32_t>> tables, int64_t h,
                   int64_t hkv, int64_t d, bool reference)
      : KvAttention(h, hkv, d, reference), cache_(cache), tables_(tables) {}
  void Run(int64_t layer, size_t si, const SequenceSpan& s, std::span<const float> q,
           std::span<const float> k, std::span<const float> v, std::span<const int32_t> pos,
           std::span<float> out, ThreadPool* pool) const override {
    auto kp = cache_->Keys(layer), vp = cache_->Values(layer);
    const int64_t bs = cache_->block_size();
    if (!s.tree_parents.empty()) {
      RunTree(s, tables_[si], q, k, v, kp, vp, out, pool);
      return;
    }
    kernels::ref::WriteKv(k, v, tables_[si], bs, pos, s.num_tokens, hkv_, d_, kp, vp);
    if (reference_) {
      kernels::ref::PagedCausalAttention(q, kp, vp, tables_[si], bs, pos, s.num_tokens, h_, hkv_,
                                         d_, out);
    } else {
      kernels::cpu::PagedCausalAttention(q, kp, vp, tables_[si], bs, pos, s.num_tokens, h_, hkv_,
                                         d_, out, pool);
    }
  }

 private:
  // A token tree: node j's K/V goes to the slot of position start + j; each node sees the
  // committed positions and its ancestors.
  void RunTree(const SequenceSpan& s, std::span<const int32_t> table, std::span<const float> q,
               std::span<const float> k, std::span<const float> v, std::span<float> kp,
               std::span<float> vp, std::span<float> out, ThreadPool* pool) const {
    const int64_t n = s.num_tokens, bs = cache_->block_size();
    std::vector<int32_t> slots(static_cast<size_t>(n));
    std::vector<uint64_t> ancestors(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      slots[j] = static_cast<int32_t>(s.start_position + j);
      const int32_t parent = s.tree_parents[j];
      ancestors[j] = (parent < 0 ? 0 : ancestors[parent]) | (uint64_t{1} << j);
    }
    kernels::ref::WriteKv(k, v, table, bs, slots, n, hkv_, d_, kp, vp);
    if (reference_) {
      kernels::ref::PagedTreeAttention(q, kp, vp, table, bs, s.start_position, ancestors, n, h_,
                                       hkv_, d_, out);
    } else {
      kernels::cpu::PagedTreeAttention(q, kp, vp, table, bs, s.start_position, ancestors, n, h_,
                                       hkv_, d_, out, pool);
    }
  }

  PagedKvCache* cache_;
  std::span<const std::span<const int32_t>> tables_;
};

}  // namespace

void LlamaModel::AttentionBlock(const Layer& l, int64_t li, std::span<const int32_t> positions,
                                std::span<const SequenceSpan> spans, const KvAttention& kv,
                                std::vector<float>& x, Workspace& ws) const {
  const auto& c = config_;
  const int64_t t = static_cast<int64_t>(positions.size()), dm = c.hidden_size, d = c.head_dim;
  const int64_t h = c.num_attention_heads, hkv = c.num_key_value_heads;
  auto layout = c.rope_layout == model::RopeLayout::kInterleaved ? kernels::RopeLayout::kInterleaved
                                                                 : kernels::RopeLayout::kRotateHalf;
  ws.hn.resize(x.size());
  ws.q.resize(t * h * d);
  ws.k.resize(t * hkv * d);
  ws.v.resize(t * hkv * d);
  ws.att.resize(t * h * d);
  ws.out.resize(x.size());
  auto &hn = ws.hn, &q = ws.q, &k = ws.k, &v = ws.v, &att = ws.att, &out = ws.out;
  Norm(x, l.attn_norm, t, dm, c.rms_norm_eps, hn);
  Linear(hn, l.wq, l.bq, t, h * d, dm, q);
  Linear(hn, l.wk, l.bk, t, hkv * d, dm, k);
  Linear(hn, l.wv, l.bv, t, hkv * d, dm, v);
  if (backend_ == Backend::kCpu) {
    rope_->Apply(q, positions, t, h, d, layout);
    rope_->Apply(k, positions, t, hkv, d, layout);
  } else {
    kernels::ref::Rope(q, positions, t, h, d, inv_freq_, layout);
    kernels::ref::Rope(k, positions, t, hkv, d, inv_freq_, layout);
  }
  std::vector<int64_t> first_row(spans.size() + 1, 0);
  int64_t longest = 0;
  for (size_t si = 0; si < spans.size(); ++si) {
    first_row[si + 1] = first_row[si] + spans[si].num_tokens;
    longest = std::max(longest, spans[si].num_tokens);
  }
  auto attend = [&](size_t si, ThreadPool* pool) {
    const auto& s = spans[si];
    const int64_t row = first_row[si];
    std::span<const float> qs(&q[row * h * d], s.num_tokens * h * d);
    std::span<const float> ks(&k[row * hkv * d], s.num_tokens * hkv * d);
    std::span<const float> vs(&v[row * hkv * d], s.num_tokens * hkv * d);
    std::span<float> os(&att[row * h * d], s.num_tokens * h * d);
    kv.Run(li, si, s, qs, ks, vs, positions.subspan(row, s.num_tokens), os, pool);
  };
  // Many short spans (a decode step of many sequences, or their draft trees): the spans run in
  // parallel, each on one thread, instead of one pool hand-off per span. Otherwise (prefill) each
  // span splits its heads over the pool. Every head's sums are the same either way.
  if (pool_ != nullptr && spans.size() >= 8 && longest <= 64) {
    pool_->ParallelFor(std::ssize(spans), 1, [&](int64_t b, int64_t e) {
      for (int64_t si = b; si < e; ++si) attend(static_cast<size_t>(si), nullptr);
    });
  } else {
    for (size_t si = 0; si < spans.size(); ++si) attend(si, pool_.get());
  }
  Linear(att, l.wo, {}, t, dm, h * d, out);
  for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
}

void LlamaModel::FeedForwardBlock(const Layer& l, std::vector<float>& x, Workspace& ws) const {
  const auto& c = config_;
  const int64_t dm = c.hidden_size, f = c.intermediate_size;
  const int64_t t = static_cast<int64_t>(x.size()) / dm;
  ws.hn.resize(x.size());
  ws.gate.resize(t * f);
  ws.up.resize(t * f);
  ws.out.resize(x.size());
  auto &hn = ws.hn, &g = ws.gate, &u = ws.up, &out = ws.out;
  Norm(x, l.ffn_norm, t, dm, c.rms_norm_eps, hn);
  Linear(hn, l.w_gate, {}, t, f, dm, g);
  Linear(hn, l.w_up, {}, t, f, dm, u);
  if (backend_ == Backend::kReference) {
    kernels::ref::SwiGlu(g, u, g);
  } else {
    kernels::cpu::SwiGlu(g, u, g);
  }
  Linear(g, l.w_down, {}, t, dm, f, out);
  for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
}

StatusOr<std::vector<int32_t>> LlamaModel::PackedPositions(
    std::span<const int32_t> tokens, std::span<const SequenceSpan> spans) const {
  const int64_t t = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> positions;
  positions.reserve(tokens.size());
  for (size_t si = 0; si < spans.size(); ++si) {
    const auto& s = spans[si];
    if (s.num_tokens <= 0 || s.start_position < 0) {
      return InvalidArgumentError("sequence " + std::to_string(si) + ": " +
                                  std::to_string(s.num_tokens) + " tokens from position " +
                                  std::to_string(s.start_position));
    }
    if (s.tree_parents.empty()) {
      for (int64_t i = 0; i < s.num_tokens; ++i)
        positions.push_back(static_cast<int32_t>(s.start_position + i));
      continue;
    }
    // A token tree: each token one position past its parent.
    const std::string name = "sequence " + std::to_string(si) + ": token tree";
    if (static_cast<int64_t>(s.tree_parents.size()) != s.num_tokens ||
        s.num_tokens > kernels::ref::kMaxTreeTokens) {
      return InvalidArgumentError(name + " of " + std::to_string(s.tree_parents.size()) +
                                  " parents for " + std::to_string(s.num_tokens) +
                                  " tokens (at most " +
                                  std::to_string(kernels::ref::kMaxTreeTokens) + ")");
    }
    const size_t base = positions.size();
    for (int64_t j = 0; j < s.num_tokens; ++j) {
      const int32_t parent = s.tree_parents[j];
      if (j == 0 ? parent != -1 : (parent < 0 || parent >= j)) {
        return InvalidArgumentError(name + ": token " + std::to_string(j) + " has parent " +
                                    std::to_string(parent) + " (the root's is -1, others' < " +
                                    "their own index)");
      }
      positions.push_back(j == 0 ? static_cast<int32_t>(s.start_position)
                                 : positions[base + static_cast<size_t>(parent)] + 1);
    }
  }
  if (static_cast<int64_t>(positions.size()) != t) {
    return InvalidArgumentError("sequence spans cover " + std::to_string(positions.size()) +
                                " tokens but the batch has " + std::to_string(t));
  }
  for (int64_t i = 0; i < t; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return InvalidArgumentError("token " + std::to_string(i) + " has id " +
                                  std::to_string(tokens[i]) + " outside the vocabulary of " +
                                  std::to_string(config_.vocab_size));
    }
  }
  return positions;
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                           KvCache* cache, LogitsFor which, std::vector<float>* logits) const {
  return Forward(tokens, spans, std::span<KvCache* const>(&cache, 1), which, logits);
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                           std::span<KvCache* const> caches, LogitsFor which,
                           std::vector<float>* logits) const {
  if (caches.size() != 1 && caches.size() != spans.size()) {
    return InvalidArgumentError(std::to_string(caches.size()) + " KV caches for " +
                                std::to_string(spans.size()) + " sequences");
  }
  for (size_t si = 0; si < spans.size(); ++si) {
    const auto& s = spans[si];
    const KvCache* cache = caches[caches.size() == 1 ? 0 : si];
    if (cache == nullptr) {
      return InvalidArgumentError("sequence " + std::to_string(si) + ": no KV cache");
    }
    if (!s.tree_parents.empty()) {
      return InvalidArgumentError("sequence " + std::to_string(si) +
                                  ": token trees need the paged KV cache");
    }
    if (s.slot < 0 || s.slot >= cache->num_slots()) {
      return InvalidArgumentError("sequence " + std::to_string(si) + ": KV slot " +
                                  std::to_string(s.slot) + " outside the cache's " +
                                  std::to_string(cache->num_slots()) + " slots");
    }
    if (s.num_tokens <= 0 || s.start_position < 0 ||
        s.start_position + s.num_tokens > cache->max_positions()) {
      return InvalidArgumentError(
          "sequence " + std::to_string(si) + ": positions " + std::to_string(s.start_position) +
          ".." + std::to_string(s.start_position + s.num_tokens - 1) +
          " do not fit the context of " + std::to_string(cache->max_positions()) + " tokens");
    }
  }
  LAMINAR_ASSIGN_OR_RETURN(std::vector<int32_t> positions, PackedPositions(tokens, spans));
  ContiguousKvAttention kv(caches, config_.num_attention_heads, config_.num_key_value_heads,
                           config_.head_dim, backend_ == Backend::kReference);
  ForwardLayers(tokens, positions, spans, kv, which, logits);
  return OkStatus();
}

PagedKvCache LlamaModel::NewPagedCache(int64_t num_blocks, int64_t block_size) const {
  return PagedKvCache(config_.num_hidden_layers, num_blocks, block_size,
                      config_.num_key_value_heads, config_.head_dim);
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                           std::span<const std::span<const int32_t>> block_tables,
                           PagedKvCache* cache, LogitsFor which, std::vector<float>* logits) const {
  if (block_tables.size() != spans.size()) {
    return InvalidArgumentError(std::to_string(block_tables.size()) + " block tables for " +
                                std::to_string(spans.size()) + " sequences");
  }
  const int64_t bs = cache->block_size();
  for (size_t si = 0; si < spans.size(); ++si) {
    const auto& s = spans[si];
    const auto& table = block_tables[si];
    const int64_t slots = static_cast<int64_t>(table.size()) * bs;
    if (s.start_position + s.num_tokens > slots) {
      return InvalidArgumentError("sequence " + std::to_string(si) + ": positions up to " +
                                  std::to_string(s.start_position + s.num_tokens - 1) +
                                  " but its block table of " + std::to_string(table.size()) +
                                  " blocks holds " + std::to_string(slots) + " tokens");
    }
    for (int32_t b : table) {
      if (b < 0 || b >= cache->num_blocks()) {
        return InvalidArgumentError("sequence " + std::to_string(si) + ": block id " +
                                    std::to_string(b) + " outside the cache's " +
                                    std::to_string(cache->num_blocks()) + " blocks");
      }
    }
  }
  LAMINAR_ASSIGN_OR_RETURN(std::vector<int32_t> positions, PackedPositions(tokens, spans));
  PagedKvAttention kv(cache, block_tables, config_.num_attention_heads, config_.num_key_value_heads,
                      config_.head_dim, backend_ == Backend::kReference);
  ForwardLayers(tokens, positions, spans, kv, which, logits);
  return OkStatus();
}

void LlamaModel::ForwardLayers(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                               std::span<const SequenceSpan> spans, const KvAttention& kv,
                               LogitsFor which, std::vector<float>* logits) const {
  const auto& c = config_;
  const int64_t t = static_cast<int64_t>(tokens.size());
  std::vector<float> x(t * c.hidden_size);
  Workspace ws;
  if (backend_ == Backend::kReference) {
    kernels::ref::Embedding(embed_, tokens, c.hidden_size, x);
  } else {
    kernels::cpu::Embedding(embed_, tokens, c.hidden_size, x);
  }
  for (size_t li = 0; li < layers_.size(); ++li) {
    AttentionBlock(layers_[li], static_cast<int64_t>(li), positions, spans, kv, x, ws);
    FeedForwardBlock(layers_[li], x, ws);
  }
  // Select rows, then the final norm and the output head on those rows only.
  std::vector<float> rows;
  int64_t n = 0;
  if (which == LogitsFor::kAllTokens) {
    rows = std::move(x);
    n = t;
  } else {
    int64_t end = 0;
    for (const auto& s : spans) {
      const int64_t first = s.tree_parents.empty() ? end + s.num_tokens - 1 : end;
      end += s.num_tokens;
      rows.insert(rows.end(), x.begin() + first * c.hidden_size, x.begin() + end * c.hidden_size);
      n += end - first;
    }
  }
  std::vector<float> normed(rows.size());
  Norm(rows, final_norm_, n, c.hidden_size, c.rms_norm_eps, normed);
  if (output_ids_.empty()) {
    logits->assign(static_cast<size_t>(n * c.vocab_size), 0.f);
    Linear(normed, lm_head_, {}, n, c.vocab_size, c.hidden_size, *logits);
    return;
  }
  const int64_t s = std::ssize(output_ids_);
  std::vector<float> part(static_cast<size_t>(n * s));
  Linear(normed, lm_head_, {}, n, s, c.hidden_size, part);
  logits->assign(static_cast<size_t>(n * c.vocab_size), -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < s; ++j) (*logits)[i * c.vocab_size + output_ids_[j]] = part[i * s + j];
  }
}

}  // namespace laminar::engine
