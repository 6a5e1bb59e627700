// Dispatch of MatMulBF16Dot, its portable path, and activation rounding.
#include "kernels/cpu/bf16_dot.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/vec_ops.h"

namespace laminar::kernels::cpu {

namespace avx512bf16 {
// kernels/cpu/bf16_dot_avx512.cc: output columns [n_begin, n_end).
void MatMulBF16DotCols(const uint16_t* x, const uint16_t* w, int64_t m, int64_t k, int64_t n_total,
                       int64_t n_begin, int64_t n_end, float* out);
// core/dtype.h FloatToBF16 on 16 lanes at a time (AVX-512 F/BW).
void RoundToBF16(const float* x, int64_t n, uint16_t* out);
}  // namespace avx512bf16

namespace {

void ScalarCols(const uint16_t* x, const uint16_t* w, int64_t m, int64_t k, int64_t n_total,
                int64_t n_begin, int64_t n_end, float* out) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = n_begin; n < n_end; ++n) {
      float sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += BF16ToFloat(x[i * k + p]) * BF16ToFloat(w[n * k + p]);
      out[i * n_total + n] = sum;
    }
  }
}

// out[i, j] += bias[j] for every row i of out [M, N]; nothing when bias is empty.
void AddBias(std::span<const float> bias, int64_t m, int64_t n, std::span<float> out) {
  if (bias.empty()) return;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
  }
}

}  // namespace

bool HasBF16Dot() { return GetCpuFeatures().avx512_bf16 && BestIsa() == Isa::kAvx512; }

void RoundToBF16(std::span<const float> x, std::span<uint16_t> out) {
  LAMINAR_CHECK(x.size() == out.size());
  if (HasBF16Dot()) {  // the AVX-512 file is built for AVX512-BF16 CPUs
    avx512bf16::RoundToBF16(x.data(), static_cast<int64_t>(x.size()), out.data());
    return;
  }
  for (size_t i = 0; i < x.size(); ++i) out[i] = FloatToBF16(x[i]);
}

void MatMulBF16Dot(std::span<const uint16_t> x, std::span<const uint16_t> w, int64_t m, int64_t n,
                   int64_t k, std::span<float> out, ThreadPool* pool, Isa isa) {
  LAMINAR_CHECK(static_cast<int64_t>(x.size()) == m * k &&
                static_cast<int64_t>(w.size()) == n * k &&
                static_cast<int64_t>(out.size()) == m * n)
      << "bf16 dot matmul: sizes do not match M=" << m << " N=" << n << " K=" << k;
  LAMINAR_CHECK(isa != Isa::kAvx2) << "AVX2 has no bf16 dot product";
  LAMINAR_CHECK(isa == Isa::kScalar || GetCpuFeatures().avx512_bf16)
      << "AVX512-BF16 requested on a CPU without it";
  auto cols = isa == Isa::kAvx512 ? avx512bf16::MatMulBF16DotCols : ScalarCols;
  auto run = [&](int64_t b, int64_t e) {
    cols(x.data(), w.data(), m, k, n, b * 4, std::min(n, e * 4), out.data());
  };
  const int64_t blocks = (n + 3) / 4;
  if (pool == nullptr) {
    run(0, blocks);
  } else {
    pool->ParallelFor(blocks, 16, run);
  }
}

void MatMulBF16Weights(std::span<const float> x, std::span<const uint16_t> w,
                       std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                       std::span<float> out, ThreadPool* pool, bool bf16_activations) {
  LAMINAR_CHECK(MatMulSizesMatch(x.size(), w.size(), bias.size(), out.size(), m, n, k))
      << "bf16 matmul: sizes do not match M=" << m << " N=" << n << " K=" << k;
  if (bf16_activations) {
    thread_local std::vector<uint16_t> xb;
    xb.resize(x.size());
    RoundToBF16(x, xb);
    if (m > kBF16DirectMaxRows) {
      LAMINAR_CHECK_OK(OnednnMatMulBF16(xb, w, bias, m, n, k, out, pool));
      return;
    }
    MatMulBF16Dot(xb, w, m, n, k, out, pool);
  } else if (m > kBF16DirectMaxRows) {
    thread_local std::vector<float> widened;
    widened.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) widened[i] = BF16ToFloat(w[i]);
    LAMINAR_CHECK_OK(MatMul(x, widened, bias, m, n, k, out, pool));
    return;
  } else {
    MatMulBF16(x, w, m, n, k, out, pool);
  }
  AddBias(bias, m, n, out);
}

}  // namespace laminar::kernels::cpu
