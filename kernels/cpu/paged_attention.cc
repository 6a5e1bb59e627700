// Paged attention on the CPU: the pool is the row store of cpu::BlockedCausalAttention.
#include "kernels/cpu/paged_attention.h"

#include "core/check.h"
#include "kernels/cpu/vec_ops.h"

namespace laminar::kernels::cpu {

void PagedCausalAttention(std::span<const float> q, std::span<const float> k_pool,
                          std::span<const float> v_pool, std::span<const int32_t> block_table,
                          int64_t block_size, std::span<const int32_t> positions, int64_t t,
                          int64_t h, int64_t hkv, int64_t d, std::span<float> out, ThreadPool* pool,
                          Isa isa) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(positions.size()), t);
  BlockedCausalAttention(q, k_pool, v_pool, block_table, block_size, positions, t, h, hkv, d, out,
                         pool, isa);
}

void PagedTreeAttention(std::span<const float> q, std::span<const float> k_pool,
                        std::span<const float> v_pool, std::span<const int32_t> block_table,
                        int64_t block_size, int64_t prefix, std::span<const uint64_t> ancestors,
                        int64_t t, int64_t h, int64_t hkv, int64_t d, std::span<float> out,
                        ThreadPool* pool, Isa isa) {
  BlockedTreeAttention(q, k_pool, v_pool, block_table, block_size, prefix, ancestors, t, h, hkv, d,
                       out, pool, isa);
}

}  // namespace laminar::kernels::cpu
