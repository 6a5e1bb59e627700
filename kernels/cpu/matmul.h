// Dense matmul on the CPU (docs/architecture.md): out[M, N] = x[M, K] · w[N, K]^T (+ bias),
// batch-invariant in f32, through oneDNN otherwise. The reference is kernels/reference/ops.h
// MatMul; tolerances in kernels/tolerance.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "core/thread_pool.h"

namespace laminar::kernels::cpu {

// Whether x [M, K], w [N, K], out [M, N] and bias ([N], or empty: size 0) have those sizes: the
// check every out = x · w^T (+ bias) entry point makes.
inline bool MatMulSizesMatch(size_t x_size, size_t w_size, size_t bias_size, size_t out_size,
                             int64_t m, int64_t n, int64_t k) {
  return static_cast<int64_t>(x_size) == m * k && static_cast<int64_t>(w_size) == n * k &&
         static_cast<int64_t>(out_size) == m * n &&
         (bias_size == 0 || static_cast<int64_t>(bias_size) == n);
}

//   x    [M, K] f32 row-major
//   w    [N, K] f32 row-major (a Hugging Face linear weight, [out, in])
//   bias [N] f32 or empty
//   out  [M, N] f32
// MatMul is kernels/cpu/vec_ops.h MatMulF32BatchInvariant: a row's outputs do not depend on M or
// on the other rows (the engine's f32 rollouts give a sequence the same logits, bit for bit,
// whatever shares its step). Thread-safe. Errors: InvalidArgument on size mismatch.
Status MatMul(std::span<const float> x, std::span<const float> w, std::span<const float> bias,
              int64_t m, int64_t n, int64_t k, std::span<float> out, ThreadPool* pool = nullptr);
// The same product through oneDNN's f32 matmul (faster prefill, ~1.2x on SmolLM2, but its kernel
// and so its sums change with M): the GEMM peak `laminar bench` measures and a peer in
// `bench gemm`. Columns of N are split over `pool` (and the caller), each part one single-threaded
// oneDNN call: oneDNN's own OpenMP team stalls badly when another process shares the cores.
// Errors: as MatMul, plus Internal naming oneDNN's status.
Status OnednnMatMulF32(std::span<const float> x, std::span<const float> w,
                       std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                       std::span<float> out, ThreadPool* pool = nullptr);

//   x    [M, K] bf16 bit patterns, row-major
//   w    [N, K] bf16 bit patterns, row-major
//   bias [N] f32 or empty; out [M, N] f32
// The same through oneDNN's bf16 matmul (f32 accumulation; AVX512-BF16 or AMX where the CPU has
// them): the prefill side of kernels/cpu/bf16_dot.h. Errors as MatMul, plus Unimplemented when
// oneDNN has no bf16 matmul for this CPU (oneDNN 2.6 on AVX2).
Status OnednnMatMulBF16(std::span<const uint16_t> x, std::span<const uint16_t> w,
                        std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                        std::span<float> out, ThreadPool* pool = nullptr);

// One single-threaded oneDNN int8 matmul with exact int32 sums: out[i, j] = Σ_k x[i, k] · w[j, k]
// for x [M, K] s8 (rows ldx apart), w [N, K] s8 row-major, out [M, N] s32 row-major. The quantized
// kernels (kernels/cpu/quant_gemm.h) use it for many rows on CPUs whose int8 instructions cannot
// saturate (AVX512-VNNI, AMX). Errors: Unimplemented when oneDNN has no such matmul for this CPU,
// Internal for other oneDNN failures.
Status OnednnMatMulS8(const int8_t* x, int64_t ldx, const int8_t* w, int64_t m, int64_t n,
                      int64_t k, int32_t* out);

// W [N, K] s8 reordered once into the blocked layout oneDNN's int8 matmul picks for this CPU (AMX
// tiles where present), so that calls skip oneDNN's per-call copy of W. Costs N·K bytes. The
// layout does not depend on M (checked at each call: a mismatch is FailedPrecondition).
class PackedS8Weights {
 public:
  // w [N, K] s8 row-major. Errors: Unimplemented when oneDNN has no int8 matmul for this CPU,
  // Internal for other oneDNN failures.
  static StatusOr<PackedS8Weights> Pack(const int8_t* w, int64_t n, int64_t k);
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }

 private:
  friend Status OnednnMatMulS8Packed(const int8_t* x, int64_t ldx, const PackedS8Weights& w,
                                     int64_t m, int32_t* out);
  struct Impl;  // the oneDNN memory (kernels/cpu/matmul.cc)
  std::shared_ptr<const Impl> impl_;
  int64_t n_ = 0, k_ = 0;
};

// OnednnMatMulS8 on packed weights: out [M, w.n()] s32 = x [M, w.k()] (rows ldx apart) · W^T.
// Errors as OnednnMatMulS8, plus FailedPrecondition when oneDNN wants another layout for this M.
Status OnednnMatMulS8Packed(const int8_t* x, int64_t ldx, const PackedS8Weights& w, int64_t m,
                            int32_t* out);

}  // namespace laminar::kernels::cpu
