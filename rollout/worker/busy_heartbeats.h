// Heartbeats from a thread of their own while a rollout worker's thread is inside one long call:
// an engine step or building the model from a pulled version, which on a slowed or overloaded
// machine can outlast the manager's heartbeat timeout. A rollout that is slow but working must read
// as a straggler, not as hung (docs/architecture.md, faults). The heartbeat repeated during a call
// is the one the worker built as the call began (the samples in flight then), marked `busy`: the
// manager takes it as a sign of life, measures no rate from it (a rollout's rate spans whole calls,
// between the worker's own heartbeats) and hands no orders in its reply. A call that lasts longer
// than `max_busy_s` gets no more of them: a call stuck for good is a hang.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "core/mutex.h"

namespace laminar::rollout {

class BusyHeartbeats {
 public:
  using Clock = std::chrono::steady_clock;

  // Starts the thread; it connects to the manager's control endpoint with a socket of its own.
  BusyHeartbeats(std::string manager, int interval_ms, int request_timeout_ms, double max_busy_s);
  ~BusyHeartbeats();
  BusyHeartbeats(const BusyHeartbeats&) = delete;
  BusyHeartbeats& operator=(const BusyHeartbeats&) = delete;

  // From the worker's thread, around a long call: `request` is the encoded ManagerRequest to
  // repeat once the call has lasted an interval, then every interval (the thread looks once an
  // interval, so the first goes out one to two intervals after Begin). End stops them (one already
  // on its way still arrives).
  void Begin(std::string request) LAMINAR_EXCLUDES(mu_);
  void End() LAMINAR_EXCLUDES(mu_);

  // Begin on construction, End on destruction.
  class Scope {
   public:
    Scope(BusyHeartbeats* beats, std::string request) : beats_(beats) {
      beats_->Begin(std::move(request));
    }
    ~Scope() { beats_->End(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    BusyHeartbeats* beats_;
  };

  // When the manager last answered one of them (nullopt: never): the worker counts it as
  // contact with the manager.
  std::optional<Clock::time_point> last_answered() const LAMINAR_EXCLUDES(mu_);
  // How many were sent, answered or not.
  int64_t sent() const LAMINAR_EXCLUDES(mu_);

 private:
  void Loop();

  const std::string manager_;
  const std::chrono::milliseconds interval_;
  const int request_timeout_ms_;
  const std::chrono::duration<double> max_busy_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ LAMINAR_GUARDED_BY(mu_) = false;
  // The call in progress (nullopt: none): its heartbeat and when it began.
  std::optional<std::string> request_ LAMINAR_GUARDED_BY(mu_);
  Clock::time_point began_ LAMINAR_GUARDED_BY(mu_){};
  std::optional<Clock::time_point> last_answered_ LAMINAR_GUARDED_BY(mu_);
  int64_t sent_ LAMINAR_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace laminar::rollout
