// WeightStore implementation.
#include "model/weight_store.h"

namespace laminar::model {

void WeightStore::Put(const std::string& name, Tensor tensor) {
  Entry e;
  e.view = tensor.view();
  e.owned = std::move(tensor);
  tensors_[name] = std::move(e);
}

void WeightStore::PutView(const std::string& name, TensorView view,
                          std::shared_ptr<MappedFile> backing) {
  Entry e;
  e.view = std::move(view);
  tensors_[name] = std::move(e);
  if (backing) {
    bool known = false;
    for (const auto& b : backings_) known = known || b == backing;
    if (!known) backings_.push_back(std::move(backing));
  }
}

void WeightStore::PutQuantized(const std::string& name, QuantizedTensor q) {
  quantized_[name] = std::move(q);
}

StatusOr<TensorView> WeightStore::Get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFoundError("tensor '" + name + "' not in the checkpoint");
  return it->second.view;
}

StatusOr<Tensor*> WeightStore::GetMutable(const std::string& name) {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) return NotFoundError("tensor '" + name + "' not in the checkpoint");
  if (it->second.owned.data() == nullptr) {
    return FailedPreconditionError("tensor '" + name + "' is a read-only view of a mapped file");
  }
  return &it->second.owned;
}

const QuantizedTensor* WeightStore::GetQuantized(const std::string& name) const {
  auto it = quantized_.find(name);
  return it == quantized_.end() ? nullptr : &it->second;
}

std::vector<std::string> WeightStore::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, e] : tensors_) names.push_back(name);
  return names;
}

size_t WeightStore::TotalBytes() const {
  size_t n = 0;
  for (const auto& [name, e] : tensors_) n += e.view.size_bytes();
  return n;
}

}  // namespace laminar::model
