// CPU attention over a paged KV cache (keys and values in fixed-size blocks reached through a
// block table), vectorized like cpu::CausalAttention, whose core it shares. Reference:
// kernels/reference/paged_attention.h; tolerance kAttentionF32. Source: PagedAttention (Kwon et
// al., SOSP 2023, §4.1).
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"

namespace laminar::kernels::cpu {

// Same contract as kernels::ref::PagedCausalAttention:
//   q [T, H, D] f32; k_pool, v_pool [num_blocks, block_size, Hkv, D] f32 (one layer's pool);
//   block_table [n] int32 block ids in [0, num_blocks); position p is slot p % block_size of
//   block block_table[p / block_size]; positions [T]: query i attends to positions
//   0..positions[i] < n * block_size. out [T, H, D] f32. Scale 1/sqrt(D); H % Hkv == 0.
// Computed in f32 with vectorized dot products, softmax and value accumulation; (token, head)
// pairs split over `pool` when given and the work is large enough. Bad shapes, block ids or
// positions: LAMINAR_CHECK. Writing new tokens' K/V into the pool: ref::WriteKv (a row copy).
void PagedCausalAttention(std::span<const float> q, std::span<const float> k_pool,
                          std::span<const float> v_pool, std::span<const int32_t> block_table,
                          int64_t block_size, std::span<const int32_t> positions, int64_t t,
                          int64_t h, int64_t hkv, int64_t d, std::span<float> out,
                          ThreadPool* pool = nullptr, Isa isa = BestIsa());

// Same contract as kernels::ref::PagedTreeAttention (speculative decoding's verification pass):
// query i of a token tree attends to positions 0..prefix-1 and to the nodes set in ancestors[i],
// node j at position prefix + j. Tolerance kAttentionF32.
void PagedTreeAttention(std::span<const float> q, std::span<const float> k_pool,
                        std::span<const float> v_pool, std::span<const int32_t> block_table,
                        int64_t block_size, int64_t prefix, std::span<const uint64_t> ancestors,
                        int64_t t, int64_t h, int64_t hkv, int64_t d, std::span<float> out,
                        ThreadPool* pool = nullptr, Isa isa = BestIsa());

}  // namespace laminar::kernels::cpu
