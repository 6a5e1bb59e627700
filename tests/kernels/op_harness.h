// The op harness: every op the model runs is registered once (op_cases.cc) with its shapes, odd
// sizes included, and a tolerance in normalized mean squared error; every backend (op_backends.cc:
// the reference, the CPU at each ISA the machine has, and any backend added later) is one entry,
// an OpTable of host-memory functions. op_harness_test.cc runs each backend on each op against
// the reference, and each backend's gradients against central finite differences of the
// reference forward in f64. A backend that lacks an op leaves its entry empty and the harness
// reports it as skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/reference/ops.h"
#include "kernels/reference/quant.h"

namespace laminar::testing {

// Forward ops, with the contracts of kernels/reference/ (shape letters: kernels/README.md).
struct OpTable {
  // out[M, N] = x[M, K] · w[N, K]^T + bias[N] (bias may be empty).
  std::function<void(std::span<const float> x, std::span<const float> w,
                     std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                     std::span<float> out)>
      matmul_f32;
  // The same with w as bf16 bit patterns (x in f32).
  std::function<void(std::span<const float> x, std::span<const uint16_t> w, int64_t m, int64_t n,
                     int64_t k, std::span<float> out)>
      matmul_bf16;
  std::function<void(const kernels::Int8Activations& x, const kernels::W8A8Weights& w,
                     std::span<const float> bias, std::span<float> out)>
      matmul_w8a8;
  std::function<void(const kernels::Int8Activations& x, const kernels::W4A8Weights& w,
                     std::span<const float> bias, std::span<float> out)>
      matmul_w4a8;
  std::function<void(const kernels::Q8BlockActivations& x, const kernels::GgufQuantWeights& w,
                     std::span<const float> bias, std::span<float> out)>
      matmul_gguf;
  std::function<void(std::span<const float> x, std::span<const float> weight, int64_t t, int64_t c,
                     double eps, std::span<float> out)>
      rms_norm;
  // In place on x [T, H, D].
  std::function<void(std::span<float> x, std::span<const int32_t> positions, int64_t t, int64_t h,
                     int64_t d, std::span<const double> inv_freq, kernels::RopeLayout layout)>
      rope;
  std::function<void(std::span<const float> gate, std::span<const float> up, std::span<float> out)>
      swiglu;
  std::function<void(std::span<const float> table, std::span<const int32_t> ids, int64_t c,
                     std::span<float> out)>
      embedding;
  std::function<void(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out)>
      log_sum_exp;
  std::function<void(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out)>
      softmax;
  std::function<void(std::span<const float> logits, std::span<const int32_t> targets, int64_t t,
                     int64_t v, std::span<float> out)>
      token_logprobs;
  // Attention over one sequence's contiguous cache [S, Hkv, D].
  std::function<void(std::span<const float> q, std::span<const float> k, std::span<const float> v,
                     std::span<const int32_t> positions, int64_t t, int64_t h, int64_t hkv,
                     int64_t d, int64_t s, std::span<float> out)>
      causal_attention;
  // Over a paged pool [blocks, block_size, Hkv, D] and a block table.
  std::function<void(std::span<const float> q, std::span<const float> k_pool,
                     std::span<const float> v_pool, std::span<const int32_t> table,
                     int64_t block_size, std::span<const int32_t> positions, int64_t t, int64_t h,
                     int64_t hkv, int64_t d, std::span<float> out)>
      paged_attention;
  std::function<void(std::span<const float> q, std::span<const float> k_pool,
                     std::span<const float> v_pool, std::span<const int32_t> table,
                     int64_t block_size, int64_t prefix, std::span<const uint64_t> ancestors,
                     int64_t t, int64_t h, int64_t hkv, int64_t d, std::span<float> out)>
      tree_attention;
  // Varlen (packed) causal attention of the trainer: sequences at `offsets` (B + 1) over
  // q [T, H, D], k, v [T, Hkv, D].
  std::function<void(std::span<const double> q, std::span<const double> k,
                     std::span<const double> v, std::span<const int64_t> offsets, int64_t h,
                     int64_t hkv, int64_t d, std::span<double> out)>
      varlen_attention;
  // The sampler's distribution over the vocabulary after temperature, top-k, top-p and min-p.
  std::function<void(std::span<const float> logits, double temperature, int64_t top_k, double top_p,
                     double min_p, std::span<float> probs)>
      sampling_probs;
  // logprob [N] and entropy [N] of logits z [N, V] at targets (the trainer's loss inputs).
  std::function<void(std::span<const double> z, std::span<const int32_t> targets, int64_t n,
                     int64_t v, std::span<double> logprob, std::span<double> entropy)>
      logprob_entropy;
  // `steps` AdamW steps of params under the fixed gradients grads (one per step), lr, betas,
  // eps and weight decay as given; params updated in place.
  std::function<void(std::span<float> params, std::span<const float> grads, int steps, double lr,
                     double weight_decay)>
      adamw;
};

// Backward ops: the gradients of a scalar loss Σ dy ⊙ y with respect to each input.
struct GradTable {
  // y = RmsNorm(x, w): dx [T, C], dw [C].
  std::function<void(std::span<const double> x, std::span<const double> w,
                     std::span<const double> dy, int64_t t, int64_t c, double eps,
                     std::span<double> dx, std::span<double> dw)>
      rms_norm;
  // y = SwiGlu(g, u): dg, du [N].
  std::function<void(std::span<const double> g, std::span<const double> u,
                     std::span<const double> dy, std::span<double> dg, std::span<double> du)>
      swiglu;
  // y = varlen causal attention(q, k, v): dq [T, H, D], dk, dv [T, Hkv, D].
  std::function<void(std::span<const double> q, std::span<const double> k,
                     std::span<const double> v, std::span<const double> dy,
                     std::span<const int64_t> offsets, int64_t h, int64_t hkv, int64_t d,
                     std::span<double> dq, std::span<double> dk, std::span<double> dv)>
      attention;
  // y = (logprob, entropy)(z): dz [N, V] for upstream g_lp, g_ent [N].
  std::function<void(std::span<const double> z, std::span<const int32_t> targets,
                     std::span<const double> g_lp, std::span<const double> g_ent, int64_t n,
                     int64_t v, std::span<double> dz)>
      logprob_entropy;
};

// One backend: a name and its ops. Backends()[0] is the reference.
struct Backend {
  std::string name;
  OpTable ops;
  GradTable grads;
};
const std::vector<Backend>& Backends();

// One forward op at one shape: builds its inputs from a fixed seed and runs `backend`'s op;
// nullopt when the backend lacks it. The outputs of every backend are compared with the
// reference's by NMSE = Σ (got − want)² / Σ want², at most max_nmse.
struct OpCase {
  std::string op;     // e.g. "matmul_f32"
  std::string shape;  // e.g. "m3_n17_k96"
  double max_nmse;
  std::function<std::optional<std::vector<double>>(const Backend& backend)> run;
};
const std::vector<OpCase>& OpCases();

// One backward op at one shape: runs the backend's gradient (nullopt when it lacks it) and the
// reference forward's central finite differences in f64, both flattened in the same order.
struct GradCase {
  std::string op;
  std::string shape;
  double max_nmse;
  std::function<std::optional<std::vector<double>>(const Backend& backend)> analytic;
  std::function<std::vector<double>()> numeric;
};
const std::vector<GradCase>& GradCases();

// Σ (got − want)² / max(Σ want², tiny).
double Nmse(std::span<const double> got, std::span<const double> want);

}  // namespace laminar::testing
