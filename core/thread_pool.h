// A fixed-size thread pool with a blocking ParallelFor, for CPU kernels and loaders.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "core/mutex.h"

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
  void Submit(std::function<void()> task) LAMINAR_EXCLUDES(mu_);
  // Runs fn(begin, end) over [0, n) split into at most num_threads()+1 contiguous chunks (the
  // caller runs one); returns when all are done. Chunks have at least `min_chunk` items.
  void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn)
      LAMINAR_EXCLUDES(mu_);
  // Blocks until the queue is empty and no task is running.
  void Wait() LAMINAR_EXCLUDES(mu_);

 private:
  static constexpr int64_t kSpinUs = 100;
  void WorkerLoop() LAMINAR_EXCLUDES(mu_);
  std::vector<std::thread> workers_;
  std::atomic<int64_t> queued_{0};  // queue_.size(), readable without the lock
  Mutex mu_;
  int sleepers_ LAMINAR_GUARDED_BY(mu_) = 0;  // workers waiting on cv_
  std::deque<std::function<void()>> queue_ LAMINAR_GUARDED_BY(mu_);
  CondVar cv_;       // a task was queued, or stop_
  CondVar idle_cv_;  // active_ == 0 and queue_ empty
  int active_ LAMINAR_GUARDED_BY(mu_) = 0;
  bool stop_ LAMINAR_GUARDED_BY(mu_) = false;
};

}  // namespace laminar
