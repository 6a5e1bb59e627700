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
  {
    MutexLock lock(&mu_);
    request_ = std::move(request);
    began_ = Clock::now();
    ++call_;
  }
  cv_.NotifyAll();
}

void BusyHeartbeats::End() {
  {
    MutexLock lock(&mu_);
    request_.reset();
  }
  cv_.NotifyAll();
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
  uint64_t call = 0;  // the call the next heartbeat belongs to
  Clock::time_point next{};
  while (true) {
    std::string request;
    {
      MutexLock lock(&mu_);
      while (true) {
        if (stop_) return;
        if (request_ && call_ != call) {  // a new call: its first heartbeat one interval in
          call = call_;
          next = began_ + interval_;
        }
        const auto now = Clock::now();
        if (!request_ || now - began_ > max_busy_) {
          cv_.Wait(&mu_);  // until the next call (a call past max_busy_s gets none)
          continue;
        }
        if (now < next) {
          cv_.WaitUntil(&mu_, next);
          continue;
        }
        request = *request_;
        break;
      }
    }
    next = Clock::now() + interval_;
    // One attempt: the next heartbeat is due within an interval anyway.
    const bool answered = client.Call(request, request_timeout_ms_, 1).ok();
    MutexLock lock(&mu_);
    ++sent_;
    if (answered) last_answered_ = Clock::now();
  }
}

}  // namespace laminar::rollout
