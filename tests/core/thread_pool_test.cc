// ThreadPool: every index visited exactly once, Wait drains.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace laminar {
namespace {

TEST(ThreadPoolTest, ParallelForVisitsEachIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 7, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
}

// Many short ParallelFor calls in a row: the caller returns as soon as the count reaches zero, so
// completion state must outlive it (a stack-allocated mutex here once aborted in glibc).
TEST(ThreadPoolTest, ManyShortParallelForsInARow) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 5000; ++i) {
    pool.ParallelFor(4, 1, [&](int64_t b, int64_t e) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 5000 * 4);
}

TEST(ThreadPoolTest, SubmitAndWait) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  for (int i = 0; i < 100; ++i) pool.Submit([&] { count++; });
  pool.Wait();
  EXPECT_EQ(count.load(), 100);
}

}  // namespace
}  // namespace laminar
