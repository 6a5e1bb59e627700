// Contiguous KV cache.
#include "engine/kv_cache.h"

#include "core/check.h"

namespace laminar::engine {

KvCache::KvCache(int64_t num_layers, int64_t num_slots, int64_t max_positions, int64_t num_kv_heads,
                 int64_t head_dim)
    : num_layers_(num_layers),
      num_slots_(num_slots),
      max_positions_(max_positions),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim) {
  size_t n = static_cast<size_t>(num_layers * num_slots * max_positions * num_kv_heads * head_dim);
  k_.assign(n, 0.f);
  v_.assign(n, 0.f);
}

size_t KvCache::Offset(int64_t layer, int64_t slot) const {
  LAMINAR_CHECK(layer >= 0 && layer < num_layers_) << "layer " << layer;
  LAMINAR_CHECK(slot >= 0 && slot < num_slots_) << "slot " << slot;
  return static_cast<size_t>((layer * num_slots_ + slot) * max_positions_ * num_kv_heads_ *
                             head_dim_);
}

std::span<float> KvCache::Keys(int64_t layer, int64_t slot) {
  return {k_.data() + Offset(layer, slot),
          static_cast<size_t>(max_positions_ * num_kv_heads_ * head_dim_)};
}

std::span<float> KvCache::Values(int64_t layer, int64_t slot) {
  return {v_.data() + Offset(layer, slot),
          static_cast<size_t>(max_positions_ * num_kv_heads_ * head_dim_)};
}

}  // namespace laminar::engine
