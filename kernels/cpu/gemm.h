// General row-major f32 GEMM with transposes and accumulation, through oneDNN's BLAS-like
// dnnl_sgemm (docs/architecture.md): what the trainer's backward pass needs (dX = dY·W, dW +=
// dYᵀ·X). Reference: kernels/reference/ops.h Gemm; tolerance kMatMulF32 (kernels/tolerance.h).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "core/thread_pool.h"

namespace laminar::kernels::cpu {

// One operand of a GEMM: row-major storage with leading dimension `ld` (elements between rows).
// With `trans`, the stored matrix is the transpose of the logical operand.
struct GemmOperand {
  const float* data = nullptr;
  int64_t ld = 0;
  bool trans = false;
};

// C[M, N] = alpha · op(A)[M, K] · op(B)[K, N] + beta · C, all f32, row-major, C with leading
// dimension ldc. beta = 0 overwrites C (NaNs in C do not propagate). The larger of M and N is
// split over `pool` (and the caller), each part one single-threaded oneDNN call (see matmul.h).
// Errors: InvalidArgument for a leading dimension smaller than its row, Internal naming
// oneDNN's status.
Status Gemm(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b, float beta,
            float* c, int64_t ldc, ThreadPool* pool = nullptr);

}  // namespace laminar::kernels::cpu
