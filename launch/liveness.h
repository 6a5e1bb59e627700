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

  // Seconds since the epoch (FaultClockNow) of `role`'s last answer; the probe's start before any.
  double LastAnswer(Role role) const { return last_[role].load(); }

 private:
  void Loop();

  const std::string endpoints_[2];
  std::atomic<double> last_[2];
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Whether process `pid` is stopped now (state T or t in /proc/<pid>/stat).
bool ProcessStopped(pid_t pid);

}  // namespace laminar::launch
