// Integer-quantized linear layers for rollout decode: the formats (w8a8, w4a8 in a
// LiquidQuant-style layout, GGUF Q4_0/Q4_1/Q8_0), their quantizers and packers, and the plain
// reference matmuls that define every result. The vectorized kernels (kernels/cpu/quant_gemm.h)
// must equal these bit for bit in integer accumulation and in the f32 epilogue.
//
// Every matmul here is out[M, N] = x[M, K] · W[N, K]^T (+ bias) with x f32 quantized per token at
// run time. Sources: LiquidGEMM (arXiv 2509.01229, §3 "LiquidQuant"), QServe (arXiv 2405.04532,
// §4 progressive group quantization), ggml's block_q4_0 / block_q4_1 / block_q8_0 / block_q8_1
// (ggml-common.h) and its vec_dot_q4_0_q8_0 / q4_1_q8_1 / q8_0_q8_0 (ggml-cpu/quants.c).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace laminar::kernels {

// K is padded to whole chunks of 32 elements (the kernels' unit along K; padding is zero in the
// activations, so whatever the padded weights hold contributes nothing).
inline constexpr int64_t kQuantChunk = 32;
// Output columns are packed in tiles of 4 (the kernels' register block).
inline constexpr int64_t kQuantTileN = 4;

inline int64_t QuantPaddedK(int64_t k) { return (k + kQuantChunk - 1) / kQuantChunk * kQuantChunk; }

// ---------------------------------------------------------------------------------------------
// Activations: symmetric int8 per token (row), the "A8" of w8a8 and w4a8.
// ---------------------------------------------------------------------------------------------

// x[m, :] ≈ scale[m] · q[m, :], scale = max|x[m, :]| / 127 (0 for an all-zero row, NaN for a row
// with a non-finite value, so a broken activation shows as NaN outputs),
// q = clamp(nearbyint(x · (127 / max|x|)), -127, 127) in f32 (round half to even). -128 never
// occurs, which the AVX2 sign trick needs (kernels/cpu/quant_gemm.h).
struct Int8Activations {
  int64_t m = 0, k = 0, k_padded = 0;
  std::vector<int8_t> q;     // [M, k_padded], zero beyond k
  std::vector<float> scale;  // [M]
  std::vector<int32_t> sum;  // [M] Σ_k q[m, k]: the correction for unsigned weights (VNNI)
};

//   x [M, K] f32 (finite). Reuses out's buffers.
void QuantizeActivationsPerToken(std::span<const float> x, int64_t m, int64_t k,
                                 Int8Activations* out);

// ---------------------------------------------------------------------------------------------
// w8a8 and w4a8 weights. Both end, per element, in the same "unsigned int8" form
//   u = q8 + 128 in [1, 255],   W[n, k] ≈ channel_scale[n] · q8[n, k] = channel_scale[n] · (u -
//   128)
// which VNNI's vpdpbusd (u8 × s8) takes as it is, correcting the +128 once per activation row
// (Σ_k 128 · x_q[m, k] = 128 · Int8Activations::sum[m]), and which AVX2 turns back into s8 with one
// XOR 0x80 (two's complement of the offset form: (u ^ 0x80) as int8 = u - 128). u = 0 (q8 = -128)
// never occurs, so |q8| ≤ 127 and the AVX2 sign trick cannot overflow.
//
// Tiled layout (both formats): N is padded to a multiple of kQuantTileN = 4 columns, K to
// k_padded; tile t holds columns 4t..4t+3, and within a tile, chunk c (K elements 32c..32c+31)
// stores the 4 columns' chunks one after another. So a kernel streams one tile's bytes linearly.
// ---------------------------------------------------------------------------------------------

// w8a8: per-output-channel symmetric int8 (scale = max|W[n, :]| / 127), stored as u = q8 + 128.
//   u bytes: [tiles][chunks][4][32].
struct W8A8Weights {
  int64_t n = 0, k = 0, k_padded = 0;
  std::vector<uint8_t> u;            // tiled as above; padded columns and K are u = 128 (q8 0)
  std::vector<float> channel_scale;  // [N]

  int64_t num_tiles() const { return (n + kQuantTileN - 1) / kQuantTileN; }
  // The stored byte of element (row n, column k) of W, k < k_padded.
  uint8_t U(int64_t row, int64_t col) const;
};

// w4a8, two levels (QServe's progressive scheme in LiquidQuant's unsigned form):
//  1. per channel: q8 = clamp(nearbyint(W / s1), -119, 119), s1 = max|W[n, :]| / 119 (QServe's
//     protective range: it leaves the group level room to stay inside [1, 255]);
//  2. per group of G ∈ {64, 128} along K, on u8 = q8 + 128 ∈ [9, 247]: an integer scale
//     s2 ∈ [1, 16] and an integer offset a ∈ [1, 255 - 15·s2] from the group's min and max,
//     q4 = min(15, (u8 - a + s2 / 2) / s2) in integers (rounding halves up). Dequantization is u =
//     q4 · s2 + a, which lies in [1, 255] for every q4: no 8-bit lane can carry into its neighbour.
// That bound is what lets four lanes dequantize in one 32-bit multiply-add and one XOR (LiquidQuant
// §3: IMAD then XOR 0x80808080 gives four signed int8): see DequantizeW4Lanes32. On x86 the
// kernels do the same in 16-bit lanes (vpmullw by s2, vpaddb a) and XOR on AVX2.
//   q4 nibbles: [tiles][chunks][4][16]; byte j of a column's chunk holds element j in its low
//   nibble and element j + 16 in its high nibble (ggml's Q4 order).
//   group_scale, group_offset: [tiles][groups][4] (groups = ceil(k_padded / G); the last group may
//   be partial).
struct W4A8Weights {
  int64_t n = 0, k = 0, k_padded = 0, group = 0;
  std::vector<uint8_t> q4;
  std::vector<uint8_t> group_scale;   // s2
  std::vector<uint8_t> group_offset;  // a
  std::vector<float> channel_scale;   // [N] s1

  int64_t num_tiles() const { return (n + kQuantTileN - 1) / kQuantTileN; }
  int64_t num_groups() const { return (k_padded + group - 1) / group; }
  uint8_t Q4(int64_t row, int64_t col) const;
  uint8_t Scale(int64_t row, int64_t g) const;
  uint8_t Offset(int64_t row, int64_t g) const;
};

// The protective range and the largest group scale above.
inline constexpr int kW4A8ChannelMax = 119;
inline constexpr int kW4A8MaxGroupScale = 16;

// LiquidQuant's dequantization of four packed lanes: q4x4 holds four 4-bit values, one per byte
// (each < 16); returns four int8 (one per byte, two's complement) equal to q4 · s2 + a - 128, by
// ((q4x4 · s2) + a · 0x01010101) ^ 0x80808080. Valid (no carry between bytes) exactly when
// 1 ≤ s2 ≤ 16 and 1 ≤ a ≤ 255 - 15·s2; the tests check it exhaustively.
inline uint32_t DequantizeW4Lanes32(uint32_t q4x4, uint32_t s2, uint32_t a) {
  return (q4x4 * s2 + a * 0x01010101u) ^ 0x80808080u;
}

//   w [N, K] f32 row-major (finite). InvalidArgument for N or K < 1, a non-finite weight, or a
//   group other than 64 or 128.
StatusOr<W8A8Weights> QuantizeW8A8(std::span<const float> w, int64_t n, int64_t k);
StatusOr<W4A8Weights> QuantizeW4A8(std::span<const float> w, int64_t n, int64_t k,
                                   int64_t group = 128);

// The f32 weights [N, K] each format stands for (for tolerance checks against f32 matmuls).
std::vector<float> Dequantize(const W8A8Weights& w);
std::vector<float> Dequantize(const W4A8Weights& w);

// The weights of output rows `rows` (ids in [0, N), any order, repeats allowed) as a
// [rows.size(), K] weight of the same format, bit for bit: row i of the result is row rows[i] of
// `w`. A speculative drafter's output head restricted to part of the vocabulary (FR-Spec, Zhao et
// al., arXiv 2502.14856). LAMINAR_CHECK on an id out of range.
W8A8Weights GatherRows(const W8A8Weights& w, std::span<const int32_t> rows);

// Reference matmuls. acc[m, n] = Σ_k (u[n, k] - 128) · x.q[m, k] in int32, then
//   out[m, n] = static_cast<float>(acc) * (x.scale[m] * channel_scale[n]) (+ bias[n])
// in f32, in exactly that order (the kernels do the same, so results are bitwise equal).
//   bias [N] f32 or empty; out [M, N] f32.
namespace ref {
void MatMulW8A8(const Int8Activations& x, const W8A8Weights& w, std::span<const float> bias,
                std::span<float> out);
void MatMulW4A8(const Int8Activations& x, const W4A8Weights& w, std::span<const float> bias,
                std::span<float> out);
}  // namespace ref

// ---------------------------------------------------------------------------------------------
// GGUF block formats, run as stored (ggml-common.h): blocks of 32 along K.
//   Q4_0: W = d · (q4 - 8);   Q4_1: W = d · q4 + m;   Q8_0: W = d · q8.
// Activations pair as in llama.cpp: Q8_0 blocks (d_x, q8) for Q4_0 and Q8_0 weights, Q8_1 blocks
// (d_x, s_x = d_x · Σ q8, q8) for Q4_1. Block scales are kept in f32 (ggml rounds the activation's
// to f16; f32 is at least as close to x).
// Repacked at load: per row, the quants contiguous (Q4: 16 bytes per block, byte j = elements j
// and j + 16; Q8: 32 bytes) and the block scales (and Q4_1 mins) as f32 arrays.
// ---------------------------------------------------------------------------------------------

enum class GgufQuantType { kQ4_0, kQ4_1, kQ8_0 };
std::string GgufQuantTypeName(GgufQuantType type);

struct GgufQuantWeights {
  GgufQuantType type = GgufQuantType::kQ4_0;
  int64_t n = 0, k = 0;     // K a multiple of 32
  std::vector<uint8_t> qs;  // [N, K/32, 16] (Q4) or [N, K/32, 32] (Q8, int8 bytes)
  std::vector<float> d;     // [N, K/32]
  std::vector<float> m;     // [N, K/32] (Q4_1 only)

  int64_t blocks_per_row() const { return k / kQuantChunk; }
  int64_t block_bytes() const { return type == GgufQuantType::kQ8_0 ? 32 : 16; }
};

// From the raw ggml blocks of a [N, K] tensor (N rows of K/32 blocks; ggml type ids 2 = Q4_0,
// 3 = Q4_1, 8 = Q8_0). InvalidArgument when K is not a multiple of 32, the byte count is not
// N · K/32 · block size, or the type is none of these (naming it).
StatusOr<GgufQuantWeights> PackGgufWeights(uint32_t ggml_type, std::span<const uint8_t> blocks,
                                           int64_t n, int64_t k);

// Activations as Q8_0/Q8_1 blocks: per block of 32, d = max|x| / 127, q = nearbyint(x · 127 /
// max|x|) in f32 (ggml's quantize_row_q8_0 up to the rounding of 1/d), s = d · Σ q.
struct Q8BlockActivations {
  int64_t m = 0, k = 0;
  std::vector<int8_t> q;  // [M, K]
  std::vector<float> d;   // [M, K/32]
  std::vector<float> s;   // [M, K/32]
};
//   x [M, K] f32 with K a multiple of 32 (LAMINAR_CHECK).
void QuantizeActivationsQ8Blocks(std::span<const float> x, int64_t m, int64_t k,
                                 Q8BlockActivations* out);

// out[m, n] = Σ_b (d_w · d_x) · isum_b (+ m_w · s_x for Q4_1), summed over blocks b in order in
// f32, where isum_b is the int32 dot of the block's weight quants (q4 - 8 for Q4_0, q4 for Q4_1,
// q8 for Q8_0) with the activation quants. The kernels reassociate the f32 sum (tolerance
// kernels::kMatMulGgufQuant); their per-block integer sums are exact.
namespace ref {
void MatMulGguf(const Q8BlockActivations& x, const GgufQuantWeights& w, std::span<const float> bias,
                std::span<float> out);
}  // namespace ref
// The f32 weights [N, K] the blocks stand for.
std::vector<float> Dequantize(const GgufQuantWeights& w);
// Rows `rows` of `w`, as GatherRows of W8A8Weights above.
GgufQuantWeights GatherRows(const GgufQuantWeights& w, std::span<const int32_t> rows);

}  // namespace laminar::kernels
