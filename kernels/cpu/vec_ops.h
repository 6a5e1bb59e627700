// CPU row ops with runtime dispatch (AVX-512, AVX2, scalar): RMSNorm, SwiGLU, log-sum-exp,
// softmax and token logprobs, computed in f32 with a vectorized exp. References:
// kernels/reference/ops.h; tolerances: kernels/tolerance.h.
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"

namespace laminar::kernels::cpu {

// Same contracts as the reference ops of the same name. `isa` defaults to BestIsa(); asking for
// an ISA the CPU lacks CHECK-fails.
void RmsNorm(std::span<const float> x, std::span<const float> weight, int64_t t, int64_t c,
             double eps, std::span<float> out, Isa isa = BestIsa());
void SwiGlu(std::span<const float> gate, std::span<const float> up, std::span<float> out,
            Isa isa = BestIsa());
// Row-wise over logits [T, V], in one pass of max and one of exp-sum per row: no [T, V] copy.
void LogSumExp(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out,
               Isa isa = BestIsa());
void Softmax(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out,
             Isa isa = BestIsa());
void TokenLogprobs(std::span<const float> logits, std::span<const int32_t> targets, int64_t t,
                   int64_t v, std::span<float> out, Isa isa = BestIsa());

// Embedding lookup, contract of kernels::ref::Embedding: out[t, :] = table[ids[t], :], table
// [V, C] f32, ids [T] in [0, V) (else LAMINAR_CHECK naming the id and its index), out [T, C]; one
// memcpy per row.
void Embedding(std::span<const float> table, std::span<const int32_t> ids, int64_t c,
               std::span<float> out);

// out[i] = exp(f64(x[i]) · scale − shift) in f64, and returns Σ out (lane-wise partial sums, so
// the last bits of the sum depend on the ISA, not on the values' position). Each out[i] is within
// 2 ulp of std::exp, and 0 where the argument is below −708.39 (std::exp would give a subnormal
// or 0). The sampler's probabilities (engine/sampler.cc) over a vocabulary of logits.
double ExpScaledShiftedF64(std::span<const float> x, double scale, double shift,
                           std::span<double> out, Isa isa = BestIsa());

// Batch-invariant f32 matmul: out[M, N] = x[M, K] · w[N, K]^T (+ bias[N] when not empty), all
// f32, with DotRows' vectorized dot products. Each output is summed in an order that depends only
// on K and the ISA, never on M, on the other rows or on the thread split, so a sequence's logits
// are the same bits whatever else shares its engine step (He et al., "Defeating Nondeterminism in
// LLM Inference", Thinking Machines, 2025: batch invariance). Up to 16 activation rows (decode,
// verification of drafted tokens) meet each block of weight rows in one pass over the weights,
// which are prefetched 8 rows ahead, so they stream from L3/DRAM while being multiplied; more
// rows go over blocks of weight rows that stay in L2. No per-call library overhead (a tiny
// model's decode step). Splits N over `pool` when given and the product is large enough. Sizes:
// LAMINAR_CHECK.
void MatMulF32BatchInvariant(std::span<const float> x, std::span<const float> w,
                             std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                             std::span<float> out, ThreadPool* pool = nullptr, Isa isa = BestIsa());

// Small-M matmul with bf16 weights (decode shapes, M = 1..64): out[M, N] = x[M, K] · w[N, K]^T,
// x and out f32, w bf16 (uint16 bit patterns), f32 accumulation. Memory-bound at small M, so
// bf16 weights halve the bytes per token. Splits N over `pool` when given.
void MatMulBF16(std::span<const float> x, std::span<const uint16_t> w, int64_t m, int64_t n,
                int64_t k, std::span<float> out, ThreadPool* pool = nullptr, Isa isa = BestIsa());

// Causal grouped-query attention, same contract as kernels::ref::CausalAttention, in f32 with
// vectorized dot products, softmax and value accumulation; (token, head) pairs split over `pool`.
void CausalAttention(std::span<const float> q, std::span<const float> k_cache,
                     std::span<const float> v_cache, std::span<const int32_t> positions, int64_t t,
                     int64_t h, int64_t hkv, int64_t d, int64_t s, std::span<float> out,
                     ThreadPool* pool = nullptr, Isa isa = BestIsa());

// The shared core of CausalAttention and PagedCausalAttention (kernels/cpu/paged_attention.h):
// causal grouped-query attention with the keys and values of position p at row
//   block_table[p / block_size] * block_size + p % block_size
// of k_rows, v_rows [R, Hkv, D] f32 (R rows, a multiple of block_size). A contiguous cache
// [S, Hkv, D] is one block of S positions with table {0}; a paged pool [num_blocks, block_size,
// Hkv, D] is R = num_blocks * block_size rows. q, out [T, H, D]; positions [T] in
// [0, block_table.size() * block_size); block ids in [0, R / block_size): else LAMINAR_CHECK.
// Scale 1/sqrt(D); (token, head) pairs split over `pool` when the work is large enough. Head dims
// up to 16 (stories260K's 8) copy the visible keys and values (once per call; per query in tree
// attention) into a transposed [Hkv, D, S] scratch, so scores and outputs are vectorized over
// positions, not over D.
void BlockedCausalAttention(std::span<const float> q, std::span<const float> k_rows,
                            std::span<const float> v_rows, std::span<const int32_t> block_table,
                            int64_t block_size, std::span<const int32_t> positions, int64_t t,
                            int64_t h, int64_t hkv, int64_t d, std::span<float> out,
                            ThreadPool* pool = nullptr, Isa isa = BestIsa());

// Tree attention over the same row store, contract of kernels::ref::PagedTreeAttention: query i
// attends to positions 0..prefix-1 and to tree node j (position prefix + j) for each bit j of
// ancestors[i]. T <= 64.
void BlockedTreeAttention(std::span<const float> q, std::span<const float> k_rows,
                          std::span<const float> v_rows, std::span<const int32_t> block_table,
                          int64_t block_size, int64_t prefix, std::span<const uint64_t> ancestors,
                          int64_t t, int64_t h, int64_t hkv, int64_t d, std::span<float> out,
                          ThreadPool* pool = nullptr, Isa isa = BestIsa());

}  // namespace laminar::kernels::cpu
