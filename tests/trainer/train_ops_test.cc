// Every backward op of the trainer against central finite differences in f64 on small shapes, and
// the f32 ops (oneDNN, vectorized softmax) against the f64 ones.
#include "trainer/train_ops.h"

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "tests/trainer/grad_check.h"

namespace laminar::trainer::ops {
namespace {

using testing::Dot;
using testing::ExpectGradientMatches;
using testing::RandomUniform;

TEST(TrainOpsGradTest, RmsNorm) {
  const int64_t t = 3, c = 7;
  auto x = RandomUniform(t * c, 1), w = RandomUniform(c, 2), r = RandomUniform(t * c, 3);
  std::vector<double> y(t * c), rstd(t), dx(t * c), dw(c, 0.0);
  auto loss = [&] {
    RmsNormForward(x.data(), w.data(), t, c, 1e-5, y.data(), rstd.data());
    return Dot(y, r);
  };
  loss();
  RmsNormBackward(x.data(), w.data(), rstd.data(), r.data(), t, c, dx.data(), dw.data());
  ExpectGradientMatches(x, loss, dx, "rmsnorm_dx");
  ExpectGradientMatches(w, loss, dw, "rmsnorm_dw");
}

TEST(TrainOpsGradTest, RopeBothLayouts) {
  const int64_t t = 4, h = 3, d = 6;
  std::vector<int32_t> pos{0, 1, 5, 2};
  std::vector<double> inv_freq{1.0, 0.3, 0.01};
  auto table = MakeRopeTable(pos, inv_freq);
  for (auto layout : {kernels::RopeLayout::kInterleaved, kernels::RopeLayout::kRotateHalf}) {
    auto x = RandomUniform(t * h * d, 4), r = RandomUniform(t * h * d, 5);
    auto loss = [&] {
      auto y = x;
      Rope(y.data(), table, t, h, d, layout, false);
      return Dot(y, r);
    };
    auto dx = r;
    Rope(dx.data(), table, t, h, d, layout, true);
    ExpectGradientMatches(x, loss, dx, "rope_dx");
  }
}

TEST(TrainOpsGradTest, SwiGlu) {
  const int64_t n = 11;
  auto g = RandomUniform(n, 6, 3.0), u = RandomUniform(n, 7), r = RandomUniform(n, 8);
  std::vector<double> y(n), dg(n), du(n);
  auto loss = [&] {
    SwiGluForward(g.data(), u.data(), n, y.data());
    return Dot(y, r);
  };
  SwiGluBackward(g.data(), u.data(), r.data(), n, dg.data(), du.data());
  ExpectGradientMatches(g, loss, dg, "swiglu_dg");
  ExpectGradientMatches(u, loss, du, "swiglu_du");
}

TEST(TrainOpsGradTest, CausalGroupedQueryAttentionOverPackedSequences) {
  const int64_t h = 4, hkv = 2, d = 3;
  std::vector<int64_t> offsets{0, 3, 3, 8};  // lengths 3, 0 and 5
  const int64_t t = offsets.back();
  auto q = RandomUniform(t * h * d, 9), k = RandomUniform(t * hkv * d, 10);
  auto v = RandomUniform(t * hkv * d, 11), r = RandomUniform(t * h * d, 12);
  std::vector<double> out(t * h * d), dq(q.size()), dk(k.size()), dv(v.size());
  auto loss = [&] {
    AttentionForward(q.data(), k.data(), v.data(), offsets, {}, h, hkv, d, out.data(), nullptr);
    return Dot(out, r);
  };
  AttentionBackward(q.data(), k.data(), v.data(), r.data(), offsets, {}, h, hkv, d, dq.data(),
                    dk.data(), dv.data(), nullptr);
  ExpectGradientMatches(q, loss, dq, "attention_dq");
  ExpectGradientMatches(k, loss, dk, "attention_dk");
  ExpectGradientMatches(v, loss, dv, "attention_dv");
}

// Shared prefixes: sequence 0 is the prefix of 1 and 3; 2 is empty; 4 stands alone.
TEST(TrainOpsGradTest, AttentionWithSharedPrefixes) {
  const int64_t h = 4, hkv = 2, d = 3;
  std::vector<int64_t> offsets{0, 4, 7, 7, 12, 15};
  std::vector<int64_t> prefix{-1, 0, -1, 0, -1};
  const int64_t t = offsets.back();
  auto q = RandomUniform(t * h * d, 31), k = RandomUniform(t * hkv * d, 32);
  auto v = RandomUniform(t * hkv * d, 33), r = RandomUniform(t * h * d, 34);
  std::vector<double> out(t * h * d), dq(q.size()), dk(k.size()), dv(v.size());
  auto loss = [&] {
    AttentionForward(q.data(), k.data(), v.data(), offsets, prefix, h, hkv, d, out.data(), nullptr);
    return Dot(out, r);
  };
  AttentionBackward(q.data(), k.data(), v.data(), r.data(), offsets, prefix, h, hkv, d, dq.data(),
                    dk.data(), dv.data(), nullptr);
  ExpectGradientMatches(q, loss, dq, "prefix_attention_dq");
  ExpectGradientMatches(k, loss, dk, "prefix_attention_dk");
  ExpectGradientMatches(v, loss, dv, "prefix_attention_dv");
}

// A sequence after a shared prefix attends exactly as the prefix and the sequence written out as
// one sequence: the outputs at its rows are equal (f32, with the pool, query blocks spanned).
TEST(TrainOpsTest, SharedPrefixAttentionEqualsTheConcatenatedSequence) {
  const int64_t h = 6, hkv = 2, d = 16, np = 70, n1 = 90, n2 = 5;
  std::vector<int64_t> offsets{0, np, np + n1, np + n1 + n2}, prefix{-1, 0, 0};
  const int64_t t = offsets.back();
  auto to_f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  auto q = to_f(RandomUniform(t * h * d, 35)), k = to_f(RandomUniform(t * hkv * d, 36));
  auto v = to_f(RandomUniform(t * hkv * d, 37));
  ThreadPool pool(2);
  std::vector<float> shared(t * h * d);
  AttentionForward(q.data(), k.data(), v.data(), offsets, prefix, h, hkv, d, shared.data(), &pool);
  // Unshared: [prefix, seq 1] and [prefix, seq 2] as two whole sequences.
  auto rows = [](const std::vector<float>& x, int64_t width, int64_t from, int64_t n) {
    return std::vector<float>(x.begin() + from * width, x.begin() + (from + n) * width);
  };
  for (int which = 1; which <= 2; ++which) {
    const int64_t from = offsets[which], n = offsets[which + 1] - from;
    auto cat = [&](const std::vector<float>& x, int64_t width) {
      auto a = rows(x, width, 0, np), b = rows(x, width, from, n);
      a.insert(a.end(), b.begin(), b.end());
      return a;
    };
    auto qc = cat(q, h * d), kc = cat(k, hkv * d), vc = cat(v, hkv * d);
    std::vector<int64_t> whole{0, np + n};
    std::vector<float> out((np + n) * h * d);
    AttentionForward(qc.data(), kc.data(), vc.data(), whole, {}, h, hkv, d, out.data(), nullptr);
    for (int64_t i = 0; i < n * h * d; ++i) {
      ASSERT_NEAR(shared[from * h * d + i], out[np * h * d + i], 1e-5) << which << ": " << i;
    }
    for (int64_t i = 0; i < np * h * d; ++i) ASSERT_NEAR(shared[i], out[i], 1e-5) << i;
  }
}

TEST(TrainOpsGradTest, LogprobAndEntropy) {
  const int64_t n = 3, vocab = 9;
  auto z = RandomUniform(n * vocab, 13, 4.0);
  std::vector<int32_t> targets{2, -1, 8};
  auto g_lp = RandomUniform(n, 14), g_ent = RandomUniform(n, 15);
  std::vector<double> lp(n), ent(n), lse(n);
  auto loss = [&] {
    LogprobEntropyForward(z.data(), targets.data(), n, vocab, lp.data(), ent.data(), lse.data());
    return Dot(lp, g_lp) + Dot(ent, g_ent);
  };
  loss();
  EXPECT_EQ(lp[1], 0.0);
  auto dz = z;
  LogprobEntropyBackward(dz.data(), targets.data(), lse.data(), ent.data(), g_lp.data(),
                         g_ent.data(), n, vocab);
  ExpectGradientMatches(z, loss, dz, "logprob_entropy_dz");
}

// The f32 path (oneDNN GEMMs, vectorized softmax) equals the f64 reference path.
TEST(TrainOpsTest, FloatAttentionAndHeadEqualDouble) {
  const int64_t h = 6, hkv = 2, d = 16;
  std::vector<int64_t> offsets{0, 37, 200};  // the second spans three query blocks
  const int64_t t = offsets.back();
  auto qd = RandomUniform(t * h * d, 16), kd = RandomUniform(t * hkv * d, 17);
  auto vd = RandomUniform(t * hkv * d, 18), rd = RandomUniform(t * h * d, 19);
  auto to_f = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  auto qf = to_f(qd), kf = to_f(kd), vf = to_f(vd), rf = to_f(rd);
  std::vector<double> od(t * h * d), dqd(qd.size()), dkd(kd.size()), dvd(vd.size());
  std::vector<float> of(t * h * d), dqf(qd.size()), dkf(kd.size()), dvf(vd.size());
  ThreadPool pool(2);
  AttentionForward(qd.data(), kd.data(), vd.data(), offsets, {}, h, hkv, d, od.data(), nullptr);
  AttentionForward(qf.data(), kf.data(), vf.data(), offsets, {}, h, hkv, d, of.data(), &pool);
  AttentionBackward(qd.data(), kd.data(), vd.data(), rd.data(), offsets, {}, h, hkv, d, dqd.data(),
                    dkd.data(), dvd.data(), nullptr);
  AttentionBackward(qf.data(), kf.data(), vf.data(), rf.data(), offsets, {}, h, hkv, d, dqf.data(),
                    dkf.data(), dvf.data(), &pool);
  auto expect_near = [](const std::vector<float>& f, const std::vector<double>& dd,
                        const char* what) {
    for (size_t i = 0; i < f.size(); ++i) {
      ASSERT_NEAR(f[i], dd[i], 1e-4 * std::max(1.0, std::abs(dd[i]))) << what << "[" << i << "]";
    }
  };
  expect_near(of, od, "out");
  expect_near(dqf, dqd, "dq");
  expect_near(dkf, dkd, "dk");
  expect_near(dvf, dvd, "dv");

  const int64_t n = 5, vocab = 1000;
  auto zd = RandomUniform(n * vocab, 20, 8.0);
  auto zf = to_f(zd);
  std::vector<int32_t> targets{0, 999, 17, -1, 500};
  std::vector<double> lpd(n), entd(n), lsed(n);
  std::vector<float> lpf(n), entf(n), lsef(n);
  LogprobEntropyForward(zd.data(), targets.data(), n, vocab, lpd.data(), entd.data(), lsed.data());
  LogprobEntropyForward(zf.data(), targets.data(), n, vocab, lpf.data(), entf.data(), lsef.data());
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(lpf[i], lpd[i], 2e-5) << i;
    EXPECT_NEAR(entf[i], entd[i], 2e-5) << i;
  }
}

}  // namespace
}  // namespace laminar::trainer::ops
