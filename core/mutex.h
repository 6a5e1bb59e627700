// A mutex, its scoped lock and a condition variable that carry Clang's thread-safety annotations
// (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html), so that `-Wthread-safety` proves
// every GUARDED_BY member is read and written under its mutex. Other compilers see plain
// std::mutex and std::condition_variable; scripts/thread_safety.py runs the analysis.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define LAMINAR_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define LAMINAR_THREAD_ANNOTATION(x)
#endif

#define LAMINAR_CAPABILITY(name) LAMINAR_THREAD_ANNOTATION(capability(name))
#define LAMINAR_SCOPED_CAPABILITY LAMINAR_THREAD_ANNOTATION(scoped_lockable)
// The member is read and written only while holding `mu`.
#define LAMINAR_GUARDED_BY(mu) LAMINAR_THREAD_ANNOTATION(guarded_by(mu))
// What the pointer points to is read and written only while holding `mu`.
#define LAMINAR_PT_GUARDED_BY(mu) LAMINAR_THREAD_ANNOTATION(pt_guarded_by(mu))
// The caller holds the mutexes.
#define LAMINAR_REQUIRES(...) LAMINAR_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// The caller does not hold the mutexes (the function takes them).
#define LAMINAR_EXCLUDES(...) LAMINAR_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define LAMINAR_ACQUIRE(...) LAMINAR_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define LAMINAR_RELEASE(...) LAMINAR_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// For the few functions the analysis cannot follow; each says why where it is used.
#define LAMINAR_NO_THREAD_SAFETY_ANALYSIS LAMINAR_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace laminar {

// std::mutex as a capability the analysis tracks. Not recursive.
class LAMINAR_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() LAMINAR_ACQUIRE() { mu_.lock(); }
  void Unlock() LAMINAR_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction.
class LAMINAR_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) LAMINAR_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() LAMINAR_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

// std::condition_variable over a Mutex the caller holds: Wait releases it while blocked and holds
// it again on return, as std::condition_variable::wait does. Callers loop on their condition
// (`while (!ready_) cv_.Wait(&mu_);`), which the analysis checks under the lock.
class CondVar {
 public:
  void Wait(Mutex* mu) LAMINAR_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's
  }
  // Like Wait, for at most `timeout`; false when it timed out.
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) LAMINAR_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  // Like Wait, until `deadline` at the latest; false when it passed. Callers loop on their
  // condition until it holds or this returns false.
  template <class Clock, class Duration>
  bool WaitUntil(Mutex* mu, std::chrono::time_point<Clock, Duration> deadline)
      LAMINAR_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool woken = cv_.wait_until(lock, deadline) == std::cv_status::no_timeout;
    lock.release();
    return woken;
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace laminar
