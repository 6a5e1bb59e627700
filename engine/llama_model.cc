// LlamaModel: its weight formats, creation, and the views that share its weights (a layer
// subset, another output vocabulary). The weights are bound and quantized in llama_weights.cc, the
// forward pass is in llama_forward.cc.
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
namespace {

constexpr WeightFormat kWeightFormats[] = {
    WeightFormat::kF32,  WeightFormat::kBF16, WeightFormat::kW8A8, WeightFormat::kW4A8,
    WeightFormat::kQ8_0, WeightFormat::kQ4_1, WeightFormat::kGguf};

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

}  // namespace laminar::engine
