// dnnl_sgemm split over a thread pool, one OpenMP thread per part.
#include "kernels/cpu/gemm.h"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <string>
#include <vector>

namespace laminar::kernels::cpu {
namespace {

Status SgemmPart(int64_t m, int64_t n, int64_t k, float alpha, const GemmOperand& a,
                 const GemmOperand& b, float beta, float* c, int64_t ldc) {
  omp_set_num_threads(1);
  dnnl_status_t st = dnnl_sgemm(a.trans ? 'T' : 'N', b.trans ? 'T' : 'N', m, n, k, alpha, a.data,
                                a.ld, b.data, b.ld, beta, c, ldc);
  if (st != dnnl_success) {
    return InternalError("oneDNN sgemm failed with status " + std::to_string(st) +
                         " (M=" + std::to_string(m) + " N=" + std::to_string(n) +
                         " K=" + std::to_string(k) + ")");
  }
  return OkStatus();
}

}  // namespace

Status Gemm(int64_t m, int64_t n, int64_t k, float alpha, GemmOperand a, GemmOperand b, float beta,
            float* c, int64_t ldc, ThreadPool* pool) {
  if (m < 0 || n < 0 || k < 0) return InvalidArgumentError("gemm: negative dimension");
  int64_t a_cols = a.trans ? m : k, b_cols = b.trans ? k : n;
  if (a.ld < std::max<int64_t>(1, a_cols) || b.ld < std::max<int64_t>(1, b_cols) ||
      ldc < std::max<int64_t>(1, n)) {
    return InvalidArgumentError(
        "gemm: a leading dimension is smaller than its row (M=" + std::to_string(m) +
        " N=" + std::to_string(n) + " K=" + std::to_string(k) + ")");
  }
  if (m == 0 || n == 0) return OkStatus();
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    }
    return OkStatus();
  }
  const bool split_m = m >= n;
  const int64_t extent = split_m ? m : n;
  int64_t parts = pool == nullptr || m * n * k < (int64_t{1} << 18)
                      ? 1
                      : std::min<int64_t>(pool->num_threads() + 1, (extent + 31) / 32);
  if (parts <= 1) return SgemmPart(m, n, k, alpha, a, b, beta, c, ldc);
  int64_t per = ((extent + parts - 1) / parts + 15) / 16 * 16;
  std::vector<Status> status(static_cast<size_t>(parts));
  pool->ParallelFor(parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      int64_t lo = p * per, len = std::min(extent, lo + per) - lo;
      if (len <= 0) continue;
      if (split_m) {
        // Rows [lo, lo+len) of op(A) and of C.
        GemmOperand ap = a;
        ap.data = a.trans ? a.data + lo : a.data + lo * a.ld;
        status[p] = SgemmPart(len, n, k, alpha, ap, b, beta, c + lo * ldc, ldc);
      } else {
        // Columns [lo, lo+len) of op(B) and of C.
        GemmOperand bp = b;
        bp.data = b.trans ? b.data + lo * b.ld : b.data + lo;
        status[p] = SgemmPart(m, len, k, alpha, a, bp, beta, c + lo, ldc);
      }
    }
  });
  for (const auto& st : status) LAMINAR_RETURN_IF_ERROR(st);
  return OkStatus();
}

}  // namespace laminar::kernels::cpu
