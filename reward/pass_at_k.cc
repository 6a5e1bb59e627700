// The unbiased pass@k estimator (Chen et al. 2021, §2.1).
#include "reward/pass_at_k.h"

#include <string>

namespace laminar::reward {

StatusOr<double> PassAtK(int64_t n, int64_t c, int64_t k) {
  if (k < 1 || k > n) {
    return InvalidArgumentError("pass@k: k = " + std::to_string(k) + " must be in [1, n = " +
                                std::to_string(n) + "] (n: samples per problem)");
  }
  if (c < 0 || c > n) {
    return InvalidArgumentError("pass@k: c = " + std::to_string(c) +
                                " correct samples must be in [0, n = " + std::to_string(n) + "]");
  }
  if (n - c < k) return 1.0;
  // The product below equals c / n for k = 1 up to rounding; the exact ratio keeps pass@1 equal to
  // the fraction of correct samples.
  if (k == 1) return static_cast<double>(c) / static_cast<double>(n);
  // C(n-c, k) / C(n, k) = prod_{i=n-c+1..n} (1 - k/i): each factor is in (0, 1].
  double fail = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) {
    fail *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  }
  return 1.0 - fail;
}

StatusOr<double> MeanPassAtK(std::span<const int64_t> num_samples,
                             std::span<const int64_t> num_correct, int64_t k) {
  if (num_samples.size() != num_correct.size()) {
    return InvalidArgumentError("pass@k: " + std::to_string(num_samples.size()) +
                                " sample counts but " + std::to_string(num_correct.size()) +
                                " correct counts");
  }
  if (num_samples.empty()) return InvalidArgumentError("pass@k: no problems");
  double sum = 0;
  for (size_t i = 0; i < num_samples.size(); ++i) {
    LAMINAR_ASSIGN_OR_RETURN(double p, PassAtK(num_samples[i], num_correct[i], k),
                             "problem " + std::to_string(i));
    sum += p;
  }
  return sum / static_cast<double>(num_samples.size());
}

}  // namespace laminar::reward
