// oneDNN sgemm with transposes, leading dimensions, accumulation and pool splits, against the
// reference loops.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/reference/gemm.h"
#include "kernels/tolerance.h"

namespace laminar::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
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
      auto a = Random((ta ? c.k : c.m) * lda, 1), b = Random((tb ? c.n : c.k) * ldb, 2);
      auto want = Random(c.m * ldc, 3), got = want;
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
