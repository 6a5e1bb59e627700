// The op harness's backends (op_harness.h): the reference (plain loops, f64 accumulation), and
// the CPU kernels at each ISA this machine runs (scalar always; AVX2 and AVX-512 where present).
// A new backend (a GPU one) is one more entry in Backends(): the harness then runs it on every op.
#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "engine/sampler.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/vec_ops.h"
#include "kernels/reference/paged_attention.h"
#include "tests/kernels/op_harness.h"
#include "trainer/optimizer.h"
#include "trainer/parameters.h"
#include "trainer/train_ops.h"

namespace laminar::testing {
namespace {

// The sampler's kept tokens as a dense distribution [V].
void DenseDistribution(const engine::TokenDistribution& d, std::span<float> probs) {
  std::fill(probs.begin(), probs.end(), 0.f);
  if (d.greedy) {
    probs[static_cast<size_t>(d.ids[0])] = 1.f;
    return;
  }
  for (size_t i = 0; i < d.probs.size(); ++i) {
    probs[d.dense ? i : static_cast<size_t>(d.ids[i])] = static_cast<float>(d.probs[i]);
  }
}

// Plain AdamW in f64, torch.optim.AdamW's formula (decoupled decay before the update).
void ReferenceAdamW(std::span<float> params, std::span<const float> grads, int steps, double lr,
                    double weight_decay) {
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<double> p(params.begin(), params.end()), m(p.size()), v(p.size());
  for (int t = 1; t <= steps; ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = grads[i];
      p[i] *= 1 - lr * weight_decay;
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  for (size_t i = 0; i < p.size(); ++i) params[i] = static_cast<float>(p[i]);
}

// The trainer's ops in precision T (double: the reference; float: the CPU training path).
template <typename T>
GradTable TrainerGrads() {
  GradTable g;
  g.rms_norm = [](std::span<const double> x, std::span<const double> w, std::span<const double> dy,
                  int64_t t, int64_t c, double eps, std::span<double> dx, std::span<double> dw) {
    std::vector<T> xt(x.begin(), x.end()), wt(w.begin(), w.end()), dyt(dy.begin(), dy.end());
    std::vector<T> y(x.size()), rstd(static_cast<size_t>(t)), dxt(x.size()), dwt(w.size());
    trainer::ops::RmsNormForward(xt.data(), wt.data(), t, c, eps, y.data(), rstd.data());
    trainer::ops::RmsNormBackward(xt.data(), wt.data(), rstd.data(), dyt.data(), t, c, dxt.data(),
                                  dwt.data());
    std::copy(dxt.begin(), dxt.end(), dx.begin());
    std::copy(dwt.begin(), dwt.end(), dw.begin());
  };
  g.swiglu = [](std::span<const double> gate, std::span<const double> up,
                std::span<const double> dy, std::span<double> dg, std::span<double> du) {
    std::vector<T> gt(gate.begin(), gate.end()), ut(up.begin(), up.end()),
        dyt(dy.begin(), dy.end());
    std::vector<T> dgt(gate.size()), dut(up.size());
    trainer::ops::SwiGluBackward(gt.data(), ut.data(), dyt.data(), std::ssize(gt), dgt.data(),
                                 dut.data());
    std::copy(dgt.begin(), dgt.end(), dg.begin());
    std::copy(dut.begin(), dut.end(), du.begin());
  };
  g.attention = [](std::span<const double> q, std::span<const double> k, std::span<const double> v,
                   std::span<const double> dy, std::span<const int64_t> offsets, int64_t h,
                   int64_t hkv, int64_t d, std::span<double> dq, std::span<double> dk,
                   std::span<double> dv) {
    std::vector<T> qt(q.begin(), q.end()), kt(k.begin(), k.end()), vt(v.begin(), v.end());
    std::vector<T> dyt(dy.begin(), dy.end()), dqt(q.size()), dkt(k.size()), dvt(v.size());
    const std::vector<int64_t> no_prefix(offsets.size() - 1, -1);
    trainer::ops::AttentionBackward(qt.data(), kt.data(), vt.data(), dyt.data(), offsets, no_prefix,
                                    h, hkv, d, dqt.data(), dkt.data(), dvt.data(), nullptr);
    std::copy(dqt.begin(), dqt.end(), dq.begin());
    std::copy(dkt.begin(), dkt.end(), dk.begin());
    std::copy(dvt.begin(), dvt.end(), dv.begin());
  };
  g.logprob_entropy = [](std::span<const double> z, std::span<const int32_t> targets,
                         std::span<const double> g_lp, std::span<const double> g_ent, int64_t n,
                         int64_t v, std::span<double> dz) {
    std::vector<T> zt(z.begin(), z.end()), lp(static_cast<size_t>(n)), ent(lp.size()),
        lse(lp.size());
    trainer::ops::LogprobEntropyForward(zt.data(), targets.data(), n, v, lp.data(), ent.data(),
                                        lse.data());
    std::vector<T> glp(g_lp.begin(), g_lp.end()), gent(g_ent.begin(), g_ent.end());
    trainer::ops::LogprobEntropyBackward(zt.data(), targets.data(), lse.data(), ent.data(),
                                         glp.data(), gent.data(), n, v);
    std::copy(zt.begin(), zt.end(), dz.begin());
  };
  return g;
}

template <typename T>
void TrainerAttention(std::span<const double> q, std::span<const double> k,
                      std::span<const double> v, std::span<const int64_t> offsets, int64_t h,
                      int64_t hkv, int64_t d, std::span<double> out) {
  std::vector<T> qt(q.begin(), q.end()), kt(k.begin(), k.end()), vt(v.begin(), v.end());
  std::vector<T> o(out.size());
  const std::vector<int64_t> no_prefix(offsets.size() - 1, -1);
  trainer::ops::AttentionForward(qt.data(), kt.data(), vt.data(), offsets, no_prefix, h, hkv, d,
                                 o.data(), nullptr);
  std::copy(o.begin(), o.end(), out.begin());
}

template <typename T>
void TrainerLogprobEntropy(std::span<const double> z, std::span<const int32_t> targets, int64_t n,
                           int64_t v, std::span<double> logprob, std::span<double> entropy) {
  std::vector<T> zt(z.begin(), z.end()), lp(static_cast<size_t>(n)), ent(lp.size()), lse(lp.size());
  trainer::ops::LogprobEntropyForward(zt.data(), targets.data(), n, v, lp.data(), ent.data(),
                                      lse.data());
  std::copy(lp.begin(), lp.end(), logprob.begin());
  std::copy(ent.begin(), ent.end(), entropy.begin());
}

Backend Reference() {
  Backend b;
  b.name = "reference";
  OpTable& o = b.ops;
  o.matmul_f32 = kernels::ref::MatMul;
  o.matmul_bf16 = [](std::span<const float> x, std::span<const uint16_t> w, int64_t m, int64_t n,
                     int64_t k, std::span<float> out) {
    std::vector<float> wf(w.size());
    for (size_t i = 0; i < w.size(); ++i) wf[i] = BF16ToFloat(w[i]);
    kernels::ref::MatMul(x, wf, {}, m, n, k, out);
  };
  o.matmul_w8a8 = kernels::ref::MatMulW8A8;
  o.matmul_w4a8 = kernels::ref::MatMulW4A8;
  o.matmul_gguf = kernels::ref::MatMulGguf;
  o.rms_norm = kernels::ref::RmsNorm;
  o.rope = kernels::ref::Rope;
  o.swiglu = kernels::ref::SwiGlu;
  o.embedding = kernels::ref::Embedding;
  o.log_sum_exp = kernels::ref::LogSumExp;
  o.softmax = kernels::ref::Softmax;
  o.token_logprobs = kernels::ref::TokenLogprobs;
  o.causal_attention = kernels::ref::CausalAttention;
  o.paged_attention = kernels::ref::PagedCausalAttention;
  o.tree_attention = kernels::ref::PagedTreeAttention;
  o.varlen_attention = TrainerAttention<double>;
  o.logprob_entropy = TrainerLogprobEntropy<double>;
  o.sampling_probs = [](std::span<const float> logits, double temperature, int64_t top_k,
                        double top_p, double min_p, std::span<float> probs) {
    // Plain loops, in the sampler's order: tokens by logit (ties by id), top-k, the softmax of
    // what is kept at the temperature, the smallest prefix reaching top-p, then min-p relative to
    // the most likely (at least one token), renormalized.
    const size_t v = logits.size();
    std::vector<size_t> order(v);
    for (size_t i = 0; i < v; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t x, size_t y) { return logits[x] > logits[y]; });
    size_t n = top_k > 0 ? std::min<size_t>(v, static_cast<size_t>(top_k)) : v;
    std::vector<double> p(n);
    double z = 0;
    for (size_t r = 0; r < n; ++r) {
      z += p[r] =
          std::exp((static_cast<double>(logits[order[r]]) - logits[order[0]]) / temperature);
    }
    if (top_p < 1) {
      double cum = 0;
      for (size_t r = 0; r < n; ++r) {
        cum += p[r] / z;
        if (cum >= top_p) {
          n = r + 1;
          break;
        }
      }
    }
    if (min_p > 0) {
      size_t m = 0;
      while (m < n && p[m] >= min_p * p[0]) ++m;
      n = std::max<size_t>(m, 1);
    }
    double mass = 0;
    for (size_t r = 0; r < n; ++r) mass += p[r];
    std::fill(probs.begin(), probs.end(), 0.f);
    for (size_t r = 0; r < n; ++r) probs[order[r]] = static_cast<float>(p[r] / mass);
  };
  o.adamw = ReferenceAdamW;
  b.grads = TrainerGrads<double>();
  return b;
}

// Kept whole: the backend entry is one table of ops, each a short adapter to a kernel.
Backend Cpu(kernels::cpu::Isa isa) {
  Backend b;
  b.name = "cpu_" + kernels::cpu::IsaName(isa);
  static ThreadPool pool(2);
  OpTable& o = b.ops;
  o.matmul_f32 = [isa](std::span<const float> x, std::span<const float> w,
                       std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                       std::span<float> out) {
    kernels::cpu::MatMulF32BatchInvariant(x, w, bias, m, n, k, out, &pool, isa);
  };
  o.matmul_bf16 = [isa](std::span<const float> x, std::span<const uint16_t> w, int64_t m, int64_t n,
                        int64_t k, std::span<float> out) {
    kernels::cpu::MatMulBF16(x, w, m, n, k, out, &pool, isa);
  };
  // The quantized kernels take their own ISA ladder; the vector ISA maps onto it.
  const kernels::cpu::QuantIsa qisa =
      isa == kernels::cpu::Isa::kScalar ? kernels::cpu::QuantIsa::kScalar
      : isa == kernels::cpu::Isa::kAvx2 || !kernels::cpu::GetCpuFeatures().avx512_vnni
          ? kernels::cpu::QuantIsa::kAvx2
          : kernels::cpu::QuantIsa::kAvx512Vnni;
  o.matmul_w8a8 = [qisa](const kernels::Int8Activations& x, const kernels::W8A8Weights& w,
                         std::span<const float> bias, std::span<float> out) {
    kernels::cpu::MatMulW8A8(x, w, bias, out, &pool, qisa);
  };
  o.matmul_w4a8 = [qisa](const kernels::Int8Activations& x, const kernels::W4A8Weights& w,
                         std::span<const float> bias, std::span<float> out) {
    kernels::cpu::MatMulW4A8(x, w, bias, out, &pool, qisa);
  };
  o.matmul_gguf = [qisa](const kernels::Q8BlockActivations& x, const kernels::GgufQuantWeights& w,
                         std::span<const float> bias, std::span<float> out) {
    kernels::cpu::MatMulGguf(x, kernels::cpu::PackGgufRowGroups(w), bias, out, &pool, qisa);
  };
  o.rms_norm = [isa](std::span<const float> x, std::span<const float> w, int64_t t, int64_t c,
                     double eps,
                     std::span<float> out) { kernels::cpu::RmsNorm(x, w, t, c, eps, out, isa); };
  // The engine's table of cos and sin (positions past its 64 are computed on the fly).
  o.rope = [](std::span<float> x, std::span<const int32_t> positions, int64_t t, int64_t h,
              int64_t d, std::span<const double> inv_freq, kernels::RopeLayout layout) {
    kernels::cpu::RopeTable(inv_freq, 64).Apply(x, positions, t, h, d, layout);
  };
  o.swiglu = [isa](std::span<const float> g, std::span<const float> u, std::span<float> out) {
    kernels::cpu::SwiGlu(g, u, out, isa);
  };
  o.embedding = kernels::cpu::Embedding;
  o.log_sum_exp = [isa](std::span<const float> l, int64_t t, int64_t v, std::span<float> out) {
    kernels::cpu::LogSumExp(l, t, v, out, isa);
  };
  o.softmax = [isa](std::span<const float> l, int64_t t, int64_t v, std::span<float> out) {
    kernels::cpu::Softmax(l, t, v, out, isa);
  };
  o.token_logprobs = [isa](std::span<const float> l, std::span<const int32_t> targets, int64_t t,
                           int64_t v, std::span<float> out) {
    kernels::cpu::TokenLogprobs(l, targets, t, v, out, isa);
  };
  o.causal_attention = [isa](std::span<const float> q, std::span<const float> k,
                             std::span<const float> v, std::span<const int32_t> positions,
                             int64_t t, int64_t h, int64_t hkv, int64_t d, int64_t s,
                             std::span<float> out) {
    kernels::cpu::CausalAttention(q, k, v, positions, t, h, hkv, d, s, out, &pool, isa);
  };
  o.paged_attention = [isa](std::span<const float> q, std::span<const float> k,
                            std::span<const float> v, std::span<const int32_t> table, int64_t bs,
                            std::span<const int32_t> positions, int64_t t, int64_t h, int64_t hkv,
                            int64_t d, std::span<float> out) {
    kernels::cpu::PagedCausalAttention(q, k, v, table, bs, positions, t, h, hkv, d, out, &pool,
                                       isa);
  };
  o.tree_attention = [isa](std::span<const float> q, std::span<const float> k,
                           std::span<const float> v, std::span<const int32_t> table, int64_t bs,
                           int64_t prefix, std::span<const uint64_t> ancestors, int64_t t,
                           int64_t h, int64_t hkv, int64_t d, std::span<float> out) {
    kernels::cpu::PagedTreeAttention(q, k, v, table, bs, prefix, ancestors, t, h, hkv, d, out,
                                     &pool, isa);
  };
  // Not ISA-specific: the trainer's f32 path, the engine's sampler and optimizer.
  o.varlen_attention = TrainerAttention<float>;
  o.logprob_entropy = TrainerLogprobEntropy<float>;
  o.sampling_probs = [](std::span<const float> logits, double temperature, int64_t top_k,
                        double top_p, double min_p, std::span<float> probs) {
    engine::Sampler sampler({.temperature = static_cast<float>(temperature),
                             .top_k = static_cast<int32_t>(top_k),
                             .top_p = static_cast<float>(top_p),
                             .min_p = static_cast<float>(min_p)});
    engine::TokenDistribution d;
    sampler.Distribution(logits, &d);
    DenseDistribution(d, probs);
  };
  o.adamw = [](std::span<float> params, std::span<const float> grads, int steps, double lr,
               double weight_decay) {
    trainer::ParameterSet set;
    set.Add("w", Shape({static_cast<int64_t>(params.size())}), true);
    std::copy(params.begin(), params.end(), set.values().begin());
    trainer::OptimizerConfig c;
    c.lr = lr;
    c.weight_decay = weight_decay;
    c.grad_clip = 0;
    trainer::AdamW opt(c, set.num_elements(), &pool);
    for (int s = 0; s < steps; ++s) {
      std::copy(grads.begin(), grads.end(), set.grads().begin());
      (void)opt.Step(&set, s);
    }
    std::copy(set.values().begin(), set.values().end(), params.begin());
  };
  b.grads = TrainerGrads<float>();
  return b;
}

}  // namespace

const std::vector<Backend>& Backends() {
  static const std::vector<Backend>* backends = [] {
    auto* v = new std::vector<Backend>{Reference(), Cpu(kernels::cpu::Isa::kScalar)};
    const kernels::cpu::CpuFeatures& f = kernels::cpu::GetCpuFeatures();
    if (f.avx2) v->push_back(Cpu(kernels::cpu::Isa::kAvx2));
    if (f.avx512) v->push_back(Cpu(kernels::cpu::Isa::kAvx512));
    return v;
  }();
  return *backends;
}

double Nmse(std::span<const double> got, std::span<const double> want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = got[i] - want[i];
    err += d * d;
    norm += want[i] * want[i];
  }
  return err / std::max(norm, 1e-300);
}

}  // namespace laminar::testing
