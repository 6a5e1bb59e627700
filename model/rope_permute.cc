// RoPE layout permutation of q/k projection rows.
#include "model/rope_permute.h"

#include <cstring>
#include <string_view>

namespace laminar::model {

Status PermuteRopeRows(const TensorView& src, const TensorView& dst, int64_t num_heads,
                       int64_t head_dim, RopeLayout from, RopeLayout to) {
  const Shape& shape = src.shape();
  if (dst.dtype() != src.dtype() || dst.shape() != shape) {
    return InvalidArgumentError("RoPE permutation: destination " + dst.shape().ToString() +
                                " differs from source " + shape.ToString());
  }
  if (shape.rank() < 1 || shape.rank() > 2) {
    return InvalidArgumentError("RoPE permutation: expected a weight or bias, got shape " +
                                shape.ToString());
  }
  if (num_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || shape[0] != num_heads * head_dim) {
    return InvalidArgumentError("RoPE permutation: shape " + shape.ToString() + " does not have " +
                                std::to_string(num_heads) + " heads of even dim " +
                                std::to_string(head_dim) + " along its first axis");
  }
  size_t row_bytes = DTypeSize(src.dtype()) * static_cast<size_t>(shape.rank() == 2 ? shape[1] : 1);
  const auto* in = static_cast<const uint8_t*>(src.data());
  auto* out = static_cast<uint8_t*>(dst.data());
  if (from == to) {
    if (src.size_bytes() > 0) std::memcpy(out, in, src.size_bytes());
    return OkStatus();
  }
  bool to_half = to == RopeLayout::kRotateHalf;
  int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        int64_t interleaved = h * head_dim + 2 * i + j;
        int64_t rotate_half = h * head_dim + j * half + i;
        int64_t s = to_half ? interleaved : rotate_half;
        int64_t d = to_half ? rotate_half : interleaved;
        std::memcpy(out + static_cast<size_t>(d) * row_bytes,
                    in + static_cast<size_t>(s) * row_bytes, row_bytes);
      }
    }
  }
  return OkStatus();
}

StatusOr<Tensor> ConvertRopeRows(const TensorView& src, int64_t num_heads, int64_t head_dim,
                                 RopeLayout from, RopeLayout to) {
  Tensor out(src.dtype(), src.shape());
  LAMINAR_RETURN_IF_ERROR(PermuteRopeRows(src, out.view(), num_heads, head_dim, from, to));
  return out;
}

int64_t RopeHeadsOfTensor(const std::string& name, const ModelConfig& config) {
  std::string_view n(name);
  constexpr std::string_view kPrefix = "model.layers.";
  if (n.substr(0, kPrefix.size()) != kPrefix) return 0;
  n.remove_prefix(kPrefix.size());
  size_t dot = n.find('.');
  if (dot == 0 || dot == std::string_view::npos) return 0;
  for (char c : n.substr(0, dot)) {
    if (c < '0' || c > '9') return 0;
  }
  n.remove_prefix(dot);
  if (n == ".self_attn.q_proj.weight" || n == ".self_attn.q_proj.bias") {
    return config.num_attention_heads;
  }
  if (n == ".self_attn.k_proj.weight" || n == ".self_attn.k_proj.bias") {
    return config.num_key_value_heads;
  }
  return 0;
}

Status ConvertRopeLayout(ModelConfig* config, WeightStore* store, RopeLayout to) {
  if (config->rope_layout == to) return OkStatus();
  for (const std::string& name : store->Names()) {
    int64_t heads = RopeHeadsOfTensor(name, *config);
    if (heads == 0) continue;
    LAMINAR_ASSIGN_OR_RETURN(TensorView view, store->Get(name));
    auto converted = ConvertRopeRows(view, heads, config->head_dim, config->rope_layout, to);
    if (!converted.ok()) return converted.status().WithContext("tensor '" + name + "'");
    store->Put(name, std::move(converted).value());
  }
  config->rope_layout = to;
  return OkStatus();
}

}  // namespace laminar::model
