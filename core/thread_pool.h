// A fixed-size thread pool with a blocking ParallelFor, for CPU kernels and loaders.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace laminar {

// Owns its threads; joins them in the destructor after draining queued tasks. Submit and
// ParallelFor are thread-safe. Tasks must not throw.
// Idle workers, and a ParallelFor caller waiting for the other chunks, poll (yielding the core)
// for up to kSpinUs before sleeping on a condition variable: a decode step is a few hundred short
// ParallelFor calls back to back, and a futex wake-up per call (~17 µs measured on 2 cores) would
// cost more than the work.
class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()); }
  void Submit(std::function<void()> task);
  // Runs fn(begin, end) over [0, n) split into at most num_threads()+1 contiguous chunks (the
  // caller runs one); returns when all are done. Chunks have at least `min_chunk` items.
  void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);
  // Blocks until the queue is empty and no task is running.
  void Wait();

 private:
  static constexpr int64_t kSpinUs = 100;
  void WorkerLoop();
  std::vector<std::thread> workers_;
  std::atomic<int64_t> queued_{0};  // queue_.size(), readable without the lock
  int sleepers_ = 0;                // workers waiting on cv_ (under mu_)
  std::deque<std::function<void()>> queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  int active_ = 0;
  bool stop_ = false;
};

}  // namespace laminar
