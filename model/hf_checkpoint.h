// Hugging Face checkpoint folders: config.json plus model.safetensors or a sharded
// model.safetensors.index.json, loaded into ModelConfig + WeightStore, and written back (with
// generation_config.json and tokenizer files) atomically.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace laminar::model {

struct HfCheckpoint {
  ModelConfig config;  // rope_layout = kRotateHalf
  WeightStore weights;
  std::string torch_dtype;  // from config.json ("" when absent)
};

// Loads `dir`. Tensors keep their file dtype (f32, bf16 or f16) and are zero-copy views of the
// mapped files, except a tensor whose bytes are misaligned for its dtype (unpadded headers), which
// is copied into an owned, aligned tensor of the same dtype. Callers wanting f32 use ToF32().
// Dropped silently: lm_head.weight when the embeddings are tied, and *.rotary_emb.inv_freq.
// Errors name the file and tensor: NotFound (no config.json / weights), InvalidArgument (bad
// config field, missing or unexpected tensor, shape mismatch, non-float dtype, index naming a
// tensor its shard lacks), Unimplemented (unsupported architecture).
StatusOr<HfCheckpoint> LoadHfCheckpoint(const std::string& dir);

// The tensors a Llama-family model must have, with their shapes: embed [V, C], per layer q [H*D,
// C], k/v [Hkv*D, C], o [C, H*D], gate/up [F, C], down [C, F], norms [C], biases [H*D]/[Hkv*D] when
// attention_bias; model.norm [C]; lm_head [V, C] unless tied. Sorted by name.
std::vector<std::pair<std::string, Shape>> ExpectedHfTensors(const ModelConfig& config);

// Checks that `weights` holds exactly ExpectedHfTensors(config) with those shapes and a float
// dtype (f32, bf16, f16). InvalidArgument naming `source`, the tensor, and both shapes.
Status ValidateHfWeights(const ModelConfig& config, const WeightStore& weights,
                         const std::string& source);

struct HfSaveOptions {
  // Convert the float tensors to this dtype on save (f32, bf16 or f16); default: keep each one's.
  std::optional<DType> dtype;
  // Shard above this many bytes of tensor data (model-00001-of-0000N.safetensors + index);
  // transformers' default is 5 GB.
  uint64_t max_shard_bytes = 5'000'000'000ull;
  // Tokenizer files written as they are: filename -> content (tokenizer.json,
  // tokenizer_config.json, ... from ExportHfTokenizerFiles). Plain names only (no '/'), and not
  // one of the files written here.
  std::map<std::string, std::string> tokenizer_files;
  // Replace an existing folder (atomically: the old one is removed only after the new one is in
  // place). Without it an existing `dir` is AlreadyExists.
  bool overwrite = false;
};

// Writes `dir`: model.safetensors (or shards and model.safetensors.index.json), config.json,
// generation_config.json and options.tokenizer_files. The folder is built as a sibling temporary
// and renamed into place, so a crash never leaves a half-written checkpoint under `dir`. When
// config.rope_layout is kInterleaved the q/k weights and biases are permuted to rotate-half while
// streaming (the store is not modified), so the folder computes the same function in transformers.
// Errors: the config/weight validation above, Unimplemented (config transformers cannot express),
// file-system errors naming the path.
Status SaveHfCheckpoint(const std::string& dir, const ModelConfig& config,
                        const WeightStore& weights, const HfSaveOptions& options);

}  // namespace laminar::model
