// Quantized matmuls for decode shapes (GEMV and small-M GEMM, M = 1..64 rows; any M works) with
// runtime dispatch: AVX-512 VNNI (vpdpbusd on 256-bit vectors: u8 weights × s8 activations, the
// +128 of the unsigned weights corrected once per activation row), AVX2 (vpmaddubsw with the sign
// trick: |x| as u8 times sign(w, x) as s8, operands within ±127 so no int16 pair sum saturates:
// 2·127·127 < 32767) and a scalar path. Formats and references: kernels/reference/quant.h; the
// w8a8 and w4a8 kernels equal the reference bit for bit, the GGUF kernels within
// kernels::kMatMulGgufQuant.
//
// w4a8 follows LiquidGEMM (arXiv 2509.01229 §3-4) from 3 rows on: each 4-column tile's 4-bit
// weights are dequantized once into the unsigned int8 form (16-bit multiply by the group scale,
// byte add of the group offset: the two-instruction IMAD of LiquidQuant, carry-free by the
// format's bounds; the XOR to signed is folded into the AVX2 dot product) and the int8 dot products
// of all M rows then run on them, so dequantization is paid once per weight. At 1-2 rows (GEMV,
// memory-bound) the 4-bit values go into vpmaddubsw directly and each group's sum is scaled by s2
// and corrected by its offset once: the same integers with half the instructions.
//
// From 17 rows on, an AVX512-VNNI CPU multiplies with oneDNN's int8 matmul (AMX-INT8 where present)
// on W as plain s8: packed once per version (PackManyRowInt8), or else unpacked per call (w4a8:
// dequantized in registers, LiquidGEMM's dequantize-then-MMA). Exact int32 sums as well, so the
// result is the same bit for bit. AVX2 keeps our
// kernels (its vpmaddubsw would saturate on unsigned-by-signed bytes).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/reference/quant.h"

namespace laminar::kernels::cpu {

enum class QuantIsa { kScalar, kAvx2, kAvx512Vnni };

// The best path this CPU runs, capped by $LAMINAR_ISA (scalar|avx2) like
// kernels/cpu/cpu_features.h.
QuantIsa BestQuantIsa();
// Every path this CPU can run (tests check each against the reference).
std::vector<QuantIsa> AvailableQuantIsas();
std::string QuantIsaName(QuantIsa isa);

// W of a w8a8/w4a8 matmul unpacked to s8 and packed for oneDNN once, one block per part of the
// many-row path's split of the columns over threads: many-row calls on AVX512-VNNI CPUs then skip
// unpacking W and oneDNN's copy of it on every call (the same exact sums). Costs N·K bytes.
class ManyRowInt8Weights;
// Null where the many-row oneDNN path does not run (no AVX512-VNNI, $LAMINAR_ISA below it, oneDNN
// without an int8 matmul). `threads`: those of the calls' pool (num_threads() + 1; 1 without).
std::shared_ptr<const ManyRowInt8Weights> PackManyRowInt8(const W8A8Weights& w, int64_t threads);
std::shared_ptr<const ManyRowInt8Weights> PackManyRowInt8(const W4A8Weights& w, int64_t threads);

// Same contracts as ref::MatMulW8A8 / ref::MatMulW4A8 / ref::MatMulGguf (shapes CHECKed), with
// the weight tiles (GGUF: row groups) split over `pool` when given. Asking for a path the CPU lacks
// CHECK-fails. `packed` (from PackManyRowInt8 of the same w, or null) serves many-row calls.
void MatMulW8A8(const Int8Activations& x, const W8A8Weights& w, std::span<const float> bias,
                std::span<float> out, ThreadPool* pool = nullptr, QuantIsa isa = BestQuantIsa(),
                const ManyRowInt8Weights* packed = nullptr);
void MatMulW4A8(const Int8Activations& x, const W4A8Weights& w, std::span<const float> bias,
                std::span<float> out, ThreadPool* pool = nullptr, QuantIsa isa = BestQuantIsa(),
                const ManyRowInt8Weights* packed = nullptr);
// How many w8a8/w4a8 calls of this process took the oneDNN int8 path, and how many of those ran
// on packed weights (tests check both ran).
int64_t OnednnInt8MatMuls();
int64_t OnednnInt8PackedMatMuls();

// GGUF blocks (Q4_0, Q4_1, Q8_0) repacked for the kernels: weight rows in groups of
// kGgufRowGroup, so one vector instruction works on a block of every row of a group, and one
// group's blocks are a single stream in memory (the layout of ggml's repacked "x8" CPU formats).
// Per group and block of 32 K elements, `block_stride()` bytes: the quants as [c][8 rows][4 bytes]
// (c = 0..3: bytes 4c..4c+3 of each row's 16 nibble bytes, low nibbles elements 4c.., high ones
// 16 + 4c..; Q8_0: c = 0..7, bytes 4c..4c+3 of the 32 int8), then the 8 rows' d as IEEE f16,
// then (Q4_1) their m as f16: the file's own fields, so the values equal GgufQuantWeights'
// exactly. Rows past N in the last group are zero (d = 0) and never stored.
inline constexpr int64_t kGgufRowGroup = 8;
struct GgufRowGroups {
  GgufQuantType type = GgufQuantType::kQ4_0;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> data;  // [groups, K/32, block_stride()]

  int64_t groups() const { return (n + kGgufRowGroup - 1) / kGgufRowGroup; }
  int64_t blocks_per_row() const { return k / kQuantChunk; }
  // Quant bytes of one block of a group: 8 rows of 16 (Q4) or 32 (Q8_0).
  int64_t quant_bytes() const { return kGgufRowGroup * (type == GgufQuantType::kQ8_0 ? 32 : 16); }
  int64_t block_stride() const {
    return quant_bytes() + 2 * kGgufRowGroup * (type == GgufQuantType::kQ4_1 ? 2 : 1);
  }
};
// CHECK-fails when a d or m is not an f16 value (PackGgufWeights only makes f16 ones).
GgufRowGroups PackGgufRowGroups(const GgufQuantWeights& w);
// The row-major form back (tests; Dequantize).
GgufQuantWeights UnpackGgufRowGroups(const GgufRowGroups& w);
// Rows `rows` of `w` (each in [0, n), CHECKed; any order, repeats allowed), bit for bit.
GgufRowGroups GatherRows(const GgufRowGroups& w, std::span<const int32_t> rows);

// ref::MatMulGguf on the repacked weights. AVX-512 VNNI: vpdpbusd on 512-bit vectors, 8 rows ×
// 8 K elements per instruction (the nibbles are u8 already; Q4_0's − 8 and Q8_0's signed bytes,
// taken as u8 with + 128, are corrected once per block from Σ x_q); AVX2: vpmaddubsw, 8 rows ×
// 4 K elements. Both then take each block's exact int32 row sums through the same f32 operations,
// so they agree bit for bit. Each output is computed alone from its row and column (no dependence
// on M, N or the split over threads), so a row alone equals the same row among many.
void MatMulGguf(const Q8BlockActivations& x, const GgufRowGroups& w, std::span<const float> bias,
                std::span<float> out, ThreadPool* pool = nullptr, QuantIsa isa = BestQuantIsa());

}  // namespace laminar::kernels::cpu
