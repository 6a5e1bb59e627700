// The op harness's ops (op_harness.h), each registered once with its shapes (1, primes, sizes
// that are not multiples of the vector width or block, and a realistic one) and its tolerance in
// NMSE. Inputs come from fixed seeds, so every backend sees the same ones.
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "tests/kernels/op_harness.h"
#include "tests/test_util.h"
#include "trainer/train_ops.h"

namespace laminar::testing {
namespace {

using Out = std::optional<std::vector<double>>;

std::vector<double> Widen(std::span<const float> v) { return {v.begin(), v.end()}; }
std::vector<double> RandomF64(size_t n, uint64_t seed, double stddev = 1.0) {
  std::vector<float> f = RandomNormal(n, seed, static_cast<float>(stddev));
  return {f.begin(), f.end()};
}
std::string Name(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& [k, v] : dims) s += (s.empty() ? "" : "_") + std::string(k) + std::to_string(v);
  return s;
}

void AddMatMuls(std::vector<OpCase>& cases) {
  struct Mnk {
    int64_t m, n, k;
  };
  for (const Mnk s :
       {Mnk{1, 1, 1}, Mnk{3, 17, 96}, Mnk{5, 33, 577}, Mnk{16, 64, 256}, Mnk{1, 576, 1536}}) {
    const std::string shape = Name({{"m", s.m}, {"n", s.n}, {"k", s.k}});
    cases.push_back({"matmul_f32", shape, 1e-10, [s](const Backend& b) -> Out {
                       if (!b.ops.matmul_f32) return std::nullopt;
                       auto x = RandomNormal(s.m * s.k, 1), w = RandomNormal(s.n * s.k, 2),
                            bias = RandomNormal(s.n, 3);
                       std::vector<float> out(s.m * s.n);
                       b.ops.matmul_f32(x, w, bias, s.m, s.n, s.k, out);
                       return Widen(out);
                     }});
    cases.push_back({"matmul_bf16", shape, 1e-10, [s](const Backend& b) -> Out {
                       if (!b.ops.matmul_bf16) return std::nullopt;
                       auto x = RandomNormal(s.m * s.k, 4), wf = RandomNormal(s.n * s.k, 5);
                       std::vector<uint16_t> w(wf.size());
                       for (size_t i = 0; i < w.size(); ++i) w[i] = FloatToBF16(wf[i]);
                       std::vector<float> out(s.m * s.n);
                       b.ops.matmul_bf16(x, w, s.m, s.n, s.k, out);
                       return Widen(out);
                     }});
  }
  // Integer sums are exact: the quantized kernels equal the reference bit for bit.
  for (const Mnk s : {Mnk{1, 7, 70}, Mnk{2, 33, 256}, Mnk{3, 64, 300}, Mnk{17, 40, 128}}) {
    const std::string shape = Name({{"m", s.m}, {"n", s.n}, {"k", s.k}});
    cases.push_back({"matmul_w8a8", shape, 1e-14, [s](const Backend& b) -> Out {
                       if (!b.ops.matmul_w8a8) return std::nullopt;
                       auto w = kernels::QuantizeW8A8(RandomNormal(s.n * s.k, 6), s.n, s.k);
                       LAMINAR_CHECK(w.ok()) << w.status();
                       kernels::Int8Activations x;
                       kernels::QuantizeActivationsPerToken(RandomNormal(s.m * s.k, 7), s.m, s.k,
                                                            &x);
                       std::vector<float> out(s.m * s.n);
                       b.ops.matmul_w8a8(x, *w, RandomNormal(s.n, 8), out);
                       return Widen(out);
                     }});
    cases.push_back({"matmul_w4a8", shape, 1e-14, [s](const Backend& b) -> Out {
                       if (!b.ops.matmul_w4a8) return std::nullopt;
                       auto w = kernels::QuantizeW4A8(RandomNormal(s.n * s.k, 9), s.n, s.k, 64);
                       LAMINAR_CHECK(w.ok()) << w.status();
                       kernels::Int8Activations x;
                       kernels::QuantizeActivationsPerToken(RandomNormal(s.m * s.k, 10), s.m, s.k,
                                                            &x);
                       std::vector<float> out(s.m * s.n);
                       b.ops.matmul_w4a8(x, *w, {}, out);
                       return Widen(out);
                     }});
  }
  for (const uint32_t type : {2u, 3u, 8u}) {
    for (const Mnk s : {Mnk{1, 1, 32}, Mnk{3, 7, 96}, Mnk{5, 67, 576}}) {
      const std::string shape = Name({{"type", type}, {"m", s.m}, {"n", s.n}, {"k", s.k}});
      cases.push_back(
          {"matmul_gguf", shape, 1e-10, [s, type](const Backend& b) -> Out {
             if (!b.ops.matmul_gguf) return std::nullopt;
             auto w =
                 kernels::PackGgufWeights(type, RandomGgmlBlocks(type, s.n, s.k, 11), s.n, s.k);
             LAMINAR_CHECK(w.ok()) << w.status();
             kernels::Q8BlockActivations x;
             kernels::QuantizeActivationsQ8Blocks(RandomNormal(s.m * s.k, 12), s.m, s.k, &x);
             std::vector<float> out(s.m * s.n);
             b.ops.matmul_gguf(x, *w, RandomNormal(s.n, 13), out);
             return Widen(out);
           }});
    }
  }
}

void AddRowOps(std::vector<OpCase>& cases) {
  struct Tc {
    int64_t t, c;
  };
  for (const Tc s : {Tc{1, 1}, Tc{3, 17}, Tc{7, 576}, Tc{2, 49152}}) {
    const std::string shape = Name({{"t", s.t}, {"c", s.c}});
    cases.push_back({"rms_norm", shape, 1e-11, [s](const Backend& b) -> Out {
                       if (!b.ops.rms_norm) return std::nullopt;
                       auto x = RandomNormal(s.t * s.c, 14), w = RandomNormal(s.c, 15);
                       std::vector<float> out(x.size());
                       b.ops.rms_norm(x, w, s.t, s.c, 1e-5, out);
                       return Widen(out);
                     }});
    cases.push_back({"swiglu", shape, 1e-11, [s](const Backend& b) -> Out {
                       if (!b.ops.swiglu) return std::nullopt;
                       auto g = RandomNormal(s.t * s.c, 16, 3), u = RandomNormal(s.t * s.c, 17);
                       std::vector<float> out(g.size());
                       b.ops.swiglu(g, u, out);
                       return Widen(out);
                     }});
    // Logits of a realistic spread (several nats), targets spread over the vocabulary.
    cases.push_back({"log_sum_exp", shape, 1e-12, [s](const Backend& b) -> Out {
                       if (!b.ops.log_sum_exp) return std::nullopt;
                       auto l = RandomNormal(s.t * s.c, 18, 4);
                       std::vector<float> out(s.t);
                       b.ops.log_sum_exp(l, s.t, s.c, out);
                       return Widen(out);
                     }});
    cases.push_back({"softmax", shape, 1e-11, [s](const Backend& b) -> Out {
                       if (!b.ops.softmax) return std::nullopt;
                       auto l = RandomNormal(s.t * s.c, 19, 4);
                       std::vector<float> out(l.size());
                       b.ops.softmax(l, s.t, s.c, out);
                       return Widen(out);
                     }});
    cases.push_back({"token_logprobs", shape, 1e-11, [s](const Backend& b) -> Out {
                       if (!b.ops.token_logprobs) return std::nullopt;
                       auto l = RandomNormal(s.t * s.c, 20, 4);
                       std::vector<int32_t> targets(s.t);
                       for (int64_t i = 0; i < s.t; ++i) targets[i] = (i * 7919) % s.c;
                       std::vector<float> out(s.t);
                       b.ops.token_logprobs(l, targets, s.t, s.c, out);
                       return Widen(out);
                     }});
    cases.push_back({"embedding", shape, 0, [s](const Backend& b) -> Out {
                       if (!b.ops.embedding) return std::nullopt;
                       const int64_t v = 37;
                       auto table = RandomNormal(v * s.c, 21);
                       std::vector<int32_t> ids(s.t);
                       for (int64_t i = 0; i < s.t; ++i) ids[i] = (i * 13 + 5) % v;
                       std::vector<float> out(s.t * s.c);
                       b.ops.embedding(table, ids, s.c, out);
                       return Widen(out);
                     }});
  }
  struct Thd {
    int64_t t, h, d;
  };
  for (const Thd s : {Thd{1, 1, 2}, Thd{5, 3, 8}, Thd{2, 9, 64}}) {
    for (const auto layout :
         {kernels::RopeLayout::kInterleaved, kernels::RopeLayout::kRotateHalf}) {
      const std::string shape =
          Name({{"t", s.t}, {"h", s.h}, {"d", s.d}}) +
          (layout == kernels::RopeLayout::kInterleaved ? "_interleaved" : "_rotate_half");
      cases.push_back({"rope", shape, 1e-11, [s, layout](const Backend& b) -> Out {
                         if (!b.ops.rope) return std::nullopt;
                         auto x = RandomNormal(s.t * s.h * s.d, 22);
                         std::vector<int32_t> pos(s.t);
                         for (int64_t i = 0; i < s.t; ++i)
                           pos[i] = static_cast<int32_t>(3 + 97 * i);
                         std::vector<double> inv_freq(s.d / 2);
                         kernels::ref::RopeInvFreq(s.d, 10000, {}, inv_freq);
                         b.ops.rope(x, pos, s.t, s.h, s.d, inv_freq, layout);
                         return Widen(x);
                       }});
    }
  }
}

// Kept whole: a table of shapes and one case builder per attention variant.
void AddAttention(std::vector<OpCase>& cases) {
  struct A {
    int64_t t, h, hkv, d, s;
  };
  for (const A a : {A{1, 1, 1, 4, 1}, A{3, 4, 2, 16, 10}, A{1, 9, 3, 64, 37}, A{5, 6, 6, 8, 5}}) {
    const std::string shape =
        Name({{"t", a.t}, {"h", a.h}, {"hkv", a.hkv}, {"d", a.d}, {"s", a.s}});
    // The last t positions of the cache are the new tokens.
    auto positions = [a] {
      std::vector<int32_t> p(a.t);
      for (int64_t i = 0; i < a.t; ++i) p[i] = static_cast<int32_t>(a.s - a.t + i);
      return p;
    };
    cases.push_back({"causal_attention", shape, 1e-11, [a, positions](const Backend& b) -> Out {
                       if (!b.ops.causal_attention) return std::nullopt;
                       auto q = RandomNormal(a.t * a.h * a.d, 23),
                            k = RandomNormal(a.s * a.hkv * a.d, 24),
                            v = RandomNormal(a.s * a.hkv * a.d, 25);
                       std::vector<float> out(q.size());
                       b.ops.causal_attention(q, k, v, positions(), a.t, a.h, a.hkv, a.d, a.s, out);
                       return Widen(out);
                     }});
    for (const int64_t bs : {int64_t{1}, int64_t{4}, int64_t{16}}) {
      // The sequence's blocks scattered over a larger pool, in a shuffled order.
      const int64_t nblocks = (a.s + bs - 1) / bs, pool_blocks = 2 * nblocks + 1;
      auto table = [nblocks, pool_blocks] {
        std::vector<int32_t> t(nblocks);
        for (int64_t i = 0; i < nblocks; ++i) {
          t[i] = static_cast<int32_t>((i * 2 + 1) % pool_blocks);
        }
        return t;
      };
      cases.push_back({"paged_attention", shape + "_bs" + std::to_string(bs), 1e-11,
                       [a, bs, pool_blocks, table, positions](const Backend& b) -> Out {
                         if (!b.ops.paged_attention) return std::nullopt;
                         const int64_t row = a.hkv * a.d;
                         auto q = RandomNormal(a.t * a.h * a.d, 26),
                              k = RandomNormal(pool_blocks * bs * row, 27),
                              v = RandomNormal(pool_blocks * bs * row, 28);
                         std::vector<float> out(q.size());
                         b.ops.paged_attention(q, k, v, table(), bs, positions(), a.t, a.h, a.hkv,
                                               a.d, out);
                         return Widen(out);
                       }});
    }
  }
  // A draft tree after `prefix` committed positions: a root with two children, one with a child.
  for (const A a : {A{4, 4, 2, 16, 9}, A{4, 3, 1, 64, 33}}) {
    const std::string shape = Name({{"t", a.t}, {"h", a.h}, {"hkv", a.hkv}, {"d", a.d}});
    cases.push_back(
        {"tree_attention", shape, 1e-11, [a](const Backend& b) -> Out {
           if (!b.ops.tree_attention) return std::nullopt;
           const int64_t bs = 4, prefix = a.s - a.t;
           const int64_t nblocks = (a.s + bs - 1) / bs;
           std::vector<int32_t> table(nblocks);
           std::iota(table.rbegin(), table.rend(), 0);
           const std::vector<uint64_t> ancestors = {0b0001, 0b0011, 0b0101, 0b1011};
           const int64_t row = a.hkv * a.d;
           auto q = RandomNormal(a.t * a.h * a.d, 29), k = RandomNormal(nblocks * bs * row, 30),
                v = RandomNormal(nblocks * bs * row, 31);
           std::vector<float> out(q.size());
           b.ops.tree_attention(q, k, v, table, bs, prefix, ancestors, a.t, a.h, a.hkv, a.d, out);
           return Widen(out);
         }});
  }
  // The trainer's packed (varlen) causal attention: sequences of odd lengths back to back.
  struct Varlen {
    std::vector<int64_t> offsets;
    int64_t h, hkv, d;
  };
  for (const Varlen& a :
       {Varlen{{0, 1}, 1, 1, 4}, Varlen{{0, 5, 12}, 4, 2, 8}, Varlen{{0, 3, 4, 37}, 6, 3, 64}}) {
    const int64_t t = a.offsets.back();
    const std::string shape = Name(
        {{"t", t}, {"seqs", std::ssize(a.offsets) - 1}, {"h", a.h}, {"hkv", a.hkv}, {"d", a.d}});
    cases.push_back({"varlen_attention", shape, 1e-10, [=](const Backend& b) -> Out {
                       if (!b.ops.varlen_attention) return std::nullopt;
                       auto q = RandomF64(t * a.h * a.d, 32), k = RandomF64(t * a.hkv * a.d, 33),
                            v = RandomF64(t * a.hkv * a.d, 34);
                       std::vector<double> out(q.size());
                       b.ops.varlen_attention(q, k, v, a.offsets, a.h, a.hkv, a.d, out);
                       return out;
                     }});
  }
}

void AddLossAndSampling(std::vector<OpCase>& cases) {
  struct S {
    double temperature;
    int64_t top_k;
    double top_p, min_p;
    const char* name;
  };
  for (const int64_t v : {int64_t{7}, int64_t{101}, int64_t{4099}}) {
    for (const S s :
         {S{1.0, 0, 1.0, 0.0, "plain"}, S{0.7, 10, 1.0, 0.0, "top_k"}, S{1.0, 0, 0.9, 0.0, "top_p"},
          S{1.3, 0, 1.0, 0.05, "min_p"}, S{0.6, 50, 0.95, 0.02, "all"}}) {
      cases.push_back({"sampling_probs", Name({{"v", v}}) + "_" + s.name, 1e-10,
                       [v, s](const Backend& b) -> Out {
                         if (!b.ops.sampling_probs) return std::nullopt;
                         auto logits = RandomNormal(v, 35, 3);
                         std::vector<float> probs(v);
                         b.ops.sampling_probs(logits, s.temperature, s.top_k, s.top_p, s.min_p,
                                              probs);
                         return Widen(probs);
                       }});
    }
  }
  for (const auto& nv : {std::pair<int64_t, int64_t>{1, 2}, {3, 17}, {4, 1031}}) {
    const int64_t n = nv.first, v = nv.second;  // named copies: lambdas capture them
    cases.push_back(
        {"logprob_entropy", Name({{"n", n}, {"v", v}}), 1e-10, [n, v](const Backend& b) -> Out {
           if (!b.ops.logprob_entropy) return std::nullopt;
           auto z = RandomF64(n * v, 36, 3);
           std::vector<int32_t> targets(n);
           for (int64_t i = 0; i < n; ++i) targets[i] = static_cast<int32_t>((i * 5) % v);
           std::vector<double> lp(n), ent(n);
           b.ops.logprob_entropy(z, targets, n, v, lp, ent);
           lp.insert(lp.end(), ent.begin(), ent.end());
           return lp;
         }});
  }
  for (const int64_t n : {int64_t{1}, int64_t{33}, int64_t{4097}}) {
    cases.push_back({"adamw", Name({{"n", n}}), 1e-12, [n](const Backend& b) -> Out {
                       if (!b.ops.adamw) return std::nullopt;
                       auto p = RandomNormal(n, 37), g = RandomNormal(n, 38, 0.1f);
                       b.ops.adamw(p, g, 5, 1e-3, 0.01);
                       return Widen(p);
                     }});
  }
}

// Central differences of L(x) = Σ dy ⊙ f(x) in f64, over every element of each input in turn.
std::vector<double> CentralDifferences(
    std::vector<std::vector<double>> inputs,
    const std::function<double(const std::vector<std::vector<double>>&)>& loss) {
  std::vector<double> grad;
  const double h = 1e-5;
  for (auto& in : inputs) {
    for (double& x : in) {
      const double keep = x;
      x = keep + h;
      const double up = loss(inputs);
      x = keep - h;
      const double down = loss(inputs);
      x = keep;
      grad.push_back((up - down) / (2 * h));
    }
  }
  return grad;
}

double Dot(std::span<const double> a, std::span<const double> b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

// Kept whole: a table of gradient cases, each a few lines.
void AddGradients(std::vector<GradCase>& cases) {
  namespace ops = trainer::ops;
  for (const auto& tc : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {2, 33}}) {
    const int64_t t = tc.first, c = tc.second;
    const auto x = RandomF64(t * c, 40), w = RandomF64(c, 41), dy = RandomF64(t * c, 42);
    cases.push_back({"rms_norm", Name({{"t", t}, {"c", c}}), 1e-8,
                     [=](const Backend& b) -> Out {
                       if (!b.grads.rms_norm) return std::nullopt;
                       std::vector<double> dx(x.size()), dw(w.size());
                       b.grads.rms_norm(x, w, dy, t, c, 1e-5, dx, dw);
                       dx.insert(dx.end(), dw.begin(), dw.end());
                       return dx;
                     },
                     [=] {
                       return CentralDifferences({x, w}, [&](const auto& in) {
                         std::vector<double> y(x.size()), rstd(t);
                         ops::RmsNormForward(in[0].data(), in[1].data(), t, c, 1e-5, y.data(),
                                             rstd.data());
                         return Dot(y, dy);
                       });
                     }});
  }
  for (const int64_t n : {int64_t{1}, int64_t{11}}) {
    const auto g = RandomF64(n, 43, 2), u = RandomF64(n, 44), dy = RandomF64(n, 45);
    cases.push_back({"swiglu", Name({{"n", n}}), 1e-8,
                     [=](const Backend& b) -> Out {
                       if (!b.grads.swiglu) return std::nullopt;
                       std::vector<double> dg(n), du(n);
                       b.grads.swiglu(g, u, dy, dg, du);
                       dg.insert(dg.end(), du.begin(), du.end());
                       return dg;
                     },
                     [=] {
                       return CentralDifferences({g, u}, [&](const auto& in) {
                         std::vector<double> y(n);
                         ops::SwiGluForward(in[0].data(), in[1].data(), n, y.data());
                         return Dot(y, dy);
                       });
                     }});
  }
  for (const auto& shape : {std::tuple{std::vector<int64_t>{0, 2}, 1, 1, 2},
                            std::tuple{std::vector<int64_t>{0, 3, 7}, 4, 2, 4}}) {
    const std::vector<int64_t>& offsets = std::get<0>(shape);
    const int64_t h = std::get<1>(shape), hkv = std::get<2>(shape), d = std::get<3>(shape);
    const int64_t t = offsets.back();
    const auto q = RandomF64(t * h * d, 46), k = RandomF64(t * hkv * d, 47),
               v = RandomF64(t * hkv * d, 48), dy = RandomF64(t * h * d, 49);
    cases.push_back({"attention", Name({{"t", t}, {"h", h}, {"hkv", hkv}, {"d", d}}), 1e-8,
                     [=](const Backend& b) -> Out {
                       if (!b.grads.attention) return std::nullopt;
                       std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
                       b.grads.attention(q, k, v, dy, offsets, h, hkv, d, dq, dk, dv);
                       dq.insert(dq.end(), dk.begin(), dk.end());
                       dq.insert(dq.end(), dv.begin(), dv.end());
                       return dq;
                     },
                     [=] {
                       const std::vector<int64_t> no_prefix(offsets.size() - 1, -1);
                       return CentralDifferences({q, k, v}, [&](const auto& in) {
                         std::vector<double> y(q.size());
                         ops::AttentionForward(in[0].data(), in[1].data(), in[2].data(), offsets,
                                               no_prefix, h, hkv, d, y.data(), nullptr);
                         return Dot(y, dy);
                       });
                     }});
  }
  for (const auto& nv : {std::pair<int64_t, int64_t>{1, 3}, {2, 7}}) {
    const int64_t n = nv.first, v = nv.second;
    const auto z = RandomF64(n * v, 50, 2), g_lp = RandomF64(n, 51), g_ent = RandomF64(n, 52);
    std::vector<int32_t> targets(n);
    for (int64_t i = 0; i < n; ++i) targets[i] = static_cast<int32_t>((2 * i + 1) % v);
    cases.push_back({"logprob_entropy", Name({{"n", n}, {"v", v}}), 1e-8,
                     [=](const Backend& b) -> Out {
                       if (!b.grads.logprob_entropy) return std::nullopt;
                       std::vector<double> dz(z.size());
                       b.grads.logprob_entropy(z, targets, g_lp, g_ent, n, v, dz);
                       return dz;
                     },
                     [=] {
                       return CentralDifferences({z}, [&](const auto& in) {
                         std::vector<double> lp(n), ent(n), lse(n);
                         ops::LogprobEntropyForward(in[0].data(), targets.data(), n, v, lp.data(),
                                                    ent.data(), lse.data());
                         return Dot(lp, g_lp) + Dot(ent, g_ent);
                       });
                     }});
  }
}

}  // namespace

const std::vector<OpCase>& OpCases() {
  static const std::vector<OpCase>* cases = [] {
    auto* c = new std::vector<OpCase>;
    AddMatMuls(*c);
    AddRowOps(*c);
    AddAttention(*c);
    AddLossAndSampling(*c);
    return c;
  }();
  return *cases;
}

const std::vector<GradCase>& GradCases() {
  static const std::vector<GradCase>* cases = [] {
    auto* c = new std::vector<GradCase>;
    AddGradients(*c);
    return c;
  }();
  return *cases;
}

}  // namespace laminar::testing
