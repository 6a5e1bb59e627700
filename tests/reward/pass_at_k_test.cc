// The unbiased pass@k estimator against hand-computed values and the binomial definition.
#include "reward/pass_at_k.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace laminar::reward {
namespace {

double Must(StatusOr<double> v) {
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::nan("");
}

// C(n, k) exactly for the small n of the tests.
double Binomial(int64_t n, int64_t k) {
  if (k < 0 || k > n) return 0;
  double r = 1;
  for (int64_t i = 1; i <= k; ++i) r = r * static_cast<double>(n - k + i) / static_cast<double>(i);
  return r;
}

TEST(PassAtKTest, HandComputedValues) {
  EXPECT_DOUBLE_EQ(Must(PassAtK(5, 2, 1)), 0.4);                  // c / n
  EXPECT_DOUBLE_EQ(Must(PassAtK(10, 3, 5)), 1.0 - 21.0 / 252.0);  // 1 - C(7,5)/C(10,5)
  EXPECT_DOUBLE_EQ(Must(PassAtK(4, 1, 2)), 0.5);                  // 1 - C(3,2)/C(4,2)
  EXPECT_EQ(Must(PassAtK(10, 0, 5)), 0.0);                        // none correct
  EXPECT_EQ(Must(PassAtK(10, 10, 5)), 1.0);                       // all correct
  EXPECT_EQ(Must(PassAtK(10, 6, 5)), 1.0);                        // n - c < k
  EXPECT_EQ(Must(PassAtK(1, 1, 1)), 1.0);
  EXPECT_EQ(Must(PassAtK(1, 0, 1)), 0.0);
  EXPECT_DOUBLE_EQ(Must(PassAtK(8, 1, 8)), 1.0);  // k = n: any correct
}

TEST(PassAtKTest, EqualsTheBinomialDefinition) {
  for (int64_t n = 1; n <= 20; ++n) {
    for (int64_t c = 0; c <= n; ++c) {
      for (int64_t k = 1; k <= n; ++k) {
        const double want = 1.0 - Binomial(n - c, k) / Binomial(n, k);
        EXPECT_NEAR(Must(PassAtK(n, c, k)), want, 1e-12) << "n=" << n << " c=" << c << " k=" << k;
      }
    }
  }
}

TEST(PassAtKTest, StableForLargeN) {
  // C(1000, 500) overflows no double here: the product form stays in [0, 1].
  const double p = Must(PassAtK(1000, 3, 500));
  EXPECT_NEAR(p, 1.0 - (1.0 - 500.0 / 998) * (1.0 - 500.0 / 999) * (1.0 - 500.0 / 1000), 1e-12);
  EXPECT_GE(p, 0.0);
  EXPECT_LE(p, 1.0);
  EXPECT_DOUBLE_EQ(Must(PassAtK(1000, 250, 1)), 0.25);
}

TEST(PassAtKTest, RejectsBadArguments) {
  auto r = PassAtK(4, 1, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("k = 5"), std::string::npos) << r.status();
  EXPECT_FALSE(PassAtK(4, 1, 0).ok());
  EXPECT_FALSE(PassAtK(4, 5, 1).ok());
  EXPECT_FALSE(PassAtK(4, -1, 1).ok());
}

TEST(PassAtKTest, MeanOverProblems) {
  const std::vector<int64_t> n = {5, 10, 4}, c = {2, 3, 0};
  EXPECT_DOUBLE_EQ(Must(MeanPassAtK(n, c, 1)), (0.4 + 0.3 + 0.0) / 3);
  const double p4 =
      (1 - Binomial(3, 4) / Binomial(5, 4) + 1 - Binomial(7, 4) / Binomial(10, 4)) / 3;
  EXPECT_NEAR(Must(MeanPassAtK(n, c, 4)), p4, 1e-12);
  auto bad = MeanPassAtK(n, c, 5);  // problem 2 has 4 samples only
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("problem 2"), std::string::npos) << bad.status();
  EXPECT_FALSE(MeanPassAtK({}, {}, 1).ok());
  const std::vector<int64_t> short_c = {1};
  EXPECT_FALSE(MeanPassAtK(n, short_c, 1).ok());
}

}  // namespace
}  // namespace laminar::reward
