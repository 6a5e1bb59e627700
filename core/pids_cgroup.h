// A pids cgroup of this process's own: a kernel bound on how many tasks (processes and threads)
// its members may have, and a way to kill every member, also those that left their process group
// or session (setsid). Reward workers run in one each, so a fork bomb in a user's reward stops at
// the bound and nothing it started outlives the worker.
//
// The cgroup is made under this process's own cgroup in the pids hierarchy: cgroup v1's `pids`
// mount, or cgroup v2's unified one when its `pids` controller can be enabled for children. Doing
// so needs write access there (root, or a delegated subtree); where it is refused, Create says why
// and the caller goes on without the bound.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace laminar {

class PidsCgroup {
 public:
  // Creates the cgroup `<name>` (a single path component) with pids.max = max_tasks (>= 1).
  // Unavailable with the reason when there is no pids hierarchy or it may not be written.
  static StatusOr<PidsCgroup> Create(const std::string& name, int64_t max_tasks);

  // Removes cgroups named `<prefix>-<pid>-...` whose pid is not a live process and which hold no
  // task (those left by a process that was killed before it could remove its own); kills nothing.
  static void RemoveStale(const std::string& prefix);

  PidsCgroup() = default;
  PidsCgroup(PidsCgroup&& other) noexcept;
  PidsCgroup& operator=(PidsCgroup&& other) noexcept;
  PidsCgroup(const PidsCgroup&) = delete;
  PidsCgroup& operator=(const PidsCgroup&) = delete;
  // KillAll, then removes the cgroup.
  ~PidsCgroup();

  // The cgroup's directory; empty for a default-constructed one. A process joins it by writing
  // its pid to `<dir>/cgroup.procs`.
  const std::string& dir() const { return dir_; }

  // The processes in it now (empty when none or unreadable).
  std::vector<pid_t> Pids() const;

  // SIGKILLs every member, again and again until none is left (a member may fork between reading
  // the list and the signal; the bound keeps that finite). False if members remain after
  // `timeout_ms`.
  bool KillAll(int timeout_ms = 5000) const;

 private:
  explicit PidsCgroup(std::string dir) : dir_(std::move(dir)) {}
  void Remove();

  std::string dir_;
};

}  // namespace laminar
