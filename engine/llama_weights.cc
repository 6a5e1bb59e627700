// LlamaModel's weights: binding a checkpoint's tensors to the layers, and quantizing the
// projections to the model's weight format. See llama_model.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "core/dtype.h"
#include "engine/llama_model.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/vec_ops.h"
#include "kernels/reference/paged_attention.h"
#include "model/ggml_quants.h"

namespace laminar::engine {
namespace {

std::string LayerName(int64_t i, const char* suffix) {
  return "model.layers." + std::to_string(i) + "." + suffix;
}

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

Status LlamaModel::QuantizeWeight(Weight& w, int64_t n, int64_t k, int64_t threads,
                                  const void** replaced) const {
  if (format_ == WeightFormat::kQ8_0 || format_ == WeightFormat::kQ4_1) {
    // ggml's blocks span 32 elements of a row: a tensor with another K stays f32, as a GGUF
    // checkpoint's unquantized tensors do. The head stays Q8_0 under q4_1, as in GGUF's Q4 files.
    if (k % 32 != 0) return OkStatus();
    const model::GgmlType type = format_ == WeightFormat::kQ8_0 || &w == &lm_head_
                                     ? model::GgmlType::kQ8_0
                                     : model::GgmlType::kQ4_1;
    LAMINAR_ASSIGN_OR_RETURN(kernels::GgufQuantWeights q, QuantizeToGgmlBlocks(type, w.f32, n, k));
    w.gguf =
        std::make_shared<const kernels::cpu::GgufRowGroups>(kernels::cpu::PackGgufRowGroups(q));
  } else if (format_ == WeightFormat::kW8A8 || &w == &lm_head_) {
    // The output head stays 8-bit under w4a8, as GGUF's Q4 files keep theirs at Q8_0/Q6_K: the
    // logits are what the sampled tokens and their logprobs come from.
    LAMINAR_ASSIGN_OR_RETURN(kernels::W8A8Weights q, kernels::QuantizeW8A8(w.f32, n, k));
    w.w8a8 = std::make_shared<const kernels::W8A8Weights>(std::move(q));
    if (backend_ == Backend::kCpu) w.int8_packed = kernels::cpu::PackManyRowInt8(*w.w8a8, threads);
  } else {
    LAMINAR_ASSIGN_OR_RETURN(kernels::W4A8Weights q,
                             kernels::QuantizeW4A8(w.f32, n, k, kW4A8GroupSize));
    w.w4a8 = std::make_shared<const kernels::W4A8Weights>(std::move(q));
    if (backend_ == Backend::kCpu) w.int8_packed = kernels::cpu::PackManyRowInt8(*w.w4a8, threads);
  }
  *replaced = w.f32.data();
  w.f32 = {};
  return OkStatus();
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
  const bool quantize = format_ == WeightFormat::kW8A8 || format_ == WeightFormat::kW4A8 ||
                        format_ == WeightFormat::kQ8_0 || format_ == WeightFormat::kQ4_1;
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
      if (!quantize || all[i]->f32.empty()) continue;
      errors[i] = QuantizeWeight(*all[i], shapes[i].first, shapes[i].second, threads, &replaced[i]);
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

}  // namespace laminar::engine
