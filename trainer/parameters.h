// ParameterSet: the trainer's f32 master weights and their gradients, every parameter a named slice
// of one flat buffer (so the optimizer, the gradient all-reduce and checkpoints see one array).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace laminar::trainer {

// One parameter: elements [offset, offset + numel) of the flat value and gradient buffers.
struct ParamInfo {
  std::string name;  // Hugging Face name ("model.layers.0.mlp.up_proj.weight")
  Shape shape;
  size_t offset = 0;
  size_t numel = 0;
  // Whether AdamW's decoupled weight decay applies (matrices yes; norms and biases no, as in
  // Hugging Face's and verl's default parameter groups).
  bool decay = true;
};

// Owns the values and gradients (f32). Not thread-safe; one per actor rank.
class ParameterSet {
 public:
  ParameterSet() = default;
  ParameterSet(ParameterSet&&) noexcept = default;
  ParameterSet& operator=(ParameterSet&&) noexcept = default;

  // The parameters a Llama-family model of `config` trains (model::ExpectedHfTensors, sorted by
  // name), with values copied from `weights` (f16/bf16 widened to
  // f32). A tied model has no "lm_head.weight". Errors name a missing tensor or a wrong shape.
  static StatusOr<ParameterSet> FromWeights(const model::ModelConfig& config,
                                            const model::WeightStore& weights);

  // Appends a zero-valued parameter. Names must be unique (CHECK).
  void Add(const std::string& name, const Shape& shape, bool decay);

  const std::vector<ParamInfo>& params() const { return params_; }
  size_t num_elements() const { return values_.size(); }
  // -1 when absent.
  int64_t IndexOf(const std::string& name) const;
  const ParamInfo& Info(const std::string& name) const;  // CHECK-fails when absent

  std::span<float> values() { return values_; }
  std::span<const float> values() const { return values_; }
  std::span<float> grads() { return grads_; }
  std::span<const float> grads() const { return grads_; }
  // One parameter's slice (CHECK-fails when absent).
  std::span<float> Value(const std::string& name);
  std::span<const float> Value(const std::string& name) const;
  std::span<float> Grad(const std::string& name);
  std::span<const float> Grad(const std::string& name) const;

  void ZeroGrad();
  // Copies of the values as a WeightStore (f32, or bf16 rounded to nearest even), for exporting a
  // Hugging Face folder, publishing a version or building an inference model.
  model::WeightStore ToWeightStore(DType dtype = DType::kF32) const;

 private:
  std::vector<ParamInfo> params_;
  std::vector<float> values_, grads_;
};

}  // namespace laminar::trainer
