// A contiguous KV cache: for each layer and sequence slot, keys and values of every position.
// The rollout engine's paged cache (blocks, prefix sharing) builds on the same contract; this one
// serves the forward pass, the trainer and tests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace laminar::engine {

// Layout: k and v are [L, slots, S, Hkv, D] f32. Owns its memory; not thread-safe.
class KvCache {
 public:
  KvCache(int64_t num_layers, int64_t num_slots, int64_t max_positions, int64_t num_kv_heads,
          int64_t head_dim);

  int64_t num_slots() const { return num_slots_; }
  int64_t max_positions() const { return max_positions_; }
  // Keys/values of one slot in one layer: [S, Hkv, D].
  std::span<float> Keys(int64_t layer, int64_t slot);
  std::span<float> Values(int64_t layer, int64_t slot);
  // Copies the keys and values of positions [0, positions) of `src`'s slot `src_slot`, all
  // layers, into this cache's slot `dst_slot` (a prefix two sequences share: a GRPO group's
  // prompt). Shapes must match (num_layers, heads, head_dim) and both caches hold `positions`;
  // LAMINAR_CHECK otherwise.
  void CopyPrefix(const KvCache& src, int64_t src_slot, int64_t dst_slot, int64_t positions);
  // Bytes held (both k and v).
  size_t size_bytes() const { return (k_.size() + v_.size()) * sizeof(float); }

 private:
  size_t Offset(int64_t layer, int64_t slot) const;
  int64_t num_layers_, num_slots_, max_positions_, num_kv_heads_, head_dim_;
  std::vector<float> k_, v_;
};

}  // namespace laminar::engine
