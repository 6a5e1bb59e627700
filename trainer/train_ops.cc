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

// Where one sequence's queries look: its prefix's `np` keys and values (all visible; np = 0 for
// a sequence without one), then its own keys causally. Pointers are at the sequence's first
// token of one kv head; rows are ldk apart.
template <typename T>
struct Keys {
  const T* kp = nullptr;
  const T* vp = nullptr;
  int64_t np = 0;
  const T* k = nullptr;
  const T* v = nullptr;
};

// Probabilities of query rows [i0, i0 + rows) of one head over cols = np + i0 + rows keys:
// p [rows, cols] = softmax of scale · Q Kᵀ over the prefix and the causal part of the sequence
// (entries past the diagonal 0).
template <typename T>
void BlockProbs(const T* q, int64_t ldq, const Keys<T>& kv, int64_t ldk, int64_t i0, int64_t rows,
                int64_t d, double scale, T* p) {
  const int64_t own = i0 + rows, cols = kv.np + own;
  const T* qb = q + i0 * ldq;
  if (kv.np > 0)
    Gemm(rows, kv.np, d, scale, qb, ldq, false, kv.kp, ldk, true, 0.0, p, cols, nullptr);
  Gemm(rows, own, d, scale, qb, ldq, false, kv.k, ldk, true, 0.0, p + kv.np, cols, nullptr);
  for (int64_t r = 0; r < rows; ++r) {
    T* row = p + r * cols;
    const int64_t valid = kv.np + i0 + r + 1;
    SoftmaxRow(row, valid, row);
    std::fill(row + valid, row + cols, T(0));
  }
}

// The packed batch as units of work that share no key: each root sequence (no prefix) with the
// sequences whose prefix it is, root first.
std::vector<std::vector<int64_t>> PrefixTrees(std::span<const int64_t> offsets,
                                              std::span<const int64_t> prefix_of) {
  const int64_t b = static_cast<int64_t>(offsets.size()) - 1;
  std::vector<std::vector<int64_t>> trees;
  std::vector<int64_t> tree_of(static_cast<size_t>(std::max<int64_t>(b, 0)), -1);
  for (int64_t s = 0; s < b; ++s) {
    const int64_t root = prefix_of.empty() ? -1 : prefix_of[s];
    if (root < 0) {
      tree_of[s] = static_cast<int64_t>(trees.size());
      trees.push_back({s});
    } else {
      trees[tree_of[root]].push_back(s);
    }
  }
  return trees;
}

// Runs fn(tree, kv_head) for every pair, split over the pool.
template <typename Fn>
void ForEachTreeAndKvHead(const std::vector<std::vector<int64_t>>& trees, int64_t hkv,
                          ThreadPool* pool, const Fn& fn) {
  const int64_t pairs = static_cast<int64_t>(trees.size()) * hkv;
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(trees[i / hkv], i % hkv);
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
                      std::span<const int64_t> prefix_of, int64_t h, int64_t hkv, int64_t d, T* out,
                      ThreadPool* pool) {
  const int64_t group = h / hkv, ldq = h * d, ldk = hkv * d;
  const double scale = 1.0 / std::sqrt(double(d));
  ForEachTreeAndKvHead(PrefixTrees(offsets, prefix_of), hkv, pool,
                       [&](const std::vector<int64_t>& tree, int64_t g) {
                         thread_local std::vector<T> p;
                         const int64_t root = tree[0];
                         for (int64_t s : tree) {
                           const int64_t off = offsets[s], n = offsets[s + 1] - off;
                           Keys<T> kv{.k = k + off * ldk + g * d, .v = v + off * ldk + g * d};
                           if (s != root) {
                             kv.kp = k + offsets[root] * ldk + g * d;
                             kv.vp = v + offsets[root] * ldk + g * d;
                             kv.np = offsets[root + 1] - offsets[root];
                           }
                           for (int64_t hh = g * group; hh < (g + 1) * group; ++hh) {
                             const T* qh = q + off * ldq + hh * d;
                             T* oh = out + off * ldq + hh * d;
                             for (int64_t i0 = 0; i0 < n; i0 += kQueryBlock) {
                               const int64_t rows = std::min(kQueryBlock, n - i0), own = i0 + rows,
                                             cols = kv.np + own;
                               p.resize(static_cast<size_t>(rows * cols));
                               BlockProbs(qh, ldq, kv, ldk, i0, rows, d, scale, p.data());
                               if (kv.np > 0) {
                                 Gemm(rows, d, kv.np, 1.0, p.data(), cols, false, kv.vp, ldk, false,
                                      0.0, oh + i0 * ldq, ldq, nullptr);
                               }
                               Gemm(rows, d, own, 1.0, p.data() + kv.np, cols, false, kv.v, ldk,
                                    false, kv.np > 0 ? 1.0 : 0.0, oh + i0 * ldq, ldq, nullptr);
                             }
                           }
                         }
                       });
}

template <typename T>
void AttentionBackward(const T* q, const T* k, const T* v, const T* dout,
                       std::span<const int64_t> offsets, std::span<const int64_t> prefix_of,
                       int64_t h, int64_t hkv, int64_t d, T* dq, T* dk, T* dv, ThreadPool* pool) {
  const int64_t group = h / hkv, ldq = h * d, ldk = hkv * d;
  const double scale = 1.0 / std::sqrt(double(d));
  ForEachTreeAndKvHead(
      PrefixTrees(offsets, prefix_of), hkv, pool, [&](const std::vector<int64_t>& tree, int64_t g) {
        thread_local std::vector<T> p, dp;
        // The tree's keys gather gradient from every sequence of it: zeroed first, then summed.
        for (int64_t s : tree) {
          for (int64_t i = offsets[s]; i < offsets[s + 1]; ++i) {
            std::fill_n(dk + i * ldk + g * d, d, T(0));
            std::fill_n(dv + i * ldk + g * d, d, T(0));
          }
        }
        const int64_t root = tree[0];
        for (int64_t s : tree) {
          const int64_t off = offsets[s], n = offsets[s + 1] - off;
          Keys<T> kv{.k = k + off * ldk + g * d, .v = v + off * ldk + g * d};
          T* dkg = dk + off * ldk + g * d;
          T* dvg = dv + off * ldk + g * d;
          T* dkp = nullptr;
          T* dvp = nullptr;
          if (s != root) {
            kv.kp = k + offsets[root] * ldk + g * d;
            kv.vp = v + offsets[root] * ldk + g * d;
            kv.np = offsets[root + 1] - offsets[root];
            dkp = dk + offsets[root] * ldk + g * d;
            dvp = dv + offsets[root] * ldk + g * d;
          }
          const int64_t np = kv.np;
          for (int64_t hh = g * group; hh < (g + 1) * group; ++hh) {
            const T* qh = q + off * ldq + hh * d;
            const T* doh = dout + off * ldq + hh * d;
            T* dqh = dq + off * ldq + hh * d;
            for (int64_t i0 = 0; i0 < n; i0 += kQueryBlock) {
              const int64_t rows = std::min(kQueryBlock, n - i0), own = i0 + rows, cols = np + own;
              const T* qb = qh + i0 * ldq;
              const T* dob = doh + i0 * ldq;
              p.resize(static_cast<size_t>(rows * cols));
              dp.resize(p.size());
              BlockProbs(qh, ldq, kv, ldk, i0, rows, d, scale, p.data());
              // dV = Pᵀ dO and dP = dO Vᵀ, over the prefix's columns and the sequence's own.
              if (np > 0) {
                Gemm(np, d, rows, 1.0, p.data(), cols, true, dob, ldq, false, 1.0, dvp, ldk,
                     nullptr);
                Gemm(rows, np, d, 1.0, dob, ldq, false, kv.vp, ldk, true, 0.0, dp.data(), cols,
                     nullptr);
              }
              Gemm(own, d, rows, 1.0, p.data() + np, cols, true, dob, ldq, false, 1.0, dvg, ldk,
                   nullptr);
              Gemm(rows, own, d, 1.0, dob, ldq, false, kv.v, ldk, true, 0.0, dp.data() + np, cols,
                   nullptr);
              for (int64_t r = 0; r < rows; ++r) {
                T* pr = p.data() + r * cols;
                T* dpr = dp.data() + r * cols;
                const int64_t valid = np + i0 + r + 1;
                double rowsum = 0;
                for (int64_t j = 0; j < valid; ++j) rowsum += double(pr[j]) * double(dpr[j]);
                for (int64_t j = 0; j < valid; ++j)
                  dpr[j] = static_cast<T>(pr[j] * (dpr[j] - rowsum));
                std::fill(dpr + valid, dpr + cols, T(0));
              }
              // dQ = s · dS K and dK = s · dSᵀ Q, likewise split.
              if (np > 0) {
                Gemm(rows, d, np, scale, dp.data(), cols, false, kv.kp, ldk, false, 0.0,
                     dqh + i0 * ldq, ldq, nullptr);
                Gemm(np, d, rows, scale, dp.data(), cols, true, qb, ldq, false, 1.0, dkp, ldk,
                     nullptr);
              }
              Gemm(rows, d, own, scale, dp.data() + np, cols, false, kv.k, ldk, false,
                   np > 0 ? 1.0 : 0.0, dqh + i0 * ldq, ldq, nullptr);
              Gemm(own, d, rows, scale, dp.data() + np, cols, true, qb, ldq, false, 1.0, dkg, ldk,
                   nullptr);
            }
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
                                    std::span<const int64_t>, int64_t, int64_t, int64_t, T*,      \
                                    ThreadPool*);                                                 \
  template void AttentionBackward<T>(const T*, const T*, const T*, const T*,                      \
                                     std::span<const int64_t>, std::span<const int64_t>, int64_t, \
                                     int64_t, int64_t, T*, T*, T*, ThreadPool*);                  \
  template void LogprobEntropyForward<T>(const T*, const int32_t*, int64_t, int64_t, T*, T*, T*); \
  template void LogprobEntropyBackward<T>(T*, const int32_t*, const T*, const T*, const T*,       \
                                          const T*, int64_t, int64_t);
LAMINAR_INSTANTIATE_TRAIN_OPS(float)
LAMINAR_INSTANTIATE_TRAIN_OPS(double)
#undef LAMINAR_INSTANTIATE_TRAIN_OPS

}  // namespace laminar::trainer::ops
