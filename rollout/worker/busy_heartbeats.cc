#include "rollout/worker/busy_heartbeats.h"

#include <utility>

#include "core/zmq_transport.h"

namespace laminar::rollout {

BusyHeartbeats::BusyHeartbeats(std::string manager, int interval_ms, int request_timeout_ms,
                               double max_busy_s)
    : manager_(std::move(manager)),
      interval_(interval_ms),
      request_timeout_ms_(request_timeout_ms),
      max_busy_(max_busy_s),
      thread_([this] { Loop(); }) {}

BusyHeartbeats::~BusyHeartbeats() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

void BusyHeartbeats::Begin(std::string request) {
  MutexLock lock(&mu_);
  request_ = std::move(request);
  began_ = Clock::now();
}

void BusyHeartbeats::End() {
  MutexLock lock(&mu_);
  request_.reset();
}

std::optional<BusyHeartbeats::Clock::time_point> BusyHeartbeats::last_answered() const {
  MutexLock lock(&mu_);
  return last_answered_;
}

int64_t BusyHeartbeats::sent() const {
  MutexLock lock(&mu_);
  return sent_;
}

void BusyHeartbeats::Loop() {
  // This thread's own socket: the worker's is not thread-safe, and its thread is busy.
  ZmqRequestClient client(manager_);
  while (true) {
    std::string request;
    {
      // A look every interval (woken early only to stop), not a wake-up per call: Begin and End
      // run around every engine step and cost a lock each.
      MutexLock lock(&mu_);
      if (!stop_) cv_.WaitFor(&mu_, interval_);
      if (stop_) return;
      const auto busy = Clock::now() - began_;
      // Nothing running, a call shorter than an interval so far, or one stuck past max_busy_s.
      if (!request_ || busy < interval_ || busy > max_busy_) continue;
      request = *request_;
    }
    // One attempt: the next heartbeat is due within an interval anyway.
    const bool answered = client.Call(request, request_timeout_ms_, 1).ok();
    MutexLock lock(&mu_);
    ++sent_;
    if (answered) last_answered_ = Clock::now();
  }
}

}  // namespace laminar::rollout
