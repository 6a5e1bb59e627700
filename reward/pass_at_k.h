// pass@k: the chance that at least one of k samples of a problem is correct, estimated without
// bias from n >= k samples per problem (Chen et al. 2021, "Evaluating Large Language Models
// Trained on Code", §2.1). `laminar eval` reports it for before/after comparisons.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"

namespace laminar::reward {

// The unbiased pass@k of one problem with `n` samples of which `c` are correct:
//   pass@k = 1 - C(n - c, k) / C(n, k),
// computed as 1 - prod_{i = n-c+1..n} (1 - k / i) in double precision, which never forms the
// binomials (they overflow for n in the hundreds); 1 when n - c < k (every k-subset holds a correct
// sample). Reference: Chen et al. 2021, §2.1 and the numpy snippet of its Figure 3.
// Returns a value in [0, 1]: 0 when c = 0, 1 when c = n, c / n when k = 1.
// Errors: InvalidArgument naming the values unless 1 <= k <= n and 0 <= c <= n.
StatusOr<double> PassAtK(int64_t n, int64_t c, int64_t k);

// The mean of PassAtK(num_samples[i], num_correct[i], k) over problems i (the benchmark's pass@k).
//   num_samples  [P]  samples of each problem (each >= k)
//   num_correct  [P]  correct samples of each problem
// Errors: InvalidArgument when the spans differ in length or are empty, or PassAtK's error for
// problem i (the message names i).
StatusOr<double> MeanPassAtK(std::span<const int64_t> num_samples,
                             std::span<const int64_t> num_correct, int64_t k);

}  // namespace laminar::reward
