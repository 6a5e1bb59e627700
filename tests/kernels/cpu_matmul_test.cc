// oneDNN matmul against the reference at shapes 1, primes, non-multiples of vector widths and a
// realistic SmolLM2 projection; the general GEMM (transposes, leading dimensions, accumulation,
// pool splits) against the reference loops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/reference/gemm.h"
#include "kernels/reference/ops.h"
#include "kernels/tolerance.h"
#include "tests/test_util.h"

namespace laminar::kernels {
namespace {

using laminar::testing::RandomNormal;
TEST(CpuMatMulTest, EqualsReference) {
  struct Case {
    int64_t m, n, k;
    bool bias;
  };
  for (Case c : {Case{1, 1, 1, false}, Case{1, 7, 13, true}, Case{3, 17, 31, false},
                 Case{8, 576, 576, true}, Case{5, 1536, 576, false}, Case{64, 67, 129, true}}) {
    auto x = RandomNormal(c.m * c.k, 1), w = RandomNormal(c.n * c.k, 2),
         b = RandomNormal(c.bias ? c.n : 0, 3);
    std::vector<float> want(c.m * c.n), got(c.m * c.n);
    ref::MatMul(x, w, b, c.m, c.n, c.k, want);
    ASSERT_TRUE(cpu::MatMul(x, w, b, c.m, c.n, c.k, got).ok());
    std::vector<float> onednn(c.m * c.n);
    ASSERT_TRUE(cpu::OnednnMatMulF32(x, w, b, c.m, c.n, c.k, onednn).ok());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_LE(std::abs(double(onednn[i]) - want[i]),
                kMatMulF32.abs + kMatMulF32.rel * std::abs(want[i]))
          << "oneDNN M=" << c.m << " N=" << c.n << " K=" << c.k << " at " << i;
    }
    double max_err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      double err = std::abs(double(got[i]) - want[i]);
      max_err = std::max(max_err, err);
      ASSERT_LE(err, kMatMulF32.abs + kMatMulF32.rel * std::abs(want[i]))
          << "M=" << c.m << " N=" << c.n << " K=" << c.k << " at " << i;
    }
    RecordProperty("max_abs_err_" + std::to_string(c.n), std::to_string(max_err));
  }
}

TEST(CpuMatMulTest, RejectsMismatchedSizes) {
  std::vector<float> x(6), w(6), out(3);
  EXPECT_FALSE(cpu::MatMul(x, w, {}, 2, 2, 3, out).ok());
  EXPECT_FALSE(cpu::OnednnMatMulF32(x, w, {}, 2, 2, 3, out).ok());
}

TEST(CpuGemmTest, EqualsReferenceForEveryTransposeAndSplit) {
  ThreadPool pool(2);
  struct Case {
    int64_t m, n, k;
  };
  for (Case c :
       {Case{1, 1, 1}, Case{3, 17, 31}, Case{67, 5, 129}, Case{96, 576, 64}, Case{577, 64, 96}}) {
    for (int variant = 0; variant < 8; ++variant) {
      bool ta = variant & 1, tb = variant & 2;
      float beta = (variant & 4) ? 1.f : 0.f;
      // Padded leading dimensions: a row of the stored matrix is followed by 3 unused floats.
      int64_t lda = (ta ? c.m : c.k) + 3, ldb = (tb ? c.k : c.n) + 3, ldc = c.n + 2;
      auto a = RandomNormal((ta ? c.k : c.m) * lda, 1), b = RandomNormal((tb ? c.n : c.k) * ldb, 2);
      auto want = RandomNormal(c.m * ldc, 3), got = want;
      ref::Gemm<float>(c.m, c.n, c.k, 0.5, a.data(), lda, ta, b.data(), ldb, tb, beta, want.data(),
                       ldc);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        auto out = got;
        ASSERT_TRUE(cpu::Gemm(c.m, c.n, c.k, 0.5f, {a.data(), lda, ta}, {b.data(), ldb, tb}, beta,
                              out.data(), ldc, p)
                        .ok());
        for (int64_t i = 0; i < c.m; ++i) {
          for (int64_t j = 0; j < c.n; ++j) {
            double w = want[i * ldc + j], g = out[i * ldc + j];
            ASSERT_LE(std::abs(g - w), kMatMulF32.abs + kMatMulF32.rel * std::abs(w))
                << "M=" << c.m << " N=" << c.n << " K=" << c.k << " variant " << variant << " at ("
                << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

TEST(CpuGemmTest, BetaZeroIgnoresNanInOutputAndBadLeadingDimensionIsAnError) {
  std::vector<float> a{1, 2}, b{3, 4}, c{NAN};
  ASSERT_TRUE(cpu::Gemm(1, 1, 2, 1.f, {a.data(), 2}, {b.data(), 1}, 0.f, c.data(), 1).ok());
  EXPECT_EQ(c[0], 11.f);
  EXPECT_FALSE(cpu::Gemm(1, 1, 2, 1.f, {a.data(), 1}, {b.data(), 1}, 0.f, c.data(), 1).ok());
}

}  // namespace
}  // namespace laminar::kernels
