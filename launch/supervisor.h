// The supervisor of `laminar run`: the roles of one RL job as child processes of this binary on
// this machine (master relay, manager, actor, rollouts), each in its own session with its log, and
// the watch over them: a rollout that dies is started again under its id (the manager re-issues
// what it held), the master relay in place (the actor sends it the newest version again), a dead
// actor or manager ends the run (`laminar run --resume` continues it from its newest
// checkpoint); stopping stops the actor first, which saves a checkpoint while the manager still
// answers, then the rest.
#pragma once

#include <signal.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fault_log.h"
#include "core/process.h"
#include "core/status.h"

namespace laminar::launch {

// One supervised role: its command line, log and process.
struct SupervisedRole {
  SupervisedRole() = default;
  SupervisedRole(std::string n, std::vector<std::string> a, std::filesystem::path l)
      : name(std::move(n)), argv(std::move(a)), log(std::move(l)) {}
  std::string name;  // "relay", "manager", "actor", "rollout/0", ...
  std::vector<std::string> argv;
  std::filesystem::path log;
  Process process;
  int restarts = 0;
  bool gone = false;       // past its restarts
  int64_t started_ms = 0;  // when its process was spawned (SteadyNowMs)
  double hung_unix_s = 0;  // > 0: the supervisor declared it hung then and killed it
};

// The last `n` lines of `path`, each on a new indented line, for error messages.
std::string LogTail(const std::filesystem::path& path, int n);

// Starts `role` (stderr to its log, a new session) and waits up to `timeout_ms` for its ready
// line, a JSON object, which it returns. Errors: Unavailable naming the role, whether it exited
// or hangs, and the tail of its log.
StatusOr<nlohmann::json> StartRole(SupervisedRole* role, int timeout_ms);

// The roles of one run, as StartRunRoles started them.
struct RunRoles {
  SupervisedRole relay, manager, actor;
  std::vector<SupervisedRole> actor_ranks;  // data-parallel ranks 1.., which follow the actor
  std::vector<SupervisedRole> rollouts;
  std::string relay_endpoint, manager_endpoint;
  std::string shm_prefix;  // the master relay's shared-memory names
};

// How a run is started: `self` is this binary; every role but the relay gets `recipe_args`
// (--recipe FILE and the overrides); logs go to `log_dir`/<role>.log.
struct RunLaunch {
  std::string self;
  std::vector<std::string> recipe_args;
  std::filesystem::path log_dir;
  int num_rollouts = 1;
  int actor_ranks = 1;  // actor.world_size: ranks 1.. start beside the actor and meet it
  std::vector<std::string> actor_overrides;  // given to every actor rank only
  bool resume = false;                       // the actor continues from its newest checkpoint
  std::string shm_prefix;                    // the master relay's shared-memory names
  std::string keys;               // run.keys, for the relay (the others read it in the recipe)
  int start_timeout_ms = 120000;  // loading a model can take a while
};

// Starts the master relay, the manager and the actor, in that order, each once the one before it
// is ready, then the rollouts all at once (they load their models side by side). Errors:
// StartRole's for the first role that fails (the ones started are stopped when the returned roles,
// or the error's, go out of scope).
StatusOr<RunRoles> StartRunRoles(const RunLaunch& launch);

// Why WatchRun returned.
enum class RunEnd {
  kActorExited,  // exit_code is the actor's (0: it finished its steps)
  kRoleDown,     // the manager exited, or the relay past its restarts
  kNoRollouts,   // every rollout is gone past its restarts
  kInterrupted,  // a signal of `stop_signals` arrived
};
struct WatchResult {
  RunEnd end = RunEnd::kActorExited;
  int exit_code = 0;  // the actor's exit code, 1 for kRoleDown and kNoRollouts, 130 interrupted
};

// How WatchRun watches: `tick` is called every round, each event is told to `say` as one line,
// each dead rollout and the master relay are restarted up to `max_restarts` times each, and each
// death is recorded in `faults` (a crash naming the role, host and exit code or signal; recovered
// when the restarted role is ready again). With hang_timeout_s > 0 the manager and the master
// relay that answer no ping for that long, and an actor stopped that long (launch/liveness.h), are
// hung: recorded as a hang, killed, and then handled as a death (the relay restarted in place,
// whose hang recovers when it is ready again; the run ended for the manager and the actor).
struct WatchOptions {
  int max_restarts = 5;
  double hang_timeout_s = 0;
  std::function<void()> tick = [] {};
  std::function<void(const std::string&)> say = [](const std::string&) {};
  FaultLog faults;
};

// Watches `roles` until the run ends (RunEnd), every 200 ms taking a pending signal of
// `stop_signals` (blocked by the caller).
WatchResult WatchRun(RunRoles& roles, const sigset_t& stop_signals, const WatchOptions& options);

// Stops a run: the actor first with SIGTERM (it saves a checkpoint, which needs the manager's
// snapshot; killed after `actor_timeout_ms`), `after_actor` is called, then the rollouts, manager
// and relay get SIGTERM; the relay is waited for (killed after Process::kTermGraceMs) and the
// shared-memory segments of its prefix are removed, also those of a relay that was killed (each
// other Process's destructor waits, then kills what is left).
void StopRun(RunRoles& roles, const std::function<void(const std::string&)>& say,
             const std::function<void()>& after_actor, int actor_timeout_ms = 600000);

// Blocks SIGINT and SIGTERM in the calling thread (before any child or thread exists, so that all
// inherit the mask) and returns that set, for sigtimedwait: how a launcher takes Ctrl-C itself.
sigset_t BlockStopSignals();

// The master relay's shared-memory prefix of the run supervised by process `supervisor`.
std::string RunShmPrefix(pid_t supervisor);

// The names of the /dev/shm segments named `prefix`-*.
std::vector<std::string> SharedMemorySegments(const std::string& prefix);

// Unlinks every /dev/shm segment named `prefix`-*: what a relay killed by SIGKILL leaves.
// Readers that still map one keep intact bytes. Returns how many went.
int RemoveSharedMemory(const std::string& prefix);

}  // namespace laminar::launch
