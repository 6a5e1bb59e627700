// Paged KV cache storage.
#include "engine/paged_kv_cache.h"

#include <algorithm>

#include "core/check.h"

namespace laminar::engine {

PagedKvCache::PagedKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size,
                           int64_t num_kv_heads, int64_t head_dim)
    : num_layers_(num_layers),
      num_blocks_(num_blocks),
      block_size_(block_size),
      num_kv_heads_(num_kv_heads),
      head_dim_(head_dim) {
  LAMINAR_CHECK(num_layers > 0 && num_blocks > 0 && block_size > 0 && num_kv_heads > 0 &&
                head_dim > 0)
      << "paged KV cache of " << num_layers << " layers, " << num_blocks << " blocks of "
      << block_size << " tokens, " << num_kv_heads << " kv heads of " << head_dim;
  k_ = AllocateHugePageFloats(LayerElements() * static_cast<size_t>(num_layers));
  v_ = AllocateHugePageFloats(LayerElements() * static_cast<size_t>(num_layers));
}

std::span<float> PagedKvCache::Keys(int64_t layer) {
  LAMINAR_CHECK(layer >= 0 && layer < num_layers_) << "layer " << layer;
  return {k_.get() + static_cast<size_t>(layer) * LayerElements(), LayerElements()};
}

std::span<float> PagedKvCache::Values(int64_t layer) {
  LAMINAR_CHECK(layer >= 0 && layer < num_layers_) << "layer " << layer;
  return {v_.get() + static_cast<size_t>(layer) * LayerElements(), LayerElements()};
}

void PagedKvCache::CopyBlock(int64_t src, int64_t dst) {
  LAMINAR_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_)
      << "block copy " << src << " -> " << dst << " in a pool of " << num_blocks_;
  const size_t block = static_cast<size_t>(block_size_ * num_kv_heads_ * head_dim_);
  for (int64_t l = 0; l < num_layers_; ++l) {
    for (auto pool : {Keys(l), Values(l)}) {
      std::copy_n(pool.begin() + src * block, block, pool.begin() + dst * block);
    }
  }
}

void PagedKvCache::CopySlot(int64_t src, int64_t src_slot, int64_t dst, int64_t dst_slot) {
  LAMINAR_CHECK(src >= 0 && src < num_blocks_ && dst >= 0 && dst < num_blocks_ && src_slot >= 0 &&
                src_slot < block_size_ && dst_slot >= 0 && dst_slot < block_size_)
      << "slot copy " << src << ":" << src_slot << " -> " << dst << ":" << dst_slot;
  const size_t row = static_cast<size_t>(num_kv_heads_ * head_dim_);
  const size_t from = static_cast<size_t>(src * block_size_ + src_slot) * row;
  const size_t to = static_cast<size_t>(dst * block_size_ + dst_slot) * row;
  for (int64_t l = 0; l < num_layers_; ++l) {
    for (auto pool : {Keys(l), Values(l)}) {
      std::copy_n(pool.begin() + from, row, pool.begin() + to);
    }
  }
}

}  // namespace laminar::engine
