// The trainer's ops, forward and backward, templated on the scalar type: f32 is what training
// runs (dense products through oneDNN, softmax through the vectorized row ops); f64 runs the
// same code through the reference loops so that gradients can be checked against central finite
// differences (docs/architecture.md, tests). Shape letters: kernels/README.md. All buffers
// row-major.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/reference/ops.h"

namespace laminar::trainer::ops {

// C[M, N] = alpha · op(A) · op(B) + beta · C (kernels/cpu/gemm.h for f32, split over `pool`;
// kernels/reference/gemm.h for f64). CHECK-fails on a oneDNN error (a bug: sizes are ours).
void Gemm(int64_t m, int64_t n, int64_t k, double alpha, const float* a, int64_t lda, bool trans_a,
          const float* b, int64_t ldb, bool trans_b, double beta, float* c, int64_t ldc,
          ThreadPool* pool);
void Gemm(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda, bool trans_a,
          const double* b, int64_t ldb, bool trans_b, double beta, double* c, int64_t ldc,
          ThreadPool* pool);

// p[0, n) = softmax(z[0, n)); returns the row's log-sum-exp. In place allowed.
double SoftmaxRow(const float* z, int64_t n, float* p);
double SoftmaxRow(const double* z, int64_t n, double* p);

// RMSNorm (Zhang & Sennrich 2019). Forward: y[t, :] = x[t, :] · r[t] · w, r = 1/sqrt(mean(x²) +
// eps); writes y [T, C] and r [T]. Backward: dx [T, C] written, dw [C] accumulated:
//   dx = r · (dy ∘ w) − x · r³ / C · Σ(dy ∘ w ∘ x),  dw += Σ_t dy ∘ x · r.
template <typename T>
void RmsNormForward(const T* x, const T* w, int64_t t, int64_t c, double eps, T* y, T* rstd);
template <typename T>
void RmsNormBackward(const T* x, const T* w, const T* rstd, const T* dy, int64_t t, int64_t c,
                     T* dx, T* dw);

// cos/sin of position · inv_freq for every token, [T, D/2], in f64 as kernels::ref::Rope.
struct RopeTable {
  int64_t half = 0;
  std::vector<double> cos, sin;
};
RopeTable MakeRopeTable(std::span<const int32_t> positions, std::span<const double> inv_freq);
// Rotates x [T, H, D] in place (RoFormer §3.4); `inverse` rotates by −angle, which is the
// backward of the forward rotation (a rotation's transpose is its inverse).
template <typename T>
void Rope(T* x, const RopeTable& table, int64_t t, int64_t h, int64_t d, kernels::RopeLayout layout,
          bool inverse);

// SwiGLU (Shazeer 2020): out = silu(g) · u. Backward: du = dout · silu(g),
// dg = dout · u · σ(g)(1 + g(1 − σ(g))). All [N]; dg, du written.
template <typename T>
void SwiGluForward(const T* g, const T* u, int64_t n, T* out);
template <typename T>
void SwiGluBackward(const T* g, const T* u, const T* dout, int64_t n, T* dg, T* du);

// Causal grouped-query attention of packed sequences: sequence b owns tokens [offsets[b],
// offsets[b+1]); query head h reads kv head h / (H / Hkv); scale 1/sqrt(D). q, out [T, H, D];
// k, v [T, Hkv, D]. Shared prefixes: prefix_of (empty, or [B]) gives each sequence -1 (it
// attends within itself) or the index of an earlier sequence without a prefix of its own, whose
// tokens come before it: its queries see all of that sequence's keys, then its own causally (the
// n samples of a GRPO group after their one shared prompt). Computed per (prefix tree, kv head)
// with GEMMs (S = QKᵀ, softmax over the visible keys, O = PV), split over `pool`.
template <typename T>
void AttentionForward(const T* q, const T* k, const T* v, std::span<const int64_t> offsets,
                      std::span<const int64_t> prefix_of, int64_t h, int64_t hkv, int64_t d, T* out,
                      ThreadPool* pool);
// Backward of AttentionForward (recomputes P): dq [T, H, D], dk, dv [T, Hkv, D] written (a
// prefix's dk, dv sum the gradients of every sequence that reads it).
//   dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − rowsum(P ∘ dP)), dQ = s · dS K, dK = s · dSᵀ Q.
template <typename T>
void AttentionBackward(const T* q, const T* k, const T* v, const T* dout,
                       std::span<const int64_t> offsets, std::span<const int64_t> prefix_of,
                       int64_t h, int64_t hkv, int64_t d, T* dq, T* dk, T* dv, ThreadPool* pool);

// Log-probabilities of `targets` and entropies of rows of logits z [N, V]:
//   logprob[i] = z[i, target[i]] − lse[i],  entropy[i] = lse[i] − Σ_j p_ij z_ij.
// Backward: z is replaced by dz[i, j] = g_lp[i] (1[j = target] − p_ij) − g_ent[i] p_ij
// (log p_ij + H_i). A target of −1 has no logprob (0, no gradient).
template <typename T>
void LogprobEntropyForward(const T* z, const int32_t* targets, int64_t n, int64_t v, T* logprob,
                           T* entropy, T* lse);
template <typename T>
void LogprobEntropyBackward(T* z, const int32_t* targets, const T* lse, const T* entropy,
                            const T* g_lp, const T* g_ent, int64_t n, int64_t v);

}  // namespace laminar::trainer::ops
