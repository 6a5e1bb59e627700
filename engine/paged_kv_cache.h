// A paged KV cache: per layer, one pool of fixed-size blocks for keys and one for values. Which
// block holds which positions of a sequence is decided outside (rollout::KvBlockManager); this
// class only owns the bytes and copies blocks for copy-on-write. Source: PagedAttention (Kwon et
// al., SOSP 2023, §4.1).
#pragma once

#include <cstdint>
#include <span>

#include "core/huge_pages.h"

namespace laminar::engine {

// Layout: k and v are [L, num_blocks, block_size, Hkv, D] f32, host memory advised for huge pages
// (core/huge_pages.h), so one layer's pool is the [num_blocks, block_size, Hkv, D] layout of
// kernels/reference/paged_attention.h.
// Owns its memory; not thread-safe.
class PagedKvCache {
 public:
  // All counts > 0 (LAMINAR_CHECK: they come from a validated engine config).
  PagedKvCache(int64_t num_layers, int64_t num_blocks, int64_t block_size, int64_t num_kv_heads,
               int64_t head_dim);

  int64_t num_layers() const { return num_layers_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  // One layer's key / value pool: [num_blocks, block_size, Hkv, D].
  std::span<float> Keys(int64_t layer);
  std::span<float> Values(int64_t layer);
  // Copies every slot of block `src` into block `dst`, in all layers, keys and values (a
  // rollout::BlockCopy). Block ids outside [0, num_blocks): LAMINAR_CHECK.
  void CopyBlock(int64_t src, int64_t dst);
  // Copies the K/V of one token slot, `src_slot` of block `src` (all layers), into `dst_slot` of
  // block `dst`: speculative decoding moves an accepted draft token's KV to its position's slot.
  // Ids outside [0, num_blocks) or slots outside [0, block_size): LAMINAR_CHECK.
  void CopySlot(int64_t src, int64_t src_slot, int64_t dst, int64_t dst_slot);
  // Bytes held (both k and v) and bytes of one token's KV across all layers.
  size_t size_bytes() const {
    return 2 * LayerElements() * static_cast<size_t>(num_layers_) * sizeof(float);
  }
  size_t bytes_per_token() const {
    return static_cast<size_t>(2 * num_layers_ * num_kv_heads_ * head_dim_) * sizeof(float);
  }

 private:
  size_t LayerElements() const {
    return static_cast<size_t>(num_blocks_ * block_size_ * num_kv_heads_ * head_dim_);
  }
  int64_t num_layers_, num_blocks_, block_size_, num_kv_heads_, head_dim_;
  std::unique_ptr<float[], FreeDeleter> k_, v_;
};

}  // namespace laminar::engine
