// Reference attention over a paged KV cache: keys and values live in fixed-size blocks of a pool
// and a sequence reaches them through its block table. Plain loops, f64 accumulation; the result
// the CPU/CUDA versions are tested against. Source: PagedAttention (Kwon et al., SOSP 2023, §4.1).
#pragma once

#include <cstdint>
#include <span>

namespace laminar::kernels::ref {

// Paged KV layout (one pool per layer, one for K and one for V):
//   pool        [num_blocks, block_size, Hkv, D] f32, host memory, row-major;
//   block_table [n] int32 block ids in [0, num_blocks) (rollout::KvBlockManager::block_table);
//   position p of the sequence lives in slot p % block_size of block block_table[p / block_size],
//   i.e. at pool row (block_table[p / block_size] * block_size + p % block_size) of [*, Hkv, D].
// num_blocks is k_pool.size() / (block_size * Hkv * D). Bad shapes, a block id outside the pool or
// a position past the table's n * block_size slots are bugs: LAMINAR_CHECK.

// Causal grouped-query attention for T new tokens of one sequence over its paged KV cache: same
// contract as ref::CausalAttention except where the keys and values live.
//   q [T, H, D] f32 (RoPE applied); k_pool, v_pool as above, holding positions
//   0..max(positions) (the new tokens included: WriteKv first); positions [T]: query i attends to
//   positions 0..positions[i]. out [T, H, D] f32. Scale 1/sqrt(D); query head h reads kv head
//   h / (H / Hkv), H % Hkv == 0. block_size > 0 in tokens.
void PagedCausalAttention(std::span<const float> q, std::span<const float> k_pool,
                          std::span<const float> v_pool, std::span<const int32_t> block_table,
                          int64_t block_size, std::span<const int32_t> positions, int64_t t,
                          int64_t h, int64_t hkv, int64_t d, std::span<float> out);

// Most tokens in one tree of PagedTreeAttention (one bit each in a uint64 mask).
inline constexpr int64_t kMaxTreeTokens = 64;

// Tree attention for the verification pass of speculative decoding (SpecInfer, Miao et al.,
// ASPLOS 2024, §4.2; SwiftSpec, arXiv 2506.11309): T tokens of one sequence form a token tree
// whose node j has its K/V in the slot of position prefix + j (written with WriteKv at those
// positions). Query i attends to the committed positions 0..prefix-1 and to node j for each bit j
// set in ancestors[i] (its ancestors and itself: bit i set, no bit above i). A chain (ancestors[i]
// = 2^(i+1) - 1) is PagedCausalAttention at positions prefix..prefix+T-1.
//   q [T, H, D] f32 (RoPE applied at each node's depth); pools and table as above;
//   ancestors [T], T <= kMaxTreeTokens; out [T, H, D] f32. Bad masks: LAMINAR_CHECK.
void PagedTreeAttention(std::span<const float> q, std::span<const float> k_pool,
                        std::span<const float> v_pool, std::span<const int32_t> block_table,
                        int64_t block_size, int64_t prefix, std::span<const uint64_t> ancestors,
                        int64_t t, int64_t h, int64_t hkv, int64_t d, std::span<float> out);

// Scatters the keys and values of T new tokens into their slots: row i of k / v goes to the slot
// of position positions[i] (layout above). k, v [T, Hkv, D] f32; positions [T] >= 0. Slots of
// other positions are left as they are. A row copy: the CPU engine uses this one too.
void WriteKv(std::span<const float> k, std::span<const float> v,
             std::span<const int32_t> block_table, int64_t block_size,
             std::span<const int32_t> positions, int64_t t, int64_t hkv, int64_t d,
             std::span<float> k_pool, std::span<float> v_pool);

}  // namespace laminar::kernels::ref
