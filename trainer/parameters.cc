// ParameterSet: flat f32 values and gradients of a Llama-family model, by Hugging Face name.
#include "trainer/parameters.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "model/hf_checkpoint.h"

namespace laminar::trainer {

StatusOr<ParameterSet> ParameterSet::FromWeights(const model::ModelConfig& config,
                                                 const model::WeightStore& weights) {
  LAMINAR_RETURN_IF_ERROR(config.Validate("model"));
  ParameterSet set;
  auto expected = model::ExpectedHfTensors(config);
  // Matrices decay; norms and biases do not.
  for (const auto& [name, shape] : expected) set.Add(name, shape, shape.rank() >= 2);
  for (const auto& [name, shape] : expected) {
    LAMINAR_ASSIGN_OR_RETURN(TensorView view, weights.Get(name));
    if (view.shape() != shape) {
      return InvalidArgumentError("tensor '" + name + "' has shape " + view.shape().ToString() +
                                  ", the config implies " + shape.ToString());
    }
    auto dst = set.Value(name);
    if (view.dtype() == DType::kF32) {
      std::memcpy(dst.data(), view.data(), dst.size() * sizeof(float));
    } else {
      LAMINAR_ASSIGN_OR_RETURN(Tensor f32, ToF32(view), "tensor '" + name + "'");
      std::memcpy(dst.data(), f32.data(), dst.size() * sizeof(float));
    }
  }
  return set;
}

void ParameterSet::Add(const std::string& name, const Shape& shape, bool decay) {
  LAMINAR_CHECK(IndexOf(name) < 0) << "duplicate parameter " << name;
  ParamInfo info;
  info.name = name;
  info.shape = shape;
  info.offset = values_.size();
  info.numel = static_cast<size_t>(shape.num_elements());
  info.decay = decay;
  values_.resize(values_.size() + info.numel, 0.f);
  grads_.resize(values_.size(), 0.f);
  params_.push_back(std::move(info));
}

int64_t ParameterSet::IndexOf(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return static_cast<int64_t>(i);
  }
  return -1;
}

const ParamInfo& ParameterSet::Info(const std::string& name) const {
  int64_t i = IndexOf(name);
  LAMINAR_CHECK(i >= 0) << "no parameter named " << name;
  return params_[static_cast<size_t>(i)];
}

std::span<float> ParameterSet::Value(const std::string& name) {
  const auto& p = Info(name);
  return std::span<float>(values_).subspan(p.offset, p.numel);
}
std::span<const float> ParameterSet::Value(const std::string& name) const {
  const auto& p = Info(name);
  return std::span<const float>(values_).subspan(p.offset, p.numel);
}
std::span<float> ParameterSet::Grad(const std::string& name) {
  const auto& p = Info(name);
  return std::span<float>(grads_).subspan(p.offset, p.numel);
}
std::span<const float> ParameterSet::Grad(const std::string& name) const {
  const auto& p = Info(name);
  return std::span<const float>(grads_).subspan(p.offset, p.numel);
}

void ParameterSet::ZeroGrad() { std::fill(grads_.begin(), grads_.end(), 0.f); }

model::WeightStore ParameterSet::ToWeightStore(DType dtype) const {
  LAMINAR_CHECK(dtype == DType::kF32 || dtype == DType::kBF16) << "f32 or bf16 only";
  model::WeightStore store;
  for (const auto& p : params_) {
    Tensor t(dtype, p.shape);
    const float* src = values_.data() + p.offset;
    if (dtype == DType::kF32) {
      std::memcpy(t.data(), src, p.numel * sizeof(float));
    } else {
      uint16_t* dst = t.data_as<uint16_t>();
      for (size_t i = 0; i < p.numel; ++i) dst[i] = FloatToBF16(src[i]);
    }
    store.Put(p.name, std::move(t));
  }
  return store;
}

}  // namespace laminar::trainer
