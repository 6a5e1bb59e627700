// Reference GEMM: plain loops with f64 accumulation, for f32 (the truth kernels/cpu/gemm.h is
// tested against) and f64 (the trainer's finite-difference gradient checks run the model in f64).
#pragma once

#include <cstdint>

namespace laminar::kernels::ref {

// C[M, N] = alpha · op(A)[M, K] · op(B)[K, N] + beta · C, row-major with leading dimensions;
// op transposes when trans_a / trans_b (the stored matrix is then [K, M] / [N, K]). beta = 0
// overwrites C.
template <typename T>
void Gemm(int64_t m, int64_t n, int64_t k, double alpha, const T* a, int64_t lda, bool trans_a,
          const T* b, int64_t ldb, bool trans_b, double beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        double av = trans_a ? a[p * lda + i] : a[i * lda + p];
        double bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        acc += av * bv;
      }
      double prev = beta == 0 ? 0.0 : beta * static_cast<double>(c[i * ldc + j]);
      c[i * ldc + j] = static_cast<T>(alpha * acc + prev);
    }
  }
}

}  // namespace laminar::kernels::ref
