// `laminar chaos RECIPE --kill rollout,straggler,reward,relay,manager,actor,disk --every 20s
// --for 10m --seed S`: a real `laminar run` of the recipe with faults injected at random (seeded)
// times, then an audit. Faults: a rollout killed (SIGKILL) or hung (SIGSTOP until the manager
// declares it dead, then SIGCONT); a straggler (a rollout that holds work, by the manager's
// ledger, stopped nine tenths of the time for a while); a reward worker killed; the relay killed
// or hung (`laminar run` declares it hung, kills it and starts it again in place); the manager or
// actor killed or hung (declared hung and killed by `laminar run`), after which the run is
// resumed from its newest checkpoint (`laminar run --resume`); a full disk
// for the checkpoints (the checkpoint folder is a tmpfs of chaos's own mount namespace, shrunk to
// what it holds until a save has failed: the actor trains on, and its next step saves). The
// audit, against the manager's ledger in the final checkpoint and the trajectories the actor
// trained on: every sample trained at most once, every prompt handed out trained, buffered or in
// flight (none lost), versions never going back per rollout, no process, shared-memory segment,
// listening port or KV block (manager/kv_blocks_leaked) of the run left, each fault demarcated in
// faults.jsonl to the role and host it struck and no record that no fault explains, the detection
// and recovery time per fault, and the effective training time ratio. The report goes to the
// console and to RUN_DIR/chaos_report.json; the exit code is 0 only when the audit is clean.
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli/command.h"
#include "core/fault_log.h"
#include "core/host.h"
#include "core/mapped_file.h"
#include "core/process.h"
#include "launch/liveness.h"
#include "launch/manager_ledger.h"
#include "launch/run_audit.h"
#include "launch/run_keys.h"
#include "launch/supervisor.h"
#include "recipe/recipe.h"

namespace laminar::cli {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct ChaosArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  std::string run_dir;
  std::string kill = "rollout,reward";
  std::string every = "20s";
  std::string duration = "10m";
  uint64_t seed = 1;
  int rollouts = 0;
};

int Fail(std::string_view message) { return CommandFail("chaos", message); }

// "20s", "10m", "1h", "1.5" (seconds) to seconds. Errors: InvalidArgument naming the text.
StatusOr<double> ParseDuration(const std::string& text, const std::string& what) {
  double scale = 1;
  std::string number = text;
  if (!number.empty() && std::string("smh").find(number.back()) != std::string::npos) {
    scale = number.back() == 's' ? 1 : number.back() == 'm' ? 60 : 3600;
    number.pop_back();
  }
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  constexpr double kMaxS = 30 * 24 * 3600.0;  // a chaos run is bounded: 30 days at most
  if (number.empty() || end != number.c_str() + number.size() || !(value > 0) ||
      !(value * scale <= kMaxS)) {
    return InvalidArgumentError(what + " '" + text +
                                "' is not a positive duration such as 20s, 10m or 1h (30 days "
                                "at most)");
  }
  return value * scale;
}

double Now() { return FaultClockNow(); }

// One process of the system under test, from /proc.
struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  std::vector<std::string> argv{};
};

std::vector<ProcInfo> ListProcesses() {
  std::vector<ProcInfo> out;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    const std::string base = "/proc/" + std::string(e->d_name);
    std::ifstream stat(base + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 2));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (state == 'Z') continue;  // exited, not yet reaped
    ProcInfo p{.pid = static_cast<pid_t>(pid), .ppid = static_cast<pid_t>(ppid), .argv = {}};
    std::ifstream cmd(base + "/cmdline");
    for (std::string arg; std::getline(cmd, arg, '\0');) p.argv.push_back(arg);
    out.push_back(std::move(p));
  }
  closedir(dir);
  return out;
}

// The value of --id in `argv`, or "".
std::string IdArg(const std::vector<std::string>& argv) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == "--id") return argv[i + 1];
  }
  return "";
}

// The roles of the run supervised by `supervisor` by name ("relay", "manager", "actor",
// "rollout/0", ...), and the reward workers under each rollout.
struct RunProcesses {
  std::map<std::string, pid_t> roles;
  std::vector<pid_t> reward_workers;
};

RunProcesses FindRunProcesses(pid_t supervisor) {
  const std::vector<ProcInfo> all = ListProcesses();
  RunProcesses out;
  std::set<pid_t> rollouts;
  for (const ProcInfo& p : all) {
    if (p.ppid != supervisor || p.argv.size() < 2) continue;
    const std::string& verb = p.argv[1];
    if (verb == "relay" || verb == "manager" || verb == "actor") {
      out.roles[verb] = p.pid;
    } else if (verb == "rollout") {
      out.roles[IdArg(p.argv)] = p.pid;
      rollouts.insert(p.pid);
    }
  }
  // A rollout's descendants are its reward workers (a worker may run under a wrapper).
  std::set<pid_t> under = rollouts;
  for (bool grew = true; grew;) {
    grew = false;
    for (const ProcInfo& p : all) {
      if (under.count(p.ppid) != 0 && under.insert(p.pid).second) {
        out.reward_workers.push_back(p.pid);
        grew = true;
      }
    }
  }
  return out;
}

// Processes whose environment names one of `supervisors` as their supervisor: what a run left.
std::vector<ProcInfo> LeftoverProcesses(const std::set<pid_t>& supervisors) {
  std::vector<ProcInfo> out;
  for (const ProcInfo& p : ListProcesses()) {
    if (supervisors.count(p.pid) != 0) continue;
    std::ifstream env("/proc/" + std::to_string(p.pid) + "/environ");
    for (std::string var; std::getline(env, var, '\0');) {
      const std::string key = std::string(kSupervisorPidEnv) + "=";
      if (var.starts_with(key) &&
          supervisors.count(static_cast<pid_t>(std::atol(var.c_str() + key.size()))) != 0) {
        out.push_back(p);
        break;
      }
    }
  }
  return out;
}

// Shared-memory segments of the master relays of `supervisors`' runs.
std::vector<std::string> LeftoverSegments(const std::set<pid_t>& supervisors) {
  std::vector<std::string> out;
  for (pid_t s : supervisors) {
    for (std::string& name : launch::SharedMemorySegments(launch::RunShmPrefix(s))) {
      out.push_back(std::move(name));
    }
  }
  return out;
}

// TCP ports some socket still listens on (/proc/net/tcp and tcp6, state 0A), with the sockets'
// inodes.
std::multimap<int, std::string> ListeningPorts() {
  std::multimap<int, std::string> ports;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
            timeout >> inode) ||
          state != "0A") {
        continue;
      }
      const size_t colon = local.rfind(':');
      if (colon != std::string::npos) {
        ports.emplace(std::stoi(local.substr(colon + 1), nullptr, 16), inode);
      }
    }
  }
  return ports;
}

// The command line of the process that holds socket `inode`, or empty when none is found.
std::string SocketOwner(const std::string& inode) {
  const std::string link = "socket:[" + inode + "]";
  std::error_code ec;
  for (const auto& proc : fs::directory_iterator("/proc", ec)) {
    const std::string pid = proc.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (const auto& fd : fs::directory_iterator(proc.path() / "fd", fd_ec)) {
      std::error_code read_ec;
      if (fs::read_symlink(fd.path(), read_ec).string() != link) continue;
      std::ifstream cmdline(proc.path() / "cmdline");
      std::string text((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
      std::replace(text.begin(), text.end(), '\0', ' ');
      return text;
    }
  }
  return "";
}

// The manager and relay endpoints of every invocation (their "[run] N rollouts, manager E, relay
// E;" line) that a process of the run (one whose command line names the run's folder) still
// listens on after the run. Another process that took the port since is not the run's leak.
std::vector<std::string> ListenedPorts(const fs::path& dir, int invocations) {
  std::vector<std::string> out;
  const std::multimap<int, std::string> listening = ListeningPorts();
  for (int i = 0; i < invocations; ++i) {
    std::ifstream log(dir / ("chaos_run." + std::to_string(i) + ".log"));
    for (std::string line; std::getline(log, line);) {
      if (!line.starts_with("[run] ") || line.find(" rollouts, manager ") == std::string::npos) {
        continue;
      }
      for (const char* role : {"manager ", "relay "}) {
        const size_t at = line.find(role);
        const size_t end = line.find_first_of(",;", at);
        if (at == std::string::npos || end == std::string::npos) continue;
        const std::string endpoint =
            line.substr(at + std::strlen(role), end - at - std::strlen(role));
        const size_t colon = endpoint.rfind(':');
        if (colon == std::string::npos) continue;
        const int port = std::atoi(endpoint.c_str() + colon + 1);
        auto [first, last] = listening.equal_range(port);
        for (auto it = first; it != last; ++it) {
          const std::string owner = SocketOwner(it->second);
          if (owner.find(dir.string()) == std::string::npos) continue;
          out.push_back("port " + std::to_string(port) + " (the " + std::string(role) +
                        "endpoint " + endpoint + " of invocation " + std::to_string(i) +
                        ") is still listened on by " + owner.substr(0, 120));
        }
      }
    }
  }
  return out;
}

// The run's checkpoint folder on a tmpfs in this process's own mount namespace (its children,
// the run's roles, share it; nothing outside sees it, and it goes with the last of them), so that
// a full disk can be made and undone: Fill shrinks the tmpfs to what it holds, Free gives the
// space back. Unmount (also on destruction) moves the checkpoints onto the folder underneath, so
// the run can be resumed after chaos ends.
class CheckpointDisk {
 public:
  // Errors: FailedPrecondition when this process may not make a mount namespace or mount a tmpfs
  // (it needs root or CAP_SYS_ADMIN); Internal for the rest, naming the call and folder.
  static StatusOr<std::unique_ptr<CheckpointDisk>> Mount(const fs::path& dir) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return FailedPreconditionError(
          "--kill disk needs a mount namespace of its own (root or CAP_SYS_ADMIN): " +
          std::string(std::strerror(errno)));
    }
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return InternalError("cannot create " + dir.string() + ": " + ec.message());
    if (mount("laminar-chaos", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
      return FailedPreconditionError("--kill disk: cannot mount a tmpfs on " + dir.string() + ": " +
                                     std::strerror(errno));
    }
    std::unique_ptr<CheckpointDisk> disk(new CheckpointDisk(dir));
    disk->mounted_ = true;
    struct statvfs st {};
    if (statvfs(dir.c_str(), &st) != 0) return InternalError("statvfs " + dir.string());
    disk->full_bytes_ = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
    return disk;
  }
  ~CheckpointDisk() {
    if (Status st = Unmount(); !st.ok())
      std::fprintf(stderr, "[chaos] %s\n", st.ToString().c_str());
  }
  CheckpointDisk(const CheckpointDisk&) = delete;
  CheckpointDisk& operator=(const CheckpointDisk&) = delete;

  // Shrinks the tmpfs to the bytes it holds: every write after fails with ENOSPC.
  Status Fill() {
    for (int attempt = 0; attempt < 20; ++attempt) {
      struct statvfs st {};
      if (statvfs(dir_.c_str(), &st) != 0) return InternalError("statvfs " + dir_.string());
      const uint64_t used = static_cast<uint64_t>(st.f_blocks - st.f_bfree) * st.f_frsize;
      // EINVAL: a write grew it under the size asked for; measure again.
      if (Remount(std::max<uint64_t>(used, st.f_frsize)).ok()) return OkStatus();
    }
    return InternalError("cannot shrink the tmpfs on " + dir_.string() + " to what it holds");
  }
  Status Free() { return Remount(full_bytes_); }

  // Copies every checkpoint out (the `latest` pointer last, so that it never names a folder
  // not yet copied), unmounts, and moves them onto the folder underneath. On an error the copy
  // is kept and named.
  Status Unmount() {
    if (!mounted_) return OkStatus();
    mounted_ = false;
    (void)Free();
    const fs::path copy = dir_.parent_path() / (dir_.filename().string() + ".chaos-copy");
    std::error_code ec;
    fs::remove_all(copy, ec);
    fs::create_directories(copy, ec);
    std::vector<fs::path> entries;
    for (const auto& e : fs::directory_iterator(dir_, ec)) entries.push_back(e.path());
    std::stable_partition(entries.begin(), entries.end(),
                          [](const fs::path& p) { return p.filename() != "latest"; });
    for (const fs::path& from : entries) {
      fs::copy(from, copy / from.filename(),
               fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
      if (ec) {
        (void)umount2(dir_.c_str(), MNT_DETACH);
        return InternalError("copying " + from.string() + " off the chaos tmpfs failed (" +
                             ec.message() + "); what was copied is in " + copy.string());
      }
    }
    if (umount2(dir_.c_str(), 0) != 0 && umount2(dir_.c_str(), MNT_DETACH) != 0) {
      return InternalError("umount " + dir_.string() + ": " + std::strerror(errno) +
                           "; the checkpoints are copied to " + copy.string());
    }
    for (const fs::path& from : entries) {
      fs::rename(copy / from.filename(), dir_ / from.filename(), ec);
      if (ec) {
        return InternalError("cannot move " + (copy / from.filename()).string() + " to " +
                             dir_.string() + ": " + ec.message());
      }
    }
    fs::remove(copy, ec);  // empty now
    return OkStatus();
  }

 private:
  explicit CheckpointDisk(fs::path dir) : dir_(std::move(dir)) {}
  Status Remount(uint64_t bytes) {
    const std::string options = "size=" + std::to_string(bytes);
    if (mount("laminar-chaos", dir_.c_str(), "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV,
              options.c_str()) != 0) {
      return InternalError("remount " + dir_.string() + " " + options + ": " +
                           std::strerror(errno));
    }
    return OkStatus();
  }

  fs::path dir_;
  uint64_t full_bytes_ = 0;
  bool mounted_ = false;
};

// How often `needle` occurs in the file at `path` (0 when unreadable).
size_t CountInFile(const fs::path& path, std::string_view needle) {
  auto text = ReadFileToString(path.string());
  if (!text.ok()) return 0;
  size_t n = 0;
  for (size_t at = text->find(needle); at != std::string::npos; at = text->find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// What the actor's log says when a checkpoint failed for want of space (actor/actor.cc).
constexpr std::string_view kDiskFullLine = "failed, the disk is full";

// One injected fault and what became of it.
struct Injection {
  double at = 0;
  std::string kind{};    // rollout, straggler, reward, relay, manager, actor, disk
  std::string how{};     // kill, hang, straggle, fill
  std::string target{};  // the role ("rollout/1", "reward", "actor", ...)
  pid_t pid = 0;
  bool resumed = false;     // the run ended and was resumed
  double detected = NAN;    // its record's detection time
  double recovered = NAN;   // service restored: the record's recovery, or the resumed run up
  double first_step = NAN;  // a resumed run's first step trained
  bool demarcated = false;
};

// A fault in progress: a stopped process to continue, a straggler's duty cycle, or a full disk:
// freed once the actor has failed a save (`disk_full_lines` is its log's count before), then
// settled once the actor has recorded the fault (after its next successful save).
struct Pending {
  pid_t pid = 0;
  double until = 0;
  bool straggle = false;
  bool disk = false;
  size_t disk_full_lines = 0;
  bool disk_freed = false;
  double at = 0;  // when the disk filled
};

class ChaosRun {
 public:
  ChaosRun(const ChaosArgs& a, fs::path dir, std::vector<std::string> kinds, double every_s,
           double for_s, double heartbeat_timeout_s, std::string self,
           CheckpointDisk* disk = nullptr)
      : a_(a),
        dir_(std::move(dir)),
        kinds_(std::move(kinds)),
        every_s_(every_s),
        for_s_(for_s),
        heartbeat_timeout_s_(heartbeat_timeout_s),
        self_(std::move(self)),
        disk_(disk),
        rng_(a.seed) {}

  // Runs, injects, stops; the audit's report. Errors: a run that cannot start or resume.
  StatusOr<Json> Go(const sigset_t& stop_signals);
  // After Go, also after its error: the run stopped (Ctrl-C, then SIGKILL) and every process it
  // started gone (killed after a minute), so that nothing writes the checkpoints any more.
  void Quiesce();

 private:
  Status StartRun(bool resume);
  // True once the current invocation has started every role (its "[run] N rollouts" line).
  bool RunIsUp();
  // The rollouts that hold prompt groups now, from the manager's ledger (asked over its control
  // socket, as the actor asks for it); empty when the manager does not answer.
  std::set<std::string> RolloutsHoldingWork() const;
  void Inject(double now);
  void Tick(double now);
  void ReleaseAll();
  fs::path ActorLog() const { return dir_ / "logs" / "actor.log"; }
  static constexpr double kDiskPhaseS = 300;
  double last_disk_poll_ = 0;
  // Lines in metrics.jsonl, one a step: polled, so counted without parsing them.
  size_t StepsSoFar() const {
    std::ifstream in(dir_ / "metrics.jsonl");
    return static_cast<size_t>(
        std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n'));
  }
  Json Audit(double wall_s) const;

  const ChaosArgs& a_;
  fs::path dir_;
  std::vector<std::string> kinds_;
  double every_s_, for_s_, heartbeat_timeout_s_;
  // How long a straggler is slowed.
  double StraggleSeconds() const { return 4 * heartbeat_timeout_s_; }
  std::string self_;
  CheckpointDisk* disk_;  // with --kill disk
  std::mt19937_64 rng_;
  Process run_;
  int invocations_ = 0;
  std::set<pid_t> supervisors_;
  std::vector<Injection> injections_;
  std::vector<Pending> pending_;
  std::vector<std::string> notes_;
  double start_ = 0;
  fs::path run_log_;     // the current invocation's stderr
  bool run_up_ = false;  // RunIsUp's answer, once true
  // A straggler finds no rollout holding work (slowing an idle one shows nothing): the same kind
  // is tried again a second later, for up to kStraggleTries seconds.
  std::string retry_kind_;
  int retries_ = 0;
  static constexpr int kStraggleTries = 60;
};

Status ChaosRun::StartRun(bool resume) {
  std::vector<std::string> argv = {self_, "run", a_.recipe};
  argv.insert(argv.end(), a_.overrides.begin(), a_.overrides.end());
  argv.push_back("actor.trajectory_log=" + (dir_ / "trajectories.jsonl").string());
  argv.insert(argv.end(), {"--run-dir", dir_.string()});
  if (a_.rollouts > 0) argv.insert(argv.end(), {"--rollouts", std::to_string(a_.rollouts)});
  if (resume) argv.push_back("--resume");
  // Faults come every few seconds for minutes: the relay and each rollout may die many times.
  argv.insert(argv.end(), {"--max-restarts", "1000"});
  run_log_ = dir_ / ("chaos_run." + std::to_string(invocations_++) + ".log");
  run_up_ = false;
  LAMINAR_ASSIGN_OR_RETURN(run_, Process::Spawn(argv, run_log_.string()));
  supervisors_.insert(run_.pid());
  return OkStatus();
}

bool ChaosRun::RunIsUp() {
  if (run_up_) return true;
  auto text = ReadFileToString(run_log_.string());
  run_up_ = text.ok() && text->find(" rollouts, manager ") != std::string::npos;
  return run_up_;
}

std::set<std::string> ChaosRun::RolloutsHoldingWork() const {
  auto text = ReadFileToString(run_log_.string());
  const std::string endpoint = text.ok() ? launch::ManagerEndpointInRunLog(*text) : "";
  if (endpoint.empty()) return {};
  StatusOr<Json> ledger = launch::AskManagerLedger(endpoint, "chaos", 2000);
  std::set<std::string> holding;
  if (!ledger.ok()) return holding;
  for (const Json& g : ledger->value("in_flight", Json::array())) {
    if (g.is_object() && g.value("rollout", "") != "") holding.insert(g["rollout"]);
  }
  return holding;
}

void ChaosRun::Inject(double now) {
  const RunProcesses procs = FindRunProcesses(run_.pid());
  std::uniform_int_distribution<size_t> pick_kind(0, kinds_.size() - 1);
  Injection inj{.at = now, .kind = retry_kind_.empty() ? kinds_[pick_kind(rng_)] : retry_kind_};
  retry_kind_.clear();
  if (inj.kind == "rollout" || inj.kind == "straggler") {
    // A straggler slows a rollout that holds work: one with nothing to do shows no slowness.
    const std::set<std::string> holding =
        inj.kind == "straggler" ? RolloutsHoldingWork() : std::set<std::string>{};
    std::vector<std::pair<std::string, pid_t>> rollouts;
    for (const auto& [name, pid] : procs.roles) {
      if (name.starts_with("rollout/") && (inj.kind != "straggler" || holding.contains(name))) {
        rollouts.emplace_back(name, pid);
      }
    }
    if (rollouts.empty()) {
      if (inj.kind == "straggler" && ++retries_ < kStraggleTries) {
        retry_kind_ = inj.kind;
      } else if (inj.kind == "straggler") {
        const std::string note = "a straggler found no rollout holding work for " +
                                 std::to_string(kStraggleTries) + " s: skipped";
        notes_.push_back(note);
      }
      return;  // none up (restarting) or none busy: try again later
    }
    retries_ = 0;
    std::uniform_int_distribution<size_t> pick(0, rollouts.size() - 1);
    std::tie(inj.target, inj.pid) = rollouts[pick(rng_)];
    std::uniform_int_distribution<int> how(0, 1);
    inj.how = inj.kind == "straggler" ? "straggle" : how(rng_) == 0 ? "kill" : "hang";
  } else if (inj.kind == "reward") {
    if (procs.reward_workers.empty()) {
      const std::string note = "no reward worker process to kill (the recipe's reward is built in)";
      if (std::find(notes_.begin(), notes_.end(), note) == notes_.end()) notes_.push_back(note);
      return;
    }
    std::uniform_int_distribution<size_t> pick(0, procs.reward_workers.size() - 1);
    inj.target = "reward";
    inj.pid = procs.reward_workers[pick(rng_)];
    inj.how = "kill";
  } else if (inj.kind == "disk") {
    auto it = procs.roles.find("actor");
    if (it == procs.roles.end() || disk_ == nullptr) return;
    inj.target = "actor";  // who writes the checkpoints, and records the fault
    inj.pid = it->second;
    inj.how = "fill";
  } else {
    auto it = procs.roles.find(inj.kind);
    if (it == procs.roles.end()) return;
    inj.target = it->first;
    inj.pid = it->second;
    std::uniform_int_distribution<int> how(0, 1);
    inj.how = how(rng_) == 0 ? "kill" : "hang";
  }
  if (inj.how == "kill") {
    kill(inj.pid, SIGKILL);
  } else if (inj.how == "fill") {
    if (Status st = disk_->Fill(); !st.ok()) {
      std::fprintf(stderr, "[chaos] %s\n", st.ToString().c_str());
      return;
    }
    // Full until a save has failed, then pending until the fault is recorded (each phase
    // bounded: a run that stops saving).
    pending_.push_back({.pid = inj.pid,
                        .until = now + kDiskPhaseS,
                        .disk = true,
                        .disk_full_lines = CountInFile(ActorLog(), kDiskFullLine),
                        .at = now});
  } else if (inj.how == "hang") {
    // Stopped until it is declared hung: a rollout by the manager (heartbeat timeout), the
    // others by `laminar run` (twice that), which kills them.
    kill(inj.pid, SIGSTOP);
    const double declared = inj.target.starts_with("rollout/")
                                ? heartbeat_timeout_s_
                                : launch::HangTimeoutS(heartbeat_timeout_s_) + 1;
    pending_.push_back({.pid = inj.pid, .until = now + declared + 2, .straggle = false});
  } else {
    pending_.push_back({.pid = inj.pid, .until = now + StraggleSeconds(), .straggle = true});
  }
  std::fprintf(stderr, "[chaos] %.1f s: %s %s (pid %d)\n", now - start_, inj.how.c_str(),
               inj.target.c_str(), static_cast<int>(inj.pid));
  injections_.push_back(std::move(inj));
}

void ChaosRun::Tick(double now) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->disk) {
      if (now - last_disk_poll_ < 0.2) {
        ++it;
        continue;
      }
      last_disk_poll_ = now;
      if (!it->disk_freed) {
        if (now >= it->until || CountInFile(ActorLog(), kDiskFullLine) > it->disk_full_lines) {
          if (Status st = disk_->Free(); !st.ok()) {
            std::fprintf(stderr, "[chaos] %s\n", st.ToString().c_str());
            ++it;  // try again at the next poll
            continue;
          }
          it->disk_freed = true;
          it->until = now + kDiskPhaseS;
        }
        ++it;
        continue;
      }
      bool recorded = false;
      for (const Json& f : launch::ReadJsonLines(dir_ / "faults.jsonl")) {
        recorded = recorded || (f.value("kind", "") == "disk_full" &&
                                f.value("detected_unix_s", 0.0) >= it->at - 1);
      }
      it = recorded || now >= it->until ? pending_.erase(it) : std::next(it);
      continue;
    }
    if (now >= it->until) {
      kill(it->pid, SIGCONT);
      it = pending_.erase(it);
      continue;
    }
    if (it->straggle) {
      // Stopped for nine tenths of every 200 ms.
      const double phase = std::fmod(now, 0.2);
      kill(it->pid, phase < 0.18 ? SIGSTOP : SIGCONT);
    }
    ++it;
  }
}

void ChaosRun::ReleaseAll() {
  for (const Pending& p : pending_) {
    if (p.disk) {
      (void)disk_->Free();
    } else {
      kill(p.pid, SIGCONT);
    }
  }
  pending_.clear();
}

StatusOr<Json> ChaosRun::Go(const sigset_t& stop_signals) {
  const double start = start_ = Now();
  LAMINAR_RETURN_IF_ERROR(StartRun(/*resume=*/false));
  double next = 0;               // set once the first step is trained
  int64_t steps_at_resume = -1;  // 0 while a resumed run has not trained a step
  bool awaiting_end = false;     // the manager or actor was killed: the run is ending
  double last_step_check = 0;
  bool interrupted = false;
  int exit_code = -1;
  while (true) {
    const timespec wait = {.tv_sec = 0, .tv_nsec = 20'000'000};
    if (sigtimedwait(&stop_signals, nullptr, &wait) > 0) {
      interrupted = true;
      break;
    }
    const double now = Now();
    Tick(now);
    if (!run_.Running()) {
      auto code = run_.Wait(1000);
      exit_code = code.ok() ? *code : -1;
      if (exit_code == 0) break;  // the recipe's steps or data are done
      if (!awaiting_end) {
        return InternalError("the run stopped (" + ExitCodeDetail(exit_code) +
                             ") without an injected fault to explain it; see " + dir_.string() +
                             "/chaos_run." + std::to_string(invocations_ - 1) + ".log");
      }
      // A killed manager or actor ends the run: resume it from its newest checkpoint.
      awaiting_end = false;
      ReleaseAll();
      injections_.back().resumed = true;
      std::fprintf(stderr, "[chaos] the run stopped (%s); resuming it\n",
                   ExitCodeDetail(exit_code).c_str());
      steps_at_resume = 0;
      LAMINAR_RETURN_IF_ERROR(StartRun(/*resume=*/true));
      continue;
    }
    // A resumed run has recovered when every role is up again (training resumes: the actor
    // waits for its first batch); its first step trained is reported beside it.
    if (steps_at_resume >= 0 && now - last_step_check >= 0.2) {
      last_step_check = now;
      Injection& last = injections_.back();
      if (!std::isfinite(last.recovered) && RunIsUp()) last.recovered = now;
      // metrics.jsonl is cut back to the checkpoint when the run resumes: the first step is
      // the first step line of this invocation's console.
      if (CountInFile(run_log_, "[actor] step ") > 0) {
        if (!std::isfinite(last.recovered)) last.recovered = now;
        last.first_step = now;
        steps_at_resume = -1;
      }
    }
    // Past the injection window, the last fault settles (a hang is declared, a straggler
    // recovers, a resumed run trains) before the run is stopped.
    if (now - start >= for_s_) {
      const double last = injections_.empty() ? start : injections_.back().at;
      if (pending_.empty() && steps_at_resume < 0 && !awaiting_end &&
          now - last >= 2 * heartbeat_timeout_s_ + 2) {
        break;
      }
      if (now - start >= for_s_ + 300) break;  // it does not settle: the audit will say so
      continue;
    }
    if (awaiting_end) {
      // A killed manager or actor ends the run; nothing more is injected until it has.
      if (now - injections_.back().at > 120) {
        return InternalError("the run did not stop within 120 s after its " +
                             injections_.back().target + " was killed; see " + dir_.string() +
                             "/chaos_run." + std::to_string(invocations_ - 1) + ".log");
      }
      continue;
    }
    if (next == 0) {
      if (RunIsUp() && StepsSoFar() > 0) {
        std::uniform_real_distribution<double> jitter(0.5, 1.5);
        next = now + every_s_ * jitter(rng_);
      }
      continue;
    }
    // Faults strike a run whose roles are all up (one failing to start ends the run).
    if (now >= next && pending_.empty() && steps_at_resume < 0 && RunIsUp()) {
      const size_t before = injections_.size();
      Inject(now);
      if (injections_.size() > before) {
        const std::string& kind = injections_.back().kind;
        awaiting_end = kind == "manager" || kind == "actor";
      }
      std::uniform_real_distribution<double> jitter(0.5, 1.5);
      next = retry_kind_.empty() ? now + every_s_ * jitter(rng_) : now + 1;
    }
  }
  ReleaseAll();
  if (run_.Running()) {
    run_.Signal(SIGINT);  // the actor saves a checkpoint, then every role stops
    if (auto code = run_.Wait(300000); code.ok()) exit_code = *code;
  }
  Json report = Audit(Now() - start);
  report["interrupted"] = interrupted;
  report["last_exit"] = exit_code;
  return report;
}

void ChaosRun::Quiesce() {
  ReleaseAll();
  if (run_.Running()) {
    run_.Signal(SIGINT);
    if (!run_.Wait(300000).ok()) {
      run_.Signal(SIGKILL);
      (void)run_.Wait(5000);
    }
  }
  const double deadline = Now() + 60;
  while (true) {
    const std::vector<ProcInfo> left = LeftoverProcesses(supervisors_);
    if (left.empty()) return;
    if (Now() >= deadline) {
      for (const ProcInfo& p : left) kill(p.pid, SIGKILL);
      if (Now() >= deadline + 5) return;
    }
    usleep(100'000);
  }
}

Json ChaosRun::Audit(double wall_s) const {
  Json r = launch::AuditExactlyOnce(dir_ / "checkpoints", dir_ / "trajectories.jsonl");
  const int64_t last_step = r.value("steps", int64_t{0});

  // Versions per rollout, as the manager saw its trajectories arrive (the training order mixes
  // them: a group completes when its last sample does, also one moved to another rollout).
  int64_t regressions = 0;
  for (const Json& m : launch::ReadJsonLines(dir_ / "metrics.jsonl")) {
    regressions =
        std::max(regressions, static_cast<int64_t>(m.value("manager/version_regressions", 0.0)));
  }
  r["version_regressions"] = regressions;

  // Leaks.
  Json leaked = Json::array();
  for (const ProcInfo& p : LeftoverProcesses(supervisors_)) {
    std::string cmd;
    for (const std::string& arg : p.argv) cmd += (cmd.empty() ? "" : " ") + arg;
    leaked.push_back("process " + std::to_string(p.pid) + ": " + cmd.substr(0, 120));
  }
  for (const std::string& seg : LeftoverSegments(supervisors_)) {
    leaked.push_back("shared memory /dev/shm/" + seg);
  }
  for (const std::string& port : ListenedPorts(dir_, invocations_)) leaked.push_back(port);
  double kv_leaked = 0;
  for (const Json& m : launch::ReadJsonLines(dir_ / "metrics.jsonl")) {
    kv_leaked = std::max(kv_leaked, m.value("manager/kv_blocks_leaked", 0.0));
  }
  if (kv_leaked > 0) {
    leaked.push_back(
        "KV blocks: a rollout held " + std::to_string(static_cast<int64_t>(kv_leaked)) +
        " with no sample running (manager/kv_blocks_leaked; the manager's log names it)");
  }
  r["leaked"] = leaked;

  // Demarcation and recovery: each injection against faults.jsonl and the steps after it.
  const std::vector<Json> faults = ReadFaults((dir_ / "faults.jsonl").string());
  std::map<std::string, std::string> expected_kind = {
      {"kill", "crash"}, {"hang", "hang"}, {"straggle", "straggler"}, {"fill", "disk_full"}};
  Json per = Json::array();
  std::map<std::string, std::vector<double>> detection_by_kind, recovery_by_kind,
      first_step_by_kind;
  int64_t undemarcated = 0;
  // Every role runs on this machine: each record must name it.
  const std::string host = Hostname();
  std::vector<bool> explained(faults.size(), false);
  for (const Injection& inj : injections_) {
    Injection out = inj;
    const std::string want = expected_kind[inj.how];
    // A straggler is found while it straggles; the rest within two minutes (a resume included).
    const double window_s = inj.how == "straggle" ? StraggleSeconds() : 120;
    for (size_t k = 0; k < faults.size(); ++k) {
      const Json& f = faults[k];
      const double detected = f.value("detected_unix_s", 0.0);
      if (explained[k] || f.value("kind", "") != want || f.value("role", "") != inj.target ||
          f.value("host", "") != host || detected < inj.at - 1 || detected > inj.at + window_s) {
        continue;
      }
      // A killed rollout whose restart outlasts the heartbeat timeout is also declared hung by the
      // manager before it is back: the same fault, seen from there.
      const double back = f["recovered_unix_s"].is_number()
                              ? f["recovered_unix_s"].get<double>() + 1
                              : inj.at + window_s;
      for (size_t j = 0;
           inj.how == "kill" && inj.target.starts_with("rollout/") && j < faults.size(); ++j) {
        const double seen = faults[j].value("detected_unix_s", 0.0);
        explained[j] =
            explained[j] ||
            (faults[j].value("kind", "") == "hang" && faults[j].value("role", "") == inj.target &&
             seen >= inj.at && seen <= back && faults[j].value("seen_by", "") == "manager");
      }
      explained[k] = true;
      // The same fault seen again while it lasts (a slowed rollout that looked fine for a moment
      // and slow again): its records are this injection's too.
      for (size_t j = k + 1; inj.how == "straggle" && j < faults.size(); ++j) {
        const double again = faults[j].value("detected_unix_s", 0.0);
        explained[j] = explained[j] || (faults[j].value("kind", "") == want &&
                                        faults[j].value("role", "") == inj.target &&
                                        again >= detected && again <= inj.at + window_s);
      }
      out.demarcated = true;
      out.detected = detected;
      if (!std::isfinite(out.recovered) && f["recovered_unix_s"].is_number()) {
        out.recovered = f["recovered_unix_s"].get<double>();
      }
      break;
    }
    undemarcated += !out.demarcated;
    // Recovery counts from when the fault struck the run: the injection, but for a full disk the
    // first save that failed (a disk full while nothing writes to it costs nothing; the time
    // until then is its detection).
    const double detection = out.detected - inj.at;
    const double struck = inj.how == "fill" ? out.detected : inj.at;
    const double recovery = out.recovered - struck;
    if (std::isfinite(detection)) {
      detection_by_kind[inj.how + " " + inj.kind].push_back(std::max(0.0, detection));
    }
    if (std::isfinite(recovery)) recovery_by_kind[inj.how + " " + inj.kind].push_back(recovery);
    const double first_step = inj.first_step - inj.at;
    if (std::isfinite(first_step)) {
      first_step_by_kind[inj.how + " " + inj.kind].push_back(first_step);
    }
    per.push_back({{"at_s", inj.at},
                   {"kind", inj.kind},
                   {"how", inj.how},
                   {"target", inj.target},
                   {"host", out.demarcated ? host : ""},
                   {"pid", inj.pid},
                   {"resumed", inj.resumed},
                   {"demarcated", out.demarcated},
                   {"detection_s", std::isfinite(detection) ? Json(detection) : Json(nullptr)},
                   {"recovery_s", std::isfinite(recovery) ? Json(recovery) : Json(nullptr)},
                   {"first_step_s", std::isfinite(first_step) ? Json(first_step) : Json(nullptr)}});
  }
  r["injections"] = per;
  r["undemarcated"] = undemarcated;
  // Records no injection explains: a fault seen where none was made, or named wrongly.
  Json unexplained = Json::array();
  for (size_t k = 0; k < faults.size(); ++k) {
    if (explained[k]) continue;
    const Json& f = faults[k];
    unexplained.push_back(
        f.value("kind", "?") + " " + f.value("role", "?") + "@" + f.value("host", "?") + " at +" +
        std::to_string(static_cast<int>(f.value("detected_unix_s", 0.0) - start_)) +
        " s: " + f.value("detail", ""));
  }
  r["unexplained"] = unexplained;
  auto summary = [](const std::map<std::string, std::vector<double>>& by_kind) {
    Json out = Json::object();
    for (const auto& [kind, times] : by_kind) {
      double sum = 0, worst = 0;
      for (double t : times) {
        sum += t;
        worst = std::max(worst, t);
      }
      out[kind] = {{"count", times.size()},
                   {"mean_s", sum / static_cast<double>(times.size())},
                   {"max_s", worst}};
    }
    return out;
  };
  r["detection"] = summary(detection_by_kind);
  r["recovery"] = summary(recovery_by_kind);
  r["first_step_after_resume"] = summary(first_step_by_kind);
  r["faults_recorded"] = faults.size();

  // The effective training time ratio over the whole chaos run: the kept steps' time over the
  // wall time, resumes included.
  std::map<int64_t, double> step_s;
  for (const Json& m : launch::ReadJsonLines(dir_ / "metrics.jsonl")) {
    const auto step = static_cast<int64_t>(m.value("training/global_step", -1.0));
    if (step >= 1 && step <= last_step) step_s[step] = m.value("timing_s/step", 0.0);
  }
  double kept_s = 0;
  for (const auto& [step, s] : step_s) kept_s += s;
  r["wall_s"] = wall_s;
  r["ettr"] = wall_s > 0 ? std::min(1.0, kept_s / wall_s) : 0.0;
  r["notes"] = notes_;
  r["invocations"] = invocations_;
  const bool clean = r["lost"] == 0 && r["duplicated"] == 0 && leaked.empty() && regressions == 0 &&
                     undemarcated == 0 && unexplained.empty() && r["unaccounted_extra"] == 0;
  r["clean"] = clean;
  return r;
}

void PrintReport(const Json& r, const fs::path& path) {
  std::fprintf(stderr, "[chaos] %zu faults injected over %.0f s, %d run invocation(s):\n",
               r["injections"].size(), r["wall_s"].get<double>(), r["invocations"].get<int>());
  std::map<std::string, std::pair<int, int>> by;  // kind -> injected, demarcated
  for (const Json& i : r["injections"]) {
    auto& [n, d] = by[i["how"].get<std::string>() + " " + i["kind"].get<std::string>()];
    ++n;
    d += i["demarcated"].get<bool>();
  }
  std::fprintf(stderr, "  %-18s %8s %10s %10s %10s %10s %12s\n", "fault", "injected", "demarcated",
               "detection", "recovery", "max", "first step");
  // "12.3s", or "-" where there is no value (nothing recovered, no resume).
  auto seconds = [](const Json& summary, const char* field) {
    if (!summary.is_object()) return std::string("-");
    char text[32];
    std::snprintf(text, sizeof(text), "%.1fs", summary[field].get<double>());
    return std::string(text);
  };
  for (const auto& [kind, nd] : by) {
    const Json det = r["detection"].value(kind, Json());
    const Json rec = r["recovery"].value(kind, Json());
    const Json first = r["first_step_after_resume"].value(kind, Json());
    std::fprintf(stderr, "  %-18s %8d %10d %10s %10s %10s %12s\n", kind.c_str(), nd.first,
                 nd.second, seconds(det, "mean_s").c_str(), seconds(rec, "mean_s").c_str(),
                 seconds(rec, "max_s").c_str(), seconds(first, "mean_s").c_str());
  }
  std::fprintf(stderr,
               "  steps %lld, samples trained %lld; lost %lld, duplicated %lld, version "
               "regressions %lld, leaked %zu; ETTR %.3f\n",
               static_cast<long long>(r["steps"].get<int64_t>()),
               static_cast<long long>(r["samples_trained"].get<int64_t>()),
               static_cast<long long>(r["lost"].get<int64_t>()),
               static_cast<long long>(r["duplicated"].get<int64_t>()),
               static_cast<long long>(r["version_regressions"].get<int64_t>()), r["leaked"].size(),
               r["ettr"].get<double>());
  // Each fault with where its record placed it.
  for (const Json& i : r["injections"]) {
    auto value = [&](const char* field) {
      return i[field].is_number() ? std::to_string(i[field].get<double>()).substr(0, 5) + "s"
                                  : std::string("-");
    };
    std::fprintf(stderr, "  %s %s: %s, detected %s, recovered %s\n",
                 i["how"].get<std::string>().c_str(), i["target"].get<std::string>().c_str(),
                 i["demarcated"].get<bool>()
                     ? ("recorded on " + i["host"].get<std::string>()).c_str()
                     : "NOT recorded",
                 value("detection_s").c_str(), value("recovery_s").c_str());
  }
  for (const Json& u : r["unexplained"]) {
    std::fprintf(stderr, "  unexplained record: %s\n", u.get<std::string>().c_str());
  }
  for (const Json& l : r["leaked"])
    std::fprintf(stderr, "  leaked: %s\n", l.get<std::string>().c_str());
  for (const Json& n : r["notes"])
    std::fprintf(stderr, "  note: %s\n", n.get<std::string>().c_str());
  std::fprintf(stderr, "[chaos] %s; report %s\n", r["clean"].get<bool>() ? "clean" : "NOT clean",
               path.string().c_str());
}

int RunChaos(const ChaosArgs& a) {
  const sigset_t stop_signals = launch::BlockStopSignals();

  auto every = ParseDuration(a.every, "--every");
  if (!every.ok()) return CommandFail("chaos", every.status().message(), 2);
  auto duration = ParseDuration(a.duration, "--for");
  if (!duration.ok()) return CommandFail("chaos", duration.status().message(), 2);
  std::vector<std::string> kinds;
  std::stringstream list(a.kill);
  for (std::string k; std::getline(list, k, ',');) {
    static const std::set<std::string> kKinds = {"rollout", "straggler", "reward", "relay",
                                                 "manager", "actor",     "disk"};
    if (kKinds.count(k) == 0) {
      return CommandFail("chaos",
                         "--kill '" + k +
                             "' is not one of rollout, straggler, reward, relay, manager, actor, "
                             "disk",
                         2);
    }
    kinds.push_back(k);
  }
  if (kinds.empty()) return CommandFail("chaos", "--kill names no fault", 2);
  auto recipe = recipe::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return Fail(recipe.status().message());
  const bool fill_disk = std::find(kinds.begin(), kinds.end(), "disk") != kinds.end();
  if (fill_disk && recipe->GetInt("actor.save_every") <= 0) {
    return CommandFail("chaos",
                       "--kill disk needs checkpoints during the run: set actor.save_every "
                       "(it is 0)",
                       2);
  }
  const fs::path dir = !a.run_dir.empty()
                           ? fs::path(a.run_dir)
                           : fs::path("runs") / ("chaos-" + fs::path(a.recipe).stem().string());
  // Anything an earlier run leaves (its audit would read it as this run's).
  for (const char* left : {"checkpoints", "trajectories.jsonl", "metrics.jsonl", "faults.jsonl",
                           "chaos_report.json", "logs"}) {
    if (fs::exists(dir / left)) {
      return Fail(dir.string() + " holds an earlier run (" + left +
                  "): a chaos run starts afresh (choose another --run-dir)");
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Fail("cannot create " + dir.string() + ": " + ec.message());
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return Fail("cannot find this binary: " + ec.message());
  std::unique_ptr<CheckpointDisk> disk;
  if (fill_disk) {
    auto mounted = CheckpointDisk::Mount(dir / "checkpoints");
    if (!mounted.ok()) return Fail(mounted.status().message());
    disk = std::move(*mounted);
  }
  // Chaos asks the manager which rollouts hold work (for stragglers): with the run's keys, if any.
  if (Status st = launch::SecureRunTransport(*recipe); !st.ok()) return Fail(st.message());
  ChaosRun chaos(a, dir, kinds, *every, *duration, recipe->GetFloat("rollout.heartbeat_timeout_s"),
                 self.string(), disk.get());
  auto report = chaos.Go(stop_signals);
  chaos.Quiesce();
  if (disk) {
    // The checkpoints leave the tmpfs only now that nothing writes them.
    if (Status st = disk->Unmount(); !st.ok()) {
      return Fail(report.ok() ? st.message() : report.status().ToString() + "; " + st.ToString());
    }
  }
  if (!report.ok()) return Fail(report.status().message());
  (*report)["seed"] = a.seed;
  (*report)["kill"] = kinds;
  const fs::path path = dir / "chaos_report.json";
  std::ofstream(path) << report->dump(2) << "\n";
  PrintReport(*report, path);
  return (*report)["clean"].get<bool>() ? 0 : 1;
}

std::function<int()> SetupChaos(CLI::App* app) {
  auto a = std::make_shared<ChaosArgs>();
  app->add_option("recipe", a->recipe, "the run's recipe (YAML)")->required();
  app->add_option("overrides", a->overrides, "dotted overrides, e.g. actor.save_every=2");
  app->add_option("--kill", a->kill,
                  "what to hit, comma-separated: rollout (killed or hung), straggler (a rollout "
                  "holding work slowed down), reward (a worker killed), relay (killed or hung; "
                  "restarted in place), manager, actor (killed or hung; the run is resumed), disk "
                  "(the checkpoints' disk full until a save fails; needs root)")
      ->capture_default_str();
  app->add_option("--every", a->every, "mean time between faults (20s, 1m, ...)")
      ->capture_default_str();
  app->add_option("--for", a->duration, "how long to inject faults before stopping the run")
      ->capture_default_str();
  app->add_option("--seed", a->seed, "seed of the fault times, kinds and targets")
      ->check(kNonNegative)
      ->capture_default_str();
  app->add_option("--run-dir", a->run_dir, "the run's folder (default runs/chaos-<recipe>)");
  app->add_option("--rollouts", a->rollouts, "rollout processes (default: rollout.num_workers)")
      ->check(CLI::Range(1, 1024));
  return [a] { return RunChaos(*a); };
}

}  // namespace

LAMINAR_REGISTER_COMMAND("chaos",
                         "run a recipe while killing, hanging and slowing its roles at random, "
                         "then audit: nothing lost or trained twice, nothing leaked, each fault "
                         "demarcated, recovery times and ETTR",
                         SetupChaos);

}  // namespace laminar::cli
