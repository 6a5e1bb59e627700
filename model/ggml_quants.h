// ggml tensor types: the block layout table (elements and bytes per block for every ggml_type id)
// and plain reference dequantization to f32 for the types we load (F32, F16, BF16, Q8_0, Q4_0,
// Q4_1, Q4_K, Q6_K). These loops are the truth that quantized kernels are tested against.
// Layouts: ggml's ggml-common.h (block_q4_0 ... block_q6_K) and dequantize_row_* in ggml-quants.c.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "model/weight_store.h"

namespace laminar::model {

// Size facts of one ggml type. A row of n elements (n a multiple of block_elems) takes
// n / block_elems * block_bytes bytes.
struct GgmlTypeTraits {
  uint32_t id = 0;
  std::string_view name;       // "f32", "q4_K", ... (ggml's type names)
  int64_t block_elems = 0;     // elements per block (1 for plain types)
  size_t block_bytes = 0;      // bytes per block
  bool dequantizable = false;  // DequantizeGgml supports it
};

// Traits of ggml type `id` (the ggml_type numbering stored in GGUF tensor infos), or nullptr for
// an id ggml does not define (or has removed, like 4, 5 and 31-33).
const GgmlTypeTraits* FindGgmlType(uint32_t id);
// "q4_K" for a known id, "type 77" otherwise.
std::string GgmlTypeName(uint32_t id);

// Bytes of `num_elements` elements of `type`. Returns InvalidArgument for an unknown type or a
// count that is negative or not a multiple of the block size, OutOfRange on overflow.
StatusOr<size_t> GgmlRowBytes(uint32_t type, int64_t num_elements);

// Dequantizes `num_elements` consecutive elements of type `type` from `src` into `dst`.
//   src  raw ggml blocks, exactly GgmlRowBytes(type, num_elements) bytes (any alignment)
//   dst  [num_elements] f32
// Returns Unimplemented naming the type when it is known but not dequantizable here,
// InvalidArgument when the sizes disagree. Rows are independent: a [rows, cols] tensor is
// rows * cols consecutive elements with cols a multiple of the block size.
Status DequantizeGgml(uint32_t type, std::span<const uint8_t> src, std::span<float> dst);

// Per-type reference loops (no size checks: `src` holds num_elements / block_elems blocks).
// Exposed so that tests and kernels can name them directly.
void DequantizeF16(const uint8_t* src, float* dst, int64_t num_elements);
void DequantizeBF16(const uint8_t* src, float* dst, int64_t num_elements);
void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t num_elements);
void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t num_elements);
void DequantizeQ4_1(const uint8_t* src, float* dst, int64_t num_elements);
void DequantizeQ4_K(const uint8_t* src, float* dst, int64_t num_elements);
void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t num_elements);

// Reference quantizers to Q8_0 and Q4_1 blocks (ggml's quantize_row_q8_0_ref and
// quantize_row_q4_1_ref, ggml-quants.c), so that weights published in f32 (the trainer's) can run
// on the block kernels that GGUF checkpoints run on.
//   src  [num_elements] f32, num_elements a multiple of 32 (rows of a [rows, cols] tensor with
//        cols a multiple of 32 are consecutive blocks)
//   dst  GgmlRowBytes(type, num_elements) bytes
// Q8_0: d = max|x| / 127, q = round(x / d). Q4_1: m = min x, d = (max x - m) / 15,
// q = min(15, trunc((x - m) / d + 0.5)). d and m are stored as f16; a block of zeros gets d = 0.
// Non-finite inputs are the caller's to reject (they give NaN or inf blocks).
void QuantizeQ8_0(const float* src, uint8_t* dst, int64_t num_elements);
void QuantizeQ4_1(const float* src, uint8_t* dst, int64_t num_elements);

// Byte sizes of the blocks above (ggml-common.h).
inline constexpr size_t kQ8_0BlockBytes = 34;   // f16 d, int8 qs[32]
inline constexpr size_t kQ4_0BlockBytes = 18;   // f16 d, u8 qs[16]
inline constexpr size_t kQ4_1BlockBytes = 20;   // f16 d, f16 m, u8 qs[16]
inline constexpr size_t kQ4_KBlockBytes = 144;  // f16 d, f16 dmin, u8 scales[12], u8 qs[128]
inline constexpr size_t kQ6_KBlockBytes = 210;  // u8 ql[128], u8 qh[64], i8 scales[16], f16 d

}  // namespace laminar::model
