// WeightStore <-> relay tensors; see policy_weights.h.
#include "relay/policy_weights.h"

#include <string>
#include <utility>

namespace laminar::relay {

StatusOr<std::vector<TensorBytes>> TensorsOf(const model::WeightStore& store,
                                             std::string_view prefix) {
  std::vector<TensorBytes> out;
  for (const std::string& name : store.Names()) {
    if (store.GetQuantized(name) != nullptr) {
      return InvalidArgumentError("tensor " + name +
                                  " is quantized; only plain dtypes can be published");
    }
    LAMINAR_ASSIGN_OR_RETURN(TensorView view, store.Get(name));
    out.push_back({.name = std::string(prefix) + name,
                   .dtype = view.dtype(),
                   .shape = view.shape().dims(),
                   .bytes = {static_cast<const uint8_t*>(view.data()), view.size_bytes()}});
  }
  return out;
}

StatusOr<model::WeightStore> WeightStoreOf(const PulledVersion& version, std::string_view prefix) {
  model::WeightStore store;
  const std::span<const uint8_t> data = version.data();
  for (const proto::TensorEntry& t : version.manifest().tensors()) {
    const std::string_view name = t.name();
    if (!name.starts_with(prefix) || (prefix.empty() && name.starts_with(kDraftModelPrefix))) {
      continue;
    }
    DType dtype;
    if (!ParseDType(t.dtype(), &dtype)) {
      return InvalidArgumentError("version " + std::to_string(version.version()) + ": tensor " +
                                  t.name() + " has unknown dtype '" + t.dtype() + "'");
    }
    std::vector<int64_t> dims(t.shape().begin(), t.shape().end());
    auto bytes = CheckedNumBytes(dims, DTypeSize(dtype));
    if (!bytes.ok() || static_cast<uint64_t>(*bytes) != t.size_bytes() ||
        t.offset() > data.size() || t.size_bytes() > data.size() - t.offset()) {
      return InvalidArgumentError("version " + std::to_string(version.version()) + ": tensor " +
                                  t.name() + " of " + std::to_string(t.size_bytes()) +
                                  " bytes at offset " + std::to_string(t.offset()) +
                                  " does not match its shape, dtype or the version's " +
                                  std::to_string(data.size()) + " bytes");
    }
    store.Put(
        std::string(name.substr(prefix.size())),
        Tensor::FromView(TensorView(data.data() + t.offset(), dtype, Shape(std::move(dims)))));
  }
  return store;
}

}  // namespace laminar::relay
