// Matmul with bf16 activations and bf16 weights, summed in f32: the arithmetic of the CPU's bf16
// dot-product instruction (AVX512-BF16 vdpbf16ps, Intel SDM vol. 2: each f32 lane adds the
// products of one pair of bf16 values; products of two bf16 are exact in f32). Decode shapes
// (M = 1..kBF16DirectMaxRows) run our kernel; prefill shapes go to oneDNN's bf16 matmul
// (kernels/cpu/matmul.h OnednnMatMulBF16), which uses the same instructions or AMX. Reference:
// kernels/reference/ops.h MatMul on the bf16-rounded operands; tolerance kMatMulBF16
// (kernels/tolerance.h).
#pragma once

#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"

namespace laminar::kernels::cpu {

// True when this CPU has the bf16 dot-product instruction (AVX512-BF16) and $LAMINAR_ISA does not
// cap the ISA below AVX-512: then bf16 weights multiply bf16-rounded activations.
bool HasBF16Dot();

// out[i] = bf16 bits of x[i], rounded to nearest even (core/dtype.h FloatToBF16); sizes equal.
void RoundToBF16(std::span<const float> x, std::span<uint16_t> out);

//   x   [M, K] bf16 bit patterns, row-major
//   w   [N, K] bf16 bit patterns, row-major (a Hugging Face linear weight, [out, in])
//   out [M, N] f32: Σ_k x[m, k] · w[n, k], the exact bf16 products summed in f32
// `isa`: kAvx512 runs vdpbf16ps (needs the AVX512-BF16 CPU feature, else CHECK-fails; its denormal
// inputs and outputs flush to zero, as the instruction defines); kScalar sums the products in order
// of k (the portable path); kAvx2 has no bf16 dot product and CHECK-fails. Splits N over `pool`
// when given. Sizes are CHECKed.
void MatMulBF16Dot(std::span<const uint16_t> x, std::span<const uint16_t> w, int64_t m, int64_t n,
                   int64_t k, std::span<float> out, ThreadPool* pool = nullptr,
                   Isa isa = HasBF16Dot() ? Isa::kAvx512 : Isa::kScalar);

// Up to this many rows MatMulBF16Weights reads the bf16 weights directly (decode); beyond, a GEMM
// library multiplies (prefill). Measured: on AVX2 the direct kernel stops gaining over the
// widened f32 GEMM between 8 and 32 rows; with AVX512-BF16, oneDNN's bf16 matmul wins from ~16.
inline constexpr int64_t kBF16DirectMaxRows = 16;

// out[M, N] = x[M, K] · w[N, K]^T (+ bias [N] or empty) with bf16 weights, x and out f32, as the
// engine runs bf16 weights (engine::WeightFormat::kBF16):
//   bf16_activations (pass HasBF16Dot()): x rounded to bf16; MatMulBF16Dot up to
//     kBF16DirectMaxRows rows, else OnednnMatMulBF16 (kernels/cpu/matmul.h).
//   otherwise: x stays f32; MatMulBF16 (kernels/cpu/vec_ops.h) up to kBF16DirectMaxRows rows, else
//     the weights widened to f32 once per call for oneDNN's f32 GEMM.
// Sizes are CHECKed; oneDNN failures CHECK-fail with its message.
void MatMulBF16Weights(std::span<const float> x, std::span<const uint16_t> w,
                       std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                       std::span<float> out, ThreadPool* pool, bool bf16_activations);

}  // namespace laminar::kernels::cpu
