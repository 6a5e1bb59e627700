// The plain-data interface between kernels/cpu/quant_gemm.cc and its per-ISA builds
// (quant_gemm_avx2.cc, quant_gemm_vnni.cc). Only raw pointers cross it: an inline function of a
// shared header compiled with wider ISA flags could be picked by the linker for every caller.
#pragma once

#include <cstdint>

namespace laminar::kernels::cpu {

// One quantized matmul's operands (see kernels/reference/quant.h for the layouts).
struct QuantTileArgs {
  const int8_t* xq = nullptr;      // [M, k_padded]
  const float* x_scale = nullptr;  // [M]
  const int32_t* x_sum = nullptr;  // [M]
  int64_t m = 0, n = 0, k_padded = 0;
  const uint8_t* w_u8 = nullptr;  // w8a8: tiled unsigned int8
  const uint8_t* w_q4 = nullptr;  // w4a8: tiled nibbles
  const uint8_t *group_scale = nullptr, *group_offset = nullptr;
  int64_t group = 0, num_groups = 0;
  const float* channel_scale = nullptr;  // [N]
  const float* bias = nullptr;           // [N] or null
  float* out = nullptr;                  // [M, N]
};

// Scratch bytes per K element of GgufGroups: 8 activation rows × 256 bytes per block of 32.
inline constexpr int64_t kGgufScratchPerK = 8 * 256 / 32;

// One GGUF matmul on row groups (kernels/cpu/quant_gemm.h, GgufRowGroups).
struct GgufGroupArgs {
  int type = 0;                    // 0 q4_0, 1 q4_1, 2 q8_0 (GgufQuantType order)
  const int8_t* xq = nullptr;      // [M, K]
  const float* x_d = nullptr;      // [M, K/32]
  const float* x_s = nullptr;      // [M, K/32] (q4_1)
  const int32_t* x_sum = nullptr;  // [M, K/32] Σ x_q per block (q4_0, q8_0)
  int64_t m = 0, n = 0, k = 0;
  const uint8_t* w = nullptr;  // [groups, K/32, block_stride]
  int64_t quant_bytes = 0, block_stride = 0;
  const float* bias = nullptr;
  float* out = nullptr;
};

#define LAMINAR_QUANT_ISA_FUNCTIONS                                                               \
  void W8A8Tiles(const QuantTileArgs& a, int64_t tile_begin, int64_t tile_end);                   \
  /* scratch: k_padded * 4 bytes (one dequantized tile) */                                        \
  void W4A8Tiles(const QuantTileArgs& a, int64_t tile_begin, int64_t tile_end, uint8_t* scratch); \
  /* scratch: kGgufScratchPerK · K bytes (the VNNI build's expanded activations) */              \
  void GgufGroups(const GgufGroupArgs& a, int64_t group_begin, int64_t group_end, int8_t* scratch);

namespace scalar {
LAMINAR_QUANT_ISA_FUNCTIONS
}
namespace avx2 {
LAMINAR_QUANT_ISA_FUNCTIONS
}
namespace avx512vnni {
LAMINAR_QUANT_ISA_FUNCTIONS
// Rows 4·tile_begin.. of W (w_q4 when set, else w_u8) as plain s8 [4·tiles, k_padded], for the
// oneDNN int8 path of VNNI CPUs (kernels/cpu/quant_gemm.cc).
void TilesToS8(const QuantTileArgs& a, int64_t tile_begin, int64_t tile_end, int8_t* dst);
// The epilogue of the int8 sums [M, nc] of columns col0.. (oneDNN's) into a.out.
void Epilogue(const QuantTileArgs& a, const int32_t* sums, int64_t col0, int64_t nc);
}  // namespace avx512vnni

#undef LAMINAR_QUANT_ISA_FUNCTIONS

}  // namespace laminar::kernels::cpu
