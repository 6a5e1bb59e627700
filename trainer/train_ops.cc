// Forward and backward ops of the trainer, instantiated for f32 and f64.
#include "trainer/train_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vec_ops.h"
#include "kernels/reference/gemm.h"

namespace laminar::trainer::ops {

void Gemm(int64_t m, int64_t n, int64_t k, double alpha, const float* a, int64_t lda, bool trans_a,
          const float* b, int64_t ldb, bool trans_b, double beta, float* c, int64_t ldc,
          ThreadPool* pool) {
  LAMINAR_CHECK_OK(kernels::cpu::Gemm(m, n, k, static_cast<float>(alpha), {a, lda, trans_a},
                                      {b, ldb, trans_b}, static_cast<float>(beta), c, ldc, pool));
}

void Gemm(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, bool trans_a,
          const double* b, int64_t ldb, bool trans_b, double beta, double* c, int64_t ldc,
          ThreadPool* /*pool*/) {
  kernels::ref::Gemm<double>(m, n, k, alpha, a, lda, trans_a, b, ldb, trans_b, beta, c, ldc);
}

double SoftmaxRow(const float* z, int64_t n, float* p) {
  float lse = 0;
  kernels::cpu::LogSumExp({z, static_cast<size_t>(n)}, 1, n, {&lse, 1});
  kernels::cpu::Softmax({z, static_cast<size_t>(n)}, 1, n, {p, static_cast<size_t>(n)});
  return lse;
}

double SoftmaxRow(const double* z, int64_t n, double* p) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, z[j]);
  double s = 0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(z[j] - mx);
  double lse = mx + std::log(s);
  for (int64_t j = 0; j < n; ++j) p[j] = std::exp(z[j] - lse);
  return lse;
}

template <typename T>
void RmsNormForward(const T* x, const T* w, int64_t t, int64_t c, double eps, T* y, T* rstd) {
  for (int64_t i = 0; i < t; ++i) {
    const T* xr = x + i * c;
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) ss += double(xr[j]) * double(xr[j]);
    double r = 1.0 / std::sqrt(ss / double(c) + eps);
    rstd[i] = static_cast<T>(r);
    for (int64_t j = 0; j < c; ++j) y[i * c + j] = static_cast<T>(xr[j] * r * w[j]);
  }
}

template <typename T>
void RmsNormBackward(const T* x, const T* w, const T* rstd, const T* dy, int64_t t, int64_t c,
                     T* dx, T* dw) {
  std::vector<double> dw_acc(static_cast<size_t>(c), 0.0);
  for (int64_t i = 0; i < t; ++i) {
    const T* xr = x + i * c;
    const T* dyr = dy + i * c;
    double r = rstd[i], dot = 0;
    for (int64_t j = 0; j < c; ++j) {
      dot += double(dyr[j]) * double(w[j]) * double(xr[j]);
      dw_acc[j] += double(dyr[j]) * double(xr[j]) * r;
    }
    double coef = r * r * r * dot / double(c);
    for (int64_t j = 0; j < c; ++j) {
      dx[i * c + j] = static_cast<T>(r * double(dyr[j]) * double(w[j]) - double(xr[j]) * coef);
    }
  }
  for (int64_t j = 0; j < c; ++j) dw[j] = static_cast<T>(dw[j] + dw_acc[j]);
}

RopeTable MakeRopeTable(std::span<const int32_t> positions, std::span<const double> inv_freq) {
  RopeTable table;
  table.half = static_cast<int64_t>(inv_freq.size());
  table.cos.resize(positions.size() * inv_freq.size());
  table.sin.resize(table.cos.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    for (size_t j = 0; j < inv_freq.size(); ++j) {
      double angle = double(positions[i]) * inv_freq[j];
      table.cos[i * inv_freq.size() + j] = std::cos(angle);
      table.sin[i * inv_freq.size() + j] = std::sin(angle);
    }
  }
  return table;
}

template <typename T>
void Rope(T* x, const RopeTable& table, int64_t t, int64_t h, int64_t d, kernels::RopeLayout layout,
          bool inverse) {
  const int64_t half = d / 2;
  LAMINAR_CHECK_EQ(table.half, half);
  const bool interleaved = layout == kernels::RopeLayout::kInterleaved;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < half; ++j) {
      double cs = table.cos[i * half + j];
      double sn = inverse ? -table.sin[i * half + j] : table.sin[i * half + j];
      int64_t a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : j + half;
      for (int64_t head = 0; head < h; ++head) {
        T* v = x + (i * h + head) * d;
        double x0 = v[a], x1 = v[b];
        v[a] = static_cast<T>(x0 * cs - x1 * sn);
        v[b] = static_cast<T>(x0 * sn + x1 * cs);
      }
    }
  }
}

template <typename T>
void SwiGluForward(const T* g, const T* u, int64_t n, T* out) {
  for (int64_t i = 0; i < n; ++i) {
    double gv = g[i];
    out[i] = static_cast<T>(gv / (1.0 + std::exp(-gv)) * double(u[i]));
  }
}

template <typename T>
void SwiGluBackward(const T* g, const T* u, const T* dout, int64_t n, T* dg, T* du) {
  for (int64_t i = 0; i < n; ++i) {
    double gv = g[i], sig = 1.0 / (1.0 + std::exp(-gv));
    double silu = gv * sig;
    du[i] = static_cast<T>(double(dout[i]) * silu);
    dg[i] = static_cast<T>(double(dout[i]) * double(u[i]) * sig * (1.0 + gv * (1.0 - sig)));
  }
}

namespace {

// Rows of query blocks: a block of rows attends to the keys up to its last row (causal), so
// about half of the n × n scores are never computed.
constexpr int64_t kQueryBlock = 64;

// Probabilities of rows [i0, i0 + rows) of one head of one sequence over keys [0, cols) with
// cols = i0 + rows: p [rows, cols] = causal softmax of scale · Q Kᵀ (entries past the diagonal 0).
template <typename T>
void CausalProbs(const T* q, int64_t ldq, const T* k, int64_t ldk, int64_t i0, int64_t rows,
                 int64_t d, double scale, T* p) {
  const int64_t cols = i0 + rows;
  Gemm(rows, cols, d, scale, q + i0 * ldq, ldq, false, k, ldk, true, 0.0, p, cols, nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = p + r * cols;
    const int64_t valid = i0 + r + 1;
    SoftmaxRow(row, valid, row);
    std::fill(row + valid, row + cols, T(0));
  }
}

// Runs fn(sequence, kv_head) for every pair, split over the pool.
template <typename Fn>
void ForEachSequenceAndKvHead(std::span<const int64_t> offsets, int64_t hkv, ThreadPool* pool,
                              const Fn& fn) {
  const int64_t pairs = (static_cast<int64_t>(offsets.size()) - 1) * hkv;
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i / hkv, i % hkv);
  };
  if (pool == nullptr || pairs <= 1) {
    body(0, pairs);
  } else {
    pool->ParallelFor(pairs, 1, body);
  }
}

}  // namespace

template <typename T>
void AttentionForward(const T* q, const T* k, const T* v, std::span<const int64_t> offsets,
                      int64_t h, int64_t hkv, int64_t d, T* out, ThreadPool* pool) {
  const int64_t group = h / hkv, ldq = h * d, ldk = hkv * d;
  const double scale = 1.0 / std::sqrt(double(d));
  ForEachSequenceAndKvHead(offsets, hkv, pool, [&](int64_t b, int64_t g) {
    const int64_t off = offsets[b], n = offsets[b + 1] - off;
    thread_local std::vector<T> p;
    const T* kg = k + off * ldk + g * d;
    const T* vg = v + off * ldk + g * d;
    for (int64_t hh = g * group; hh < (g + 1) * group; ++hh) {
      const T* qh = q + off * ldq + hh * d;
      T* oh = out + off * ldq + hh * d;
      for (int64_t i0 = 0; i0 < n; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, n - i0), cols = i0 + rows;
        p.resize(static_cast<size_t>(rows * cols));
        CausalProbs(qh, ldq, kg, ldk, i0, rows, d, scale, p.data());
        Gemm(rows, d, cols, 1.0, p.data(), cols, false, vg, ldk, false, 0.0, oh + i0 * ldq, ldq,
             nullptr);
      }
    }
  });
}

template <typename T>
void AttentionBackward(const T* q, const T* k, const T* v, const T* dout,
                       std::span<const int64_t> offsets, int64_t h, int64_t hkv, int64_t d, T* dq,
                       T* dk, T* dv, ThreadPool* pool) {
  const int64_t group = h / hkv, ldq = h * d, ldk = hkv * d;
  const double scale = 1.0 / std::sqrt(double(d));
  ForEachSequenceAndKvHead(offsets, hkv, pool, [&](int64_t b, int64_t g) {
    const int64_t off = offsets[b], n = offsets[b + 1] - off;
    thread_local std::vector<T> p, dp;
    const T* kg = k + off * ldk + g * d;
    const T* vg = v + off * ldk + g * d;
    T* dkg = dk + off * ldk + g * d;
    T* dvg = dv + off * ldk + g * d;
    for (int64_t i = 0; i < n; ++i) {
      std::fill_n(dkg + i * ldk, d, T(0));
      std::fill_n(dvg + i * ldk, d, T(0));
    }
    for (int64_t hh = g * group; hh < (g + 1) * group; ++hh) {
      const T* qh = q + off * ldq + hh * d;
      const T* doh = dout + off * ldq + hh * d;
      T* dqh = dq + off * ldq + hh * d;
      for (int64_t i0 = 0; i0 < n; i0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, n - i0), cols = i0 + rows;
        p.resize(static_cast<size_t>(rows * cols));
        dp.resize(p.size());
        CausalProbs(qh, ldq, kg, ldk, i0, rows, d, scale, p.data());
        Gemm(cols, d, rows, 1.0, p.data(), cols, true, doh + i0 * ldq, ldq, false, 1.0, dvg, ldk,
             nullptr);
        Gemm(rows, cols, d, 1.0, doh + i0 * ldq, ldq, false, vg, ldk, true, 0.0, dp.data(), cols,
             nullptr);
        for (int64_t r = 0; r < rows; ++r) {
          T* pr = p.data() + r * cols;
          T* dpr = dp.data() + r * cols;
          const int64_t valid = i0 + r + 1;
          double rowsum = 0;
          for (int64_t j = 0; j < valid; ++j) rowsum += double(pr[j]) * double(dpr[j]);
          for (int64_t j = 0; j < valid; ++j) dpr[j] = static_cast<T>(pr[j] * (dpr[j] - rowsum));
          std::fill(dpr + valid, dpr + cols, T(0));
        }
        Gemm(rows, d, cols, scale, dp.data(), cols, false, kg, ldk, false, 0.0, dqh + i0 * ldq, ldq,
             nullptr);
        Gemm(cols, d, rows, scale, dp.data(), cols, true, qh + i0 * ldq, ldq, false, 1.0, dkg, ldk,
             nullptr);
      }
    }
  });
}

template <typename T>
void LogprobEntropyForward(const T* z, const int32_t* targets, int64_t n, int64_t v, T* logprob,
                           T* entropy, T* lse) {
  thread_local std::vector<T> p;
  p.resize(static_cast<size_t>(v));
  for (int64_t i = 0; i < n; ++i) {
    const T* row = z + i * v;
    double l = SoftmaxRow(row, v, p.data());
    double pz = 0;
    for (int64_t j = 0; j < v; ++j) pz += double(p[j]) * double(row[j]);
    lse[i] = static_cast<T>(l);
    entropy[i] = static_cast<T>(l - pz);
    logprob[i] = targets[i] < 0 ? T(0) : static_cast<T>(double(row[targets[i]]) - l);
  }
}

template <typename T>
void LogprobEntropyBackward(T* z, const int32_t* targets, const T* lse, const T* entropy,
                            const T* g_lp, const T* g_ent, int64_t n, int64_t v) {
  thread_local std::vector<T> p;
  p.resize(static_cast<size_t>(v));
  for (int64_t i = 0; i < n; ++i) {
    T* row = z + i * v;
    const double l = lse[i], ent = entropy[i];
    const double glp = targets[i] < 0 ? 0.0 : double(g_lp[i]), gent = g_ent[i];
    SoftmaxRow(row, v, p.data());
    for (int64_t j = 0; j < v; ++j) {
      double pj = p[j];
      row[j] = static_cast<T>(-glp * pj - gent * pj * (double(row[j]) - l + ent));
    }
    if (targets[i] >= 0) row[targets[i]] = static_cast<T>(row[targets[i]] + glp);
  }
}

#define LAMINAR_INSTANTIATE_TRAIN_OPS(T)                                                          \
  template void RmsNormForward<T>(const T*, const T*, int64_t, int64_t, double, T*, T*);          \
  template void RmsNormBackward<T>(const T*, const T*, const T*, const T*, int64_t, int64_t, T*,  \
                                   T*);                                                           \
  template void Rope<T>(T*, const RopeTable&, int64_t, int64_t, int64_t, kernels::RopeLayout,     \
                        bool);                                                                    \
  template void SwiGluForward<T>(const T*, const T*, int64_t, T*);                                \
  template void SwiGluBackward<T>(const T*, const T*, const T*, int64_t, T*, T*);                 \
  template void AttentionForward<T>(const T*, const T*, const T*, std::span<const int64_t>,       \
                                    int64_t, int64_t, int64_t, T*, ThreadPool*);                  \
  template void AttentionBackward<T>(const T*, const T*, const T*, const T*,                      \
                                     std::span<const int64_t>, int64_t, int64_t, int64_t, T*, T*, \
                                     T*, ThreadPool*);                                            \
  template void LogprobEntropyForward<T>(const T*, const int32_t*, int64_t, int64_t, T*, T*, T*); \
  template void LogprobEntropyBackward<T>(T*, const int32_t*, const T*, const T*, const T*,       \
                                          const T*, int64_t, int64_t);
LAMINAR_INSTANTIATE_TRAIN_OPS(float)
LAMINAR_INSTANTIATE_TRAIN_OPS(double)
#undef LAMINAR_INSTANTIATE_TRAIN_OPS

}  // namespace laminar::trainer::ops
