// Signs of life from the roles a supervisor watches beyond their process being there: the manager
// and the master relay must answer a ping, the actor must not sit stopped (SIGSTOP, a debugger, a
// frozen cgroup). A process that is present but gives no sign of life for the hang timeout is hung;
// the supervisor records it and kills it, and its restart or the run's resume follows as for a
// crash.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <string>
#include <thread>

namespace laminar::launch {

// Pings the manager (ManagerRequest ping) and the master relay (RelayRequest ping) from a thread
// of its own, every 500 ms, each call waiting up to 1 s, and keeps when each last answered (any
// reply counts). With the run's CURVE keys when this process enabled them.
class RoleProbe {
 public:
  enum Role { kManager = 0, kRelay = 1 };
  RoleProbe(std::string manager_endpoint, std::string relay_endpoint);
  ~RoleProbe();
  RoleProbe(const RoleProbe&) = delete;
  RoleProbe& operator=(const RoleProbe&) = delete;

  // SteadyNowMs() of `role`'s last answer; the probe's start before any.
  int64_t LastAnswerMs(Role role) const { return last_[role].load(); }

 private:
  void Loop();

  const std::string endpoints_[2];
  std::atomic<int64_t> last_[2];
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Whether process `pid` is stopped now (state T or t in /proc/<pid>/stat).
bool ProcessStopped(pid_t pid);

// The hang timeout of a run whose rollouts time out after `heartbeat_timeout_s`: twice that, but
// at least 4 s (the probe's round, two calls of up to 1 s each, must fit more than once) and at
// most 10 s (so that a hung manager is declared before the actor's requests to it give up).
double HangTimeoutS(double heartbeat_timeout_s);

}  // namespace laminar::launch
