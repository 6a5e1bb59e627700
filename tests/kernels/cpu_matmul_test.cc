// oneDNN matmul against the reference at shapes 1, primes, non-multiples of vector widths and a
// realistic SmolLM2 projection.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/reference/ops.h"
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

TEST(CpuMatMulTest, EqualsReference) {
  struct Case {
    int64_t m, n, k;
    bool bias;
  };
  for (Case c : {Case{1, 1, 1, false}, Case{1, 7, 13, true}, Case{3, 17, 31, false},
                 Case{8, 576, 576, true}, Case{5, 1536, 576, false}, Case{64, 67, 129, true}}) {
    auto x = Random(c.m * c.k, 1), w = Random(c.n * c.k, 2), b = Random(c.bias ? c.n : 0, 3);
    std::vector<float> want(c.m * c.n), got(c.m * c.n);
    ref::MatMul(x, w, b, c.m, c.n, c.k, want);
    ASSERT_TRUE(cpu::MatMul(x, w, b, c.m, c.n, c.k, got).ok());
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
}

}  // namespace
}  // namespace laminar::kernels
