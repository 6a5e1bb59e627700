// Central finite differences in f64 for the trainer's gradient tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/test_util.h"

namespace laminar::trainer::testing {

using ::laminar::testing::RandomUniform;  // the gradient checks' inputs

// Compares grad[i] with (f(x + h e_i) − f(x − h e_i)) / 2h for every i (or every `stride`-th),
// where f reads `x` by reference. Fails with the first index whose error exceeds
// tol · max(1, |numeric|).
inline void ExpectGradientMatches(std::vector<double>& x, const std::function<double()>& f,
                                  const std::vector<double>& grad, const std::string& what,
                                  double tol = 1e-6, size_t stride = 1, double h = 1e-5) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  double max_err = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(numeric - grad[i]) / std::max(1.0, std::abs(numeric));
    max_err = std::max(max_err, err);
    ASSERT_LE(err, tol) << what << "[" << i << "]: analytic " << grad[i] << ", numeric " << numeric;
  }
  ::testing::Test::RecordProperty("max_rel_err_" + what, std::to_string(max_err));
}

inline double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace laminar::trainer::testing
