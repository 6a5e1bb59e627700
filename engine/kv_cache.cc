// Contiguous KV cache.
#include "engine/kv_cache.h"

#include <algorithm>

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

void KvCache::CopyPrefix(const KvCache& src, int64_t src_slot, int64_t dst_slot,
                         int64_t positions) {
  LAMINAR_CHECK(src.num_layers_ == num_layers_ && src.num_kv_heads_ == num_kv_heads_ &&
                src.head_dim_ == head_dim_)
      << "KV caches of different shapes";
  LAMINAR_CHECK(positions >= 0 && positions <= max_positions_ && positions <= src.max_positions_)
      << "copying " << positions << " positions between caches of " << src.max_positions_ << " and "
      << max_positions_;
  if (&src == this && src_slot == dst_slot) return;
  const auto n = static_cast<std::ptrdiff_t>(positions * num_kv_heads_ * head_dim_);
  for (int64_t layer = 0; layer < num_layers_; ++layer) {
    const size_t from = src.Offset(layer, src_slot), to = Offset(layer, dst_slot);
    std::copy_n(src.k_.begin() + static_cast<std::ptrdiff_t>(from), n,
                k_.begin() + static_cast<std::ptrdiff_t>(to));
    std::copy_n(src.v_.begin() + static_cast<std::ptrdiff_t>(from), n,
                v_.begin() + static_cast<std::ptrdiff_t>(to));
  }
}

}  // namespace laminar::engine
