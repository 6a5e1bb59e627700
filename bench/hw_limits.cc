// DRAM bandwidth and GEMM peak measurement.
#include "bench/hw_limits.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/matmul.h"

namespace laminar::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sums a range with 8 independent accumulators so the loop is bound by loads, not adds.
float SumRange(const float* p, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += p[i + j];
  }
  for (; i < n; ++i) acc[0] += p[i];
  float s = 0;
  for (float a : acc) s += a;
  return s;
}

}  // namespace

double MeasureDramReadBandwidth(int64_t size_bytes, int repeats, int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t n = size_bytes / static_cast<int64_t>(sizeof(float));
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < repeats; ++r) {
    std::vector<float> partial(static_cast<size_t>(num_threads));
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    int64_t per = (n + num_threads - 1) / num_threads;
    for (int t = 0; t < num_threads; ++t) {
      threads.emplace_back([&, t] {
        int64_t b = t * per, e = std::min(n, b + per);
        if (b < e) partial[t] = SumRange(buf.data() + b, e - b);
      });
    }
    for (auto& th : threads) th.join();
    auto t1 = std::chrono::steady_clock::now();
    for (float p : partial) sink = sink + p;
    best = std::max(best, double(n) * sizeof(float) / Seconds(t0, t1));
  }
  return best;
}

double MeasureGemmPeakF32(int64_t dim, int repeats) {
  std::vector<float> a(dim * dim, 0.5f), b(dim * dim, 0.25f), c(dim * dim);
  LAMINAR_CHECK_OK(kernels::cpu::MatMul(a, b, {}, dim, dim, dim, c));  // warm up
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    LAMINAR_CHECK_OK(kernels::cpu::MatMul(a, b, {}, dim, dim, dim, c));
    auto t1 = std::chrono::steady_clock::now();
    best = std::max(best, 2.0 * double(dim) * dim * dim / Seconds(t0, t1));
  }
  return best;
}

}  // namespace laminar::bench
