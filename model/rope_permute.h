// Conversion of q_proj/k_proj weight rows (and q/k biases) between RoPE layouts. Interleaved
// (llama2.c, GGUF `llama`) rotates pairs (2i, 2i+1) of each head; rotate-half (Hugging Face)
// rotates pairs (i, i + D/2). Interleaved -> rotate-half is the `permute` of transformers'
// convert_llama_weights_to_hf.py: per head, new row j*D/2 + i = old row 2i + j (j in {0, 1}).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace laminar::model {

// Permutes the rows of `src` ([num_heads * head_dim, cols] weight or [num_heads * head_dim] bias,
// any dtype, row-major) from layout `from` to `to` into `dst` (same dtype and shape, not aliasing
// `src`). from == to copies. InvalidArgument when the shapes do not match, head_dim is odd, or the
// first dimension is not num_heads * head_dim.
Status PermuteRopeRows(const TensorView& src, const TensorView& dst, int64_t num_heads,
                       int64_t head_dim, RopeLayout from, RopeLayout to);

// As above, into a new tensor.
StatusOr<Tensor> ConvertRopeRows(const TensorView& src, int64_t num_heads, int64_t head_dim,
                                 RopeLayout from, RopeLayout to);

// Number of heads whose rows `name` permutes: H for
// model.layers.{i}.self_attn.q_proj.{weight,bias}, Hkv for k_proj, 0 for every other tensor.
int64_t RopeHeadsOfTensor(const std::string& name, const ModelConfig& config);

// Converts every q/k weight and bias of `store` from config->rope_layout to `to` and sets
// config->rope_layout = to. Converted tensors become owned (mapped views are replaced by copies).
// Errors name the tensor; on error the store may be partly converted and config is unchanged.
Status ConvertRopeLayout(ModelConfig* config, WeightStore* store, RopeLayout to);

}  // namespace laminar::model
