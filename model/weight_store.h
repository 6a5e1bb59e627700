// WeightStore: a model's named tensors, whatever the checkpoint format. Names are Hugging Face's
// (LlamaForCausalLM): "model.embed_tokens.weight",
// "model.layers.{i}.self_attn.{q,k,v,o}_proj.weight",
// "model.layers.{i}.self_attn.{q,k,v}_proj.bias",
// "model.layers.{i}.mlp.{gate,up,down}_proj.weight", "model.layers.{i}.input_layernorm.weight",
// "model.layers.{i}.post_attention_layernorm.weight", "model.norm.weight", "lm_head.weight" (absent
// when tied). Linear weights are [out, in] row-major.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace laminar::model {

// GGUF block-quantized tensor types we read (ggml_type numbering, from ggml.h).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ4_K = 12,
  kQ6_K = 14,
  kBF16 = 30,
};

// The raw blocks of a quantized tensor, kept so quantized kernels can run on them directly.
// `bytes` points into the mapped file (kept alive by `backing`). Shape is [rows, cols] in
// elements, cols along the block direction (GGUF's ne[0]).
struct QuantizedTensor {
  GgmlType type = GgmlType::kF32;
  Shape shape;
  const uint8_t* bytes = nullptr;
  size_t size_bytes = 0;
  std::shared_ptr<MappedFile> backing;
};

// Owns every tensor (or keeps the mapped file alive for views). Not thread-safe for mutation;
// concurrent reads are fine.
class WeightStore {
 public:
  // Adds or replaces a tensor.
  void Put(const std::string& name, Tensor tensor);
  // A tensor that borrows bytes from `backing` (zero copy from an mmap'ed f32/f16/bf16 file).
  void PutView(const std::string& name, TensorView view, std::shared_ptr<MappedFile> backing);
  void PutQuantized(const std::string& name, QuantizedTensor q);

  bool Contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // NotFound naming the tensor when absent.
  StatusOr<TensorView> Get(const std::string& name) const;
  // Mutable access for owned tensors (e.g. the RoPE permutation); NotFound or FailedPrecondition
  // (a borrowed view) otherwise.
  StatusOr<Tensor*> GetMutable(const std::string& name);
  // Raw blocks of a tensor that was quantized in its checkpoint, or nullptr.
  const QuantizedTensor* GetQuantized(const std::string& name) const;

  // Sorted names.
  std::vector<std::string> Names() const;
  size_t size() const { return tensors_.size(); }
  // Total bytes of the (dequantized) tensors.
  size_t TotalBytes() const;

 private:
  struct Entry {
    Tensor owned;  // empty when borrowed
    TensorView view;
  };
  std::map<std::string, Entry> tensors_;
  std::map<std::string, QuantizedTensor> quantized_;
  std::vector<std::shared_ptr<MappedFile>> backings_;
};

}  // namespace laminar::model
