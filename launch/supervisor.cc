// The supervisor of `laminar run`; see supervisor.h.
#include "launch/supervisor.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <optional>
#include <utility>

#include "core/host.h"
#include "launch/liveness.h"

namespace laminar::launch {

namespace fs = std::filesystem;

std::string LogTail(const fs::path& path, int n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size();
       ++i) {
    out += "\n  " + lines[i];
  }
  return out;
}

namespace {

Status SpawnRole(SupervisedRole* role) {
  role->started_ms = SteadyNowMs();
  LAMINAR_ASSIGN_OR_RETURN(
      role->process,
      Process::Spawn(role->argv, Process::SpawnOptions{.stderr_path = role->log.string(),
                                                       .new_session = true}));
  return OkStatus();
}

// Waits up to `timeout_ms` for the ready line of `role`, spawned.
StatusOr<nlohmann::json> AwaitReady(SupervisedRole* role, int timeout_ms) {
  auto line = role->process.ReadLine(timeout_ms);
  if (!line.ok()) {
    // It stopped (a bad recipe, dataset or model: its log says why), or it hangs.
    auto code = role->process.Wait(2000);
    const std::string what =
        code.ok() ? " stopped (exit " + std::to_string(*code) + ") before it was ready"
                  : " did not start (" + std::string(line.status().message()) + ")";
    return UnavailableError(role->name + what + "; " + role->log.string() + ":" +
                            LogTail(role->log, 5));
  }
  nlohmann::json ready = nlohmann::json::parse(*line, nullptr, false);
  if (!ready.is_object()) {
    return UnavailableError(role->name + " printed '" + *line + "' instead of its ready line");
  }
  return ready;
}

}  // namespace

StatusOr<nlohmann::json> StartRole(SupervisedRole* role, int timeout_ms) {
  LAMINAR_RETURN_IF_ERROR(SpawnRole(role));
  return AwaitReady(role, timeout_ms);
}

StatusOr<RunRoles> StartRunRoles(const RunLaunch& launch) {
  auto role_argv = [&](const std::string& command, std::vector<std::string> extra) {
    std::vector<std::string> argv = {launch.self, command};
    argv.insert(argv.end(), launch.recipe_args.begin(), launch.recipe_args.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  auto log_of = [&](std::string name) {
    for (char& c : name) c = c == '/' ? '_' : c;
    return launch.log_dir / (name + ".log");
  };
  const int timeout = launch.start_timeout_ms;
  RunRoles roles;
  std::vector<std::string> relay_argv = {launch.self, "relay",        "--id",
                                         "master",    "--shm-prefix", launch.shm_prefix};
  if (!launch.keys.empty()) relay_argv.insert(relay_argv.end(), {"--keys", launch.keys});
  roles.relay = SupervisedRole("relay", std::move(relay_argv), log_of("relay"));
  LAMINAR_ASSIGN_OR_RETURN(nlohmann::json relay_ready, StartRole(&roles.relay, timeout));
  roles.relay_endpoint = relay_ready["control"].get<std::string>();
  roles.shm_prefix = launch.shm_prefix;
  roles.manager = SupervisedRole("manager", role_argv("manager", {}), log_of("manager"));
  LAMINAR_ASSIGN_OR_RETURN(nlohmann::json manager_ready, StartRole(&roles.manager, timeout));
  roles.manager_endpoint = manager_ready["endpoint"].get<std::string>();
  std::vector<std::string> actor_extra = {"--manager", roles.manager_endpoint, "--relay",
                                          roles.relay_endpoint};
  if (launch.resume) actor_extra.push_back("--resume");
  actor_extra.insert(actor_extra.end(), launch.actor_overrides.begin(),
                     launch.actor_overrides.end());
  // Data-parallel ranks first: rank 0 is ready only once they have all met it.
  for (int rank = 1; rank < launch.actor_ranks; ++rank) {
    std::vector<std::string> extra = {"--rank", std::to_string(rank)};
    if (launch.resume) extra.push_back("--resume");
    extra.insert(extra.end(), launch.actor_overrides.begin(), launch.actor_overrides.end());
    const std::string name = "actor/" + std::to_string(rank);
    roles.actor_ranks.emplace_back(name, role_argv("actor", extra), log_of(name));
    LAMINAR_RETURN_IF_ERROR(SpawnRole(&roles.actor_ranks.back()));
  }
  roles.actor = SupervisedRole("actor", role_argv("actor", actor_extra), log_of("actor"));
  LAMINAR_RETURN_IF_ERROR(StartRole(&roles.actor, timeout).status());
  for (SupervisedRole& r : roles.actor_ranks) {
    LAMINAR_RETURN_IF_ERROR(AwaitReady(&r, timeout).status());
  }
  // The rollouts load their models side by side.
  roles.rollouts.resize(static_cast<size_t>(launch.num_rollouts));
  for (int i = 0; i < launch.num_rollouts; ++i) {
    SupervisedRole& r = roles.rollouts[static_cast<size_t>(i)];
    r.name = "rollout/" + std::to_string(i);
    r.argv = role_argv("rollout", {"--id", r.name, "--manager", roles.manager_endpoint, "--relay",
                                   roles.relay_endpoint});
    r.log = log_of(r.name);
    LAMINAR_RETURN_IF_ERROR(SpawnRole(&r));
  }
  for (SupervisedRole& r : roles.rollouts) {
    LAMINAR_RETURN_IF_ERROR(AwaitReady(&r, timeout).status());
  }
  return roles;
}

namespace {

// Records the death of `role`, which exited with `code` (Process::Wait's); `recovered_unix_s`
// NaN when it was not brought back. A role the supervisor killed as hung had its hang recorded
// then: this records it again with its recovery (ReadFaults keeps the later record).
void RecordCrash(const WatchOptions& options, const SupervisedRole& role, int code,
                 double detected_unix_s, double recovered_unix_s) {
  const bool hung = role.hung_unix_s > 0;
  if (hung && !std::isfinite(recovered_unix_s)) return;  // recorded when it was declared hung
  Fault f{.kind = hung ? FaultKind::kHang : FaultKind::kCrash,
          .role = role.name,
          .detail = hung ? "gave no sign of life; killed" : ExitCodeDetail(code),
          .seen_by = "supervisor",
          .detected_unix_s = hung ? role.hung_unix_s : detected_unix_s,
          .recovered_unix_s = recovered_unix_s};
  if (Status st = options.faults.Record(f); !st.ok()) options.say("[run] " + st.ToString());
}

// Declares `role` hung: records it (not recovered yet) and kills it.
void DeclareHung(const WatchOptions& options, SupervisedRole& role, const std::string& detail) {
  if (role.hung_unix_s > 0 || !role.process.Running()) return;
  role.hung_unix_s = FaultClockNow();
  options.say("[run] " + role.name + " " + detail + ": hung; killing it");
  Fault f{.kind = FaultKind::kHang,
          .role = role.name,
          .detail = detail,
          .seen_by = "supervisor",
          .detected_unix_s = role.hung_unix_s};
  if (Status st = options.faults.Record(f); !st.ok()) options.say("[run] " + st.ToString());
  role.process.Signal(SIGKILL);
}

// Declares hung the manager or master relay silent past the hang timeout (counted from its last
// answer, or from its start when it answered none since) and the actor stopped that long.
void CheckSignsOfLife(RunRoles& roles, const WatchOptions& options, const RoleProbe& probe,
                      int64_t* actor_stopped_since_ms) {
  const int64_t now = SteadyNowMs();
  const auto limit = static_cast<int64_t>(options.hang_timeout_s * 1000);
  auto silent = [&](SupervisedRole& role, RoleProbe::Role which) {
    const int64_t since = std::max(probe.LastAnswerMs(which), role.started_ms);
    if (role.process.Running() && now - since > limit) {
      char detail[96];
      std::snprintf(detail, sizeof(detail), "answered no ping for %.1f s",
                    static_cast<double>(now - since) / 1000);
      DeclareHung(options, role, detail);
    }
  };
  silent(roles.manager, RoleProbe::kManager);
  silent(roles.relay, RoleProbe::kRelay);
  if (!roles.actor.process.Running() || !ProcessStopped(roles.actor.process.pid())) {
    *actor_stopped_since_ms = 0;
  } else if (*actor_stopped_since_ms == 0) {
    *actor_stopped_since_ms = now;
  } else if (now - *actor_stopped_since_ms > limit) {
    char detail[96];
    std::snprintf(detail, sizeof(detail), "was stopped for %.1f s",
                  static_cast<double>(now - *actor_stopped_since_ms) / 1000);
    DeclareHung(options, roles.actor, detail);
  }
}

// Keeps `r` up: when its process has exited, records the crash and starts it again (up to
// max_restarts times; `prepare` runs first), recording when it was back. Returns whether it
// runs; a role past its restarts is marked gone.
bool KeepRoleUp(
    SupervisedRole& r, const WatchOptions& options, int start_timeout_ms,
    const std::function<void()>& prepare = [] {}) {
  if (r.gone) return false;
  if (r.process.Running()) return true;
  const double detected = FaultClockNow();
  auto code = r.process.Wait(1000);
  const int exit_code = code.ok() ? *code : -1;
  const std::string exit = ExitCodeDetail(exit_code);
  if (r.restarts >= options.max_restarts) {
    options.say("[run] " + r.name + " " + exit + " after " + std::to_string(r.restarts) +
                " restarts; giving up on it. " + r.log.string() + ":" + LogTail(r.log, 3));
    RecordCrash(options, r, exit_code, detected, NAN);
    r.gone = true;
    return false;
  }
  ++r.restarts;
  options.say("[run] " + r.name + " " + exit + "; restarting it (" + std::to_string(r.restarts) +
              " of " + std::to_string(options.max_restarts) + ")");
  prepare();
  if (auto st = StartRole(&r, start_timeout_ms); !st.ok()) {
    options.say("[run] " + std::string(st.status().message()));
    RecordCrash(options, r, exit_code, detected, NAN);
    return false;  // its Process is not running: the next round counts another restart
  }
  RecordCrash(options, r, exit_code, detected, FaultClockNow());
  r.hung_unix_s = 0;
  return true;
}

// Restarts the master relay in place when it died: on the control endpoint the others know, its
// shared-memory segments removed first (a new relay creates them afresh). The actor's publisher
// sends the newest version again once the new relay lacks it, and the rollouts' pulls reach it
// as before. Returns whether it runs.
bool KeepRelayUp(RunRoles& roles, const WatchOptions& options, int start_timeout_ms) {
  return KeepRoleUp(roles.relay, options, start_timeout_ms, [&roles] {
    if (!roles.shm_prefix.empty()) (void)RemoveSharedMemory(roles.shm_prefix);
    std::vector<std::string>& argv = roles.relay.argv;
    auto listen = std::find(argv.begin(), argv.end(), "--listen");
    if (listen == argv.end()) {
      argv.insert(argv.end(), {"--listen", roles.relay_endpoint});
    } else if (listen + 1 != argv.end()) {
      *(listen + 1) = roles.relay_endpoint;
    }
  });
}

}  // namespace

WatchResult WatchRun(RunRoles& roles, const sigset_t& stop_signals, const WatchOptions& options) {
  constexpr int kStartTimeoutMs = 120000;
  std::optional<RoleProbe> probe;
  if (options.hang_timeout_s > 0) probe.emplace(roles.manager_endpoint, roles.relay_endpoint);
  int64_t actor_stopped_since_ms = 0;
  while (true) {
    const timespec wait = {.tv_sec = 0, .tv_nsec = 200'000'000};
    if (sigtimedwait(&stop_signals, nullptr, &wait) > 0) return {RunEnd::kInterrupted, 130};
    options.tick();
    if (probe) CheckSignsOfLife(roles, options, *probe, &actor_stopped_since_ms);
    if (!roles.actor.process.Running()) {
      const double detected = FaultClockNow();
      auto code = roles.actor.process.Wait(1000);
      const int exit_code = code.ok() ? *code : 1;
      if (exit_code != 0) RecordCrash(options, roles.actor, exit_code, detected, NAN);
      return {RunEnd::kActorExited, exit_code};
    }
    if (!roles.manager.process.Running()) {
      const double detected = FaultClockNow();
      auto code = roles.manager.process.Wait(1000);
      RecordCrash(options, roles.manager, code.ok() ? *code : -1, detected, NAN);
      options.say("[run] the manager exited; " + roles.manager.log.string() + ":" +
                  LogTail(roles.manager.log, 5));
      return {RunEnd::kRoleDown, 1};
    }
    if (!KeepRelayUp(roles, options, kStartTimeoutMs) && roles.relay.gone) {
      return {RunEnd::kRoleDown, 1};  // KeepRoleUp said why
    }
    int alive = 0;
    for (SupervisedRole& r : roles.rollouts) alive += KeepRoleUp(r, options, kStartTimeoutMs);
    if (alive == 0) {
      options.say("[run] every rollout is gone; nothing can generate");
      return {RunEnd::kNoRollouts, 1};
    }
  }
}

void StopRun(RunRoles& roles, const std::function<void(const std::string&)>& say,
             const std::function<void()>& after_actor, int actor_timeout_ms) {
  if (roles.actor.process.Running()) {
    say("[run] stopping: the actor saves a checkpoint first");
    roles.actor.process.Signal(SIGTERM);
    if (!roles.actor.process.Wait(actor_timeout_ms).ok()) {
      roles.actor.process.Signal(SIGKILL);
      (void)roles.actor.process.Wait(5000);
    }
  }
  // The other ranks end when rank 0 tells them, or when it is gone (their collective fails).
  for (SupervisedRole& r : roles.actor_ranks) {
    if (r.process.Running() && !r.process.Wait(Process::kTermGraceMs).ok()) {
      r.process.Signal(SIGKILL);
      (void)r.process.Wait(5000);
    }
  }
  after_actor();
  for (SupervisedRole& r : roles.rollouts) r.process.Signal(SIGTERM);
  roles.manager.process.Signal(SIGTERM);
  roles.relay.process.Signal(SIGTERM);
  if (!roles.relay.process.Wait(Process::kTermGraceMs).ok()) {
    roles.relay.process.Signal(SIGKILL);
    (void)roles.relay.process.Wait(5000);
  }
  if (!roles.shm_prefix.empty()) {
    if (const int n = RemoveSharedMemory(roles.shm_prefix); n > 0) {
      say("[run] removed " + std::to_string(n) + " shared-memory segment(s) the relay left");
    }
  }
}

sigset_t BlockStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

std::string RunShmPrefix(pid_t supervisor) { return "laminar-run-" + std::to_string(supervisor); }

std::vector<std::string> SharedMemorySegments(const std::string& prefix) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(prefix + "-")) out.push_back(std::move(name));
  }
  return out;
}

int RemoveSharedMemory(const std::string& prefix) {
  int removed = 0;
  for (const std::string& name : SharedMemorySegments(prefix)) {
    removed += shm_unlink(("/" + name).c_str()) == 0;
  }
  return removed;
}

}  // namespace laminar::launch
