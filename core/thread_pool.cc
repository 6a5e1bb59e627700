// ThreadPool implementation.
#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace laminar {
namespace {

// Polls done() until it holds or `us` microseconds passed; returns done(). Each poll yields the
// core: on an idle core that returns at once (microsecond latency), and when another process
// wants the core (the actor's trainer next to a rollout under `laminar run`) it runs instead of
// a spinning thread.
template <typename Done>
bool SpinUntil(Done&& done, int64_t us) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  for (int i = 0;; ++i) {
    if (done()) return true;
    std::this_thread::yield();
    if ((i & 15) == 15 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(static_cast<size_t>(num_threads));
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Submit(std::function<void()> task) {
  bool wake;
  {
    MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
    queued_.fetch_add(1, std::memory_order_release);
    wake = sleepers_ > 0;  // spinning workers see queued_ without a wake-up
  }
  if (wake) cv_.NotifyOne();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    SpinUntil([this] { return queued_.load(std::memory_order_acquire) > 0; }, kSpinUs);
    {
      MutexLock lock(&mu_);
      if (!stop_ && queue_.empty()) {
        ++sleepers_;
        while (!stop_ && queue_.empty()) cv_.Wait(&mu_);
        --sleepers_;
      }
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
      ++active_;
    }
    task();
    {
      MutexLock lock(&mu_);
      --active_;
      if (active_ == 0 && queue_.empty()) idle_cv_.NotifyAll();
    }
  }
}

void ThreadPool::Wait() {
  MutexLock lock(&mu_);
  while (active_ != 0 || !queue_.empty()) idle_cv_.Wait(&mu_);
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  int64_t max_chunks = std::max<int64_t>(1, n / min_chunk);
  int64_t num_chunks = std::min<int64_t>(num_threads() + 1, max_chunks);
  if (num_chunks == 1) {
    fn(0, n);
    return;
  }
  int64_t per = (n + num_chunks - 1) / num_chunks;
  // The completion state lives on the heap, owned by every task: a worker may still be inside
  // unlock/notify after the caller has seen the count reach zero and returned.
  struct Completion {
    Mutex mu;
    CondVar cv;
    std::atomic<int64_t> remaining{0};
  };
  auto done = std::make_shared<Completion>();
  done->remaining = num_chunks - 1;
  for (int64_t c = 1; c < num_chunks; ++c) {
    int64_t b = c * per, e = std::min(n, b + per);
    Submit([done, &fn, b, e] {
      if (b < e) fn(b, e);
      if (done->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        MutexLock lock(&done->mu);  // a waiter checks under the lock
        done->cv.NotifyAll();
      }
    });
  }
  fn(0, std::min(n, per));
  auto finished = [&] { return done->remaining.load(std::memory_order_acquire) == 0; };
  if (SpinUntil(finished, kSpinUs)) return;
  MutexLock lock(&done->mu);
  while (!finished()) done->cv.Wait(&done->mu);
}

}  // namespace laminar
