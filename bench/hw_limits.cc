// DRAM bandwidth and GEMM peak measurement.
#include "bench/hw_limits.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace laminar::bench {
namespace {

double Seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Reads a range as 64-bit words with independent integer accumulators (integer adds are
// associative, so the compiler vectorizes them): bound by loads, not by adds.
uint64_t SumRange(const uint64_t* p, int64_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
  }
  for (; i < n; ++i) a0 += p[i];
  return a0 + a1 + a2 + a3;
}

}  // namespace

double MeasureDramReadBandwidth(int64_t size_bytes, int repeats, int num_threads) {
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int64_t n = size_bytes / static_cast<int64_t>(sizeof(uint64_t));
  std::vector<uint64_t> buf(static_cast<size_t>(n), 1);
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    std::vector<uint64_t> partial(static_cast<size_t>(num_threads));
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    threads.reserve(static_cast<size_t>(num_threads));
    int64_t per = (n + num_threads - 1) / num_threads;
    for (int t = 0; t < num_threads; ++t) {
      threads.emplace_back([&, t] {
        int64_t b = t * per, e = std::min(n, b + per);
        if (b < e) partial[t] = SumRange(buf.data() + b, e - b);
      });
    }
    for (auto& th : threads) th.join();
    auto t1 = std::chrono::steady_clock::now();
    for (uint64_t p : partial) sink = sink + p;
    best = std::max(best, double(n) * sizeof(uint64_t) / Seconds(t0, t1));
  }
  return best;
}

namespace {

// FLOP/s of the best of `repeats` timed runs of `gemm(pool)` (an m = n = k = dim product) after
// one warm-up; 0 when the warm-up fails (no such matmul on this CPU).
template <typename Gemm>
double BestGemmRate(int64_t dim, int repeats, Gemm&& gemm) {
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(threads - 1);  // with the caller: one part per hardware thread, as the engine
  if (!gemm(&pool).ok()) return 0;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    LAMINAR_CHECK_OK(gemm(&pool));
    auto t1 = std::chrono::steady_clock::now();
    best = std::max(best, 2.0 * double(dim) * dim * dim / Seconds(t0, t1));
  }
  return best;
}

}  // namespace

double MeasureGemmPeakF32(int64_t dim, int repeats) {
  std::vector<float> a(dim * dim, 0.5f), b(dim * dim, 0.25f), c(dim * dim);
  const double rate = BestGemmRate(dim, repeats, [&](ThreadPool* pool) {
    return kernels::cpu::OnednnMatMulF32(a, b, {}, dim, dim, dim, c, pool);
  });
  LAMINAR_CHECK(rate > 0) << "oneDNN's f32 matmul failed";
  return rate;
}

double MeasureGemmPeakBF16(int64_t dim, int repeats) {
  std::vector<uint16_t> a(dim * dim, 0x3f00), b(dim * dim, 0x3e80);  // 0.5 and 0.25
  std::vector<float> c(dim * dim);
  return BestGemmRate(dim, repeats, [&](ThreadPool* pool) {
    return kernels::cpu::OnednnMatMulBF16(a, b, {}, dim, dim, dim, c, pool);
  });
}

int64_t LastLevelCacheBytes() {
  for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
    if (const long bytes = sysconf(name); bytes > 0) return bytes;
  }
  return 0;
}

}  // namespace laminar::bench
