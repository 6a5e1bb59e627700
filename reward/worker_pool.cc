// Sandboxed reward worker processes: the pool, its protocol and the process groups it kills; see
// worker_pool.h.
#include "reward/worker_pool.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/fault_log.h"
#include "core/host.h"
#include "core/logging.h"
#include "core/mutex.h"
#include "core/pids_cgroup.h"
#include "core/process.h"

namespace laminar::reward {
namespace {

int ToMs(double seconds) { return static_cast<int>(std::ceil(seconds * 1000)); }

// Names the pids cgroups of reward workers: "laminar-reward-<pid>-<pool>-<worker>".
constexpr const char* kCgroupPrefix = "laminar-reward";

std::vector<std::string> SandboxArgv(const RewardWorkerOptions& o);

// One worker: its process and, when the sandbox bounds processes, the pids cgroup it runs in
// (which holds whatever it started, also what left its process group).
struct Worker {
  Process process;
  PidsCgroup cage;
};

// The workers behind one reward. Thread-safe: `mu_` guards `idle_`; a Worker is used only by the
// thread that took its index off `idle_`.
class RewardWorkerPool {
 public:
  explicit RewardWorkerPool(RewardWorkerOptions options)
      : options_(std::move(options)),
        tag_(options_.tag),
        argv_(SandboxArgv(options_)),
        workers_(static_cast<size_t>(options_.num_workers)) {
    for (int i = options_.num_workers - 1; i >= 0; --i) idle_.push_back(i);
  }
  RewardWorkerPool(const RewardWorkerPool&) = delete;
  RewardWorkerPool& operator=(const RewardWorkerPool&) = delete;

  ~RewardWorkerPool() {
    // End of stdin first for all, so that they exit together; then reap, killing stragglers.
    for (Worker& w : workers_) w.process.CloseStdin();
    for (Worker& w : workers_) Stop(w, /*grace_ms=*/2000);
  }

  // Starts worker 0 now, so that bad user code is reported at creation.
  Status Validate() { return Start(workers_[0], 0); }

  StatusOr<RewardResult> Call(const RewardInput& in) {
    const int index = Acquire();
    StatusOr<RewardResult> result = CallOn(workers_[static_cast<size_t>(index)], index, in);
    Release(index);
    return result;
  }

 private:
  int Acquire() LAMINAR_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (idle_.empty()) idle_cv_.Wait(&mu_);
    const int index = idle_.back();
    idle_.pop_back();
    return index;
  }

  void Release(int index) LAMINAR_EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      idle_.push_back(index);
    }
    idle_cv_.NotifyOne();
  }

  // Waits up to `grace_ms` for `w` to exit, then kills it; reaps it either way. Then kills what
  // is left of its process group (what the user's code started), which outlives its leader: the
  // kernel does not reuse the group's id while a member lives, so the signal reaches only them;
  // and what is left in its cgroup (what left the group: setsid, a daemon's double fork).
  static void Stop(Worker& w, int grace_ms) {
    if (w.process.pid() <= 0) return;
    const pid_t group = w.process.pid();
    if (!w.process.Wait(grace_ms).ok()) {
      kill(-group, SIGKILL);
      w.process.Wait(10000).status().IgnoreError();
    }
    kill(-group, SIGKILL);
    if (!w.cage.KillAll()) {
      LAMINAR_LOG(WARN, REWARD) << "processes a reward worker started outlive it in "
                                << w.cage.dir();
    }
    w.process = Process();
  }

  static std::string ExitText(Worker& w) { return ExitText(w.process.Wait(1000)); }

  // A worker's death in the run's faults.jsonl ($LAMINAR_FAULTS), as role "reward".
  static void RecordCrash(const std::string& detail, double detected, double recovered) {
    Status st = FaultLogFromEnvironment().Record({.kind = FaultKind::kCrash,
                                                  .role = "reward",
                                                  .detail = detail,
                                                  .seen_by = "reward pool",
                                                  .detected_unix_s = detected,
                                                  .recovered_unix_s = recovered});
    if (!st.ok()) LAMINAR_LOG(WARN, REWARD) << st;
  }
  static std::string ExitText(const StatusOr<int>& code) {
    if (!code.ok()) return "it closed its output";
    if (*code > 128) return "it was killed by signal " + std::to_string(*code - 128);
    return "it exited with code " + std::to_string(*code);
  }

  static int NextPoolId() {
    static std::atomic<int> pools{0};
    return pools.fetch_add(1);
  }

  // The cgroup worker `index` runs in ("-": none, with the reason said once).
  std::string CageOf(Worker& w, int index) {
    const int64_t max_processes = options_.sandbox.max_processes;
    if (max_processes <= 0) return "-";
    if (w.cage.dir().empty()) {
      StatusOr<PidsCgroup> cage =
          PidsCgroup::Create(std::string(kCgroupPrefix) + "-" + std::to_string(getpid()) + "-" +
                                 std::to_string(pool_id_) + "-" + std::to_string(index),
                             max_processes);
      if (!cage.ok()) {
        if (!warned_processes_.exchange(true)) {
          LAMINAR_LOG(WARN, REWARD)
              << tag_ << ": the workers' processes are not bounded (" << cage.status().message()
              << "); set max_processes: 0 to say that is intended";
        }
        return "-";
      }
      w.cage = std::move(*cage);
    }
    return w.cage.dir();
  }

  // Spawns worker `index` into `w` and waits for the driver's "ready".
  Status Start(Worker& w, int index) {
    std::vector<std::string> argv = argv_;
    argv.push_back(CageOf(w, index));
    LAMINAR_ASSIGN_OR_RETURN(w.process,
                             Process::Spawn(argv, Process::SpawnOptions{.stderr_path = "",
                                                                        .stdin_pipe = true,
                                                                        .new_session = true}),
                             tag_);
    StatusOr<std::string> line = w.process.ReadLine(ToMs(options_.startup_timeout_s));
    if (!line.ok()) {
      const bool late = line.status().code() == StatusCode::kDeadlineExceeded;
      std::string what = late ? "" : ExitText(w);
      Stop(w, 0);
      if (late) {
        return DeadlineExceededError(tag_ + ": the worker did not load the code within " +
                                     std::to_string(options_.startup_timeout_s) +
                                     " s (startup_timeout_s)");
      }
      return UnavailableError(tag_ + ": the worker stopped before it was ready (" + what + "; " +
                              options_.start_hint + "its stderr is above)");
    }
    nlohmann::json reply = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
    if (reply.is_object() && reply.contains("ready")) {
      const std::string network = reply.value("network", "");
      if (!options_.sandbox.network && network != "isolated" && !warned_network_.exchange(true)) {
        LAMINAR_LOG(WARN, REWARD) << tag_ << ": the workers keep the host's network (" << network
                                  << "); set network: true to say that is intended";
      }
      const std::string processes = reply.value("processes", "");
      if (options_.sandbox.max_processes > 0 && processes != "limited" && argv.back() != "-" &&
          !warned_processes_.exchange(true)) {
        LAMINAR_LOG(WARN, REWARD) << tag_ << ": the workers' processes are not bounded ("
                                  << processes << ")";
      }
      return OkStatus();
    }
    Stop(w, 2000);
    if (reply.is_object() && reply.contains("error") && reply["error"].is_string()) {
      return InvalidArgumentError(tag_ + ": " + reply["error"].get<std::string>());
    }
    return InternalError(tag_ + ": the worker's first line is not the driver's: " + *line);
  }

  StatusOr<RewardResult> CallOn(Worker& w, int index, const RewardInput& in) {
    if (w.process.pid() <= 0 || !w.process.Running()) {
      // Not started yet, or it died while idle (killed, out of memory): a fresh one takes the call.
      const bool died = w.process.pid() > 0;
      const double at = FaultClockNow();
      const std::string how = died ? ExitText(w) : "";
      Stop(w, 0);
      LAMINAR_RETURN_IF_ERROR(Start(w, index), "restarting a worker");
      if (died) RecordCrash(tag_ + ": an idle worker died (" + how + ")", at, FaultClockNow());
    }
    const int timeout_ms = ToMs(options_.timeout_s);
    const int64_t deadline = SteadyNowMs() + timeout_ms;
    Status written = w.process.WriteStdin(options_.encode(in) + "\n", timeout_ms);
    StatusOr<std::string> line =
        written.ok()
            ? w.process.ReadLine(static_cast<int>(std::max<int64_t>(0, deadline - SteadyNowMs())))
            : StatusOr<std::string>(written);
    if (!line.ok()) {
      if (line.status().code() == StatusCode::kDeadlineExceeded) {
        Stop(w, 0);
        return DeadlineExceededError(tag_ + ": no score within " +
                                     std::to_string(options_.timeout_s) +
                                     " s (timeout_s); the worker was killed");
      }
      const StatusOr<int> code = w.process.Wait(1000);
      Stop(w, 0);
      if (code.ok() && *code == 128 + SIGXCPU) {
        return DeadlineExceededError(tag_ + ": the call used more than " +
                                     std::to_string(options_.sandbox.cpu_time_s) +
                                     " s of CPU time (cpu_time_s); the worker was killed");
      }
      const std::string died = tag_ + ": the worker died during the call (" + ExitText(code) + ")";
      const double at = FaultClockNow();  // a fresh worker starts with the next call
      RecordCrash(died, at, at);
      return UnavailableError(died);
    }
    nlohmann::json reply = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
    if (!reply.is_object()) {
      Stop(w, 0);  // out of step with the driver: start afresh
      return InternalError(
          tag_ + ": the worker replied with something that is not JSON: " + line->substr(0, 200));
    }
    if (auto e = reply.find("error"); e != reply.end() && e->is_string()) {
      return InvalidArgumentError(tag_ + ": " + e->get<std::string>());
    }
    auto score = reply.find("score");
    if (score == reply.end() || !score->is_number() || !std::isfinite(score->get<double>())) {
      return InternalError(tag_ +
                           ": the worker's reply holds no finite score: " + line->substr(0, 200));
    }
    RewardResult result{.score = score->get<double>(), .extra = {}};
    if (auto extra = reply.find("extra"); extra != reply.end() && extra->is_object()) {
      for (const auto& [key, value] : extra->items()) {
        if (value.is_number()) result.extra[key] = value.get<double>();
      }
    }
    return result;
  }

  const RewardWorkerOptions options_;
  const std::string tag_;
  const std::vector<std::string> argv_;        // options_.argv and the sandbox's arguments
  std::vector<Worker> workers_;                // workers_[i] belongs to whoever took i off idle_
  std::atomic<bool> warned_network_{false};    // the host's network was kept (said once)
  std::atomic<bool> warned_processes_{false};  // the processes are not bounded (said once)
  const int pool_id_ = NextPoolId();           // names this pool's cgroups
  Mutex mu_;
  CondVar idle_cv_;  // idle_ is not empty
  std::vector<int> idle_ LAMINAR_GUARDED_BY(mu_);
};

// The worker's command line: the reward's argv and the sandbox's arguments (worker_pool.h).
std::vector<std::string> SandboxArgv(const RewardWorkerOptions& o) {
  std::vector<std::string> argv = o.argv;
  argv.insert(argv.end(),
              {std::to_string(getpid()), std::to_string(o.sandbox.cpu_time_s),
               std::to_string(o.sandbox.memory_mb), std::to_string(o.sandbox.max_open_files),
               o.sandbox.network ? "1" : "0"});
  return argv;  // the worker's cgroup comes last, per worker
}

}  // namespace

StatusOr<RewardFn> MakeRewardWorkers(RewardWorkerOptions options) {
  const std::string& tag = options.tag;
  if (options.argv.empty() || !options.encode) {
    return InvalidArgumentError(tag + ": no worker command or request encoder");
  }
  if (options.num_workers < 1) {
    return InvalidArgumentError(tag + ": num_workers " + std::to_string(options.num_workers) +
                                " is not >= 1");
  }
  if (!(options.timeout_s > 0) || !(options.startup_timeout_s > 0) ||
      !std::isfinite(options.timeout_s) || !std::isfinite(options.startup_timeout_s)) {
    return InvalidArgumentError(tag + ": timeout_s and startup_timeout_s must be > 0");
  }
  if (!(options.sandbox.cpu_time_s >= 0) || !std::isfinite(options.sandbox.cpu_time_s) ||
      options.sandbox.memory_mb < 0 || options.sandbox.max_open_files < 0 ||
      options.sandbox.max_processes < 0) {
    return InvalidArgumentError(tag + ": cpu_time_s, memory_mb, max_open_files and " +
                                "max_processes must be >= 0 (0: no limit)");
  }
  if (options.sandbox.max_processes > 0) PidsCgroup::RemoveStale(kCgroupPrefix);
  auto pool = std::make_shared<RewardWorkerPool>(std::move(options));
  LAMINAR_RETURN_IF_ERROR(pool->Validate());
  return RewardFn([pool](const RewardInput& in) { return pool->Call(in); });
}

}  // namespace laminar::reward
