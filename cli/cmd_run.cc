// `laminar run RECIPE [key=value ...]`: one RL job on this machine. Checks the recipe, prepares
// RUN_DIR, and starts and supervises the master relay, the manager, the actor and
// rollout.num_workers rollouts with logs in RUN_DIR/logs/ (launch/supervisor.h). Ctrl-C (SIGINT)
// or SIGTERM stops the actor first, which saves a checkpoint, then the rest. Prints one line per
// training step from the run's metrics.jsonl. --resume continues from the newest checkpoint in
// RUN_DIR/checkpoints.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "actor/actor.h"
#include "actor/actor_recipe.h"
#include "actor/console.h"
#include "cli/command.h"
#include "core/fault_log.h"
#include "core/mapped_file.h"
#include "launch/liveness.h"
#include "launch/run_folder.h"
#include "launch/run_keys.h"
#include "launch/supervisor.h"
#include "model/model_path.h"
#include "recipe/recipe.h"
#include "reward/reward_recipe.h"
#include "rollout/worker/worker_recipe.h"
#include "trainer/checkpoint.h"

namespace laminar::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct RunArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  std::string run_dir;
  int rollouts = 0;  // 0: rollout.num_workers
  bool resume = false;
  int max_restarts = 5;  // per rollout and for the relay
};

int Fail(std::string_view message) { return CommandFail("run", message); }

// The run's console on stderr: one line per step, and below them, on a terminal, a progress bar
// redrawn in place from the actor's progress file (the step being generated or trained).
class Console {
 public:
  Console(fs::path metrics, std::streamoff metrics_offset, fs::path progress)
      : metrics_(std::move(metrics)),
        offset_(metrics_offset),
        progress_(std::move(progress)),
        tty_(isatty(STDERR_FILENO) == 1),
        start_(Clock::now()) {}

  // Prints the steps added to the metrics file since the last call, then redraws the bar.
  void Update() {
    PrintNewSteps();
    if (!tty_ || progress_.empty()) return;
    auto text = ReadFileToString(progress_.string());
    if (!text.ok()) return;  // not written yet
    auto progress = actor::ParseProgress(*text);
    if (!progress) return;  // being replaced: the next call reads it
    std::fprintf(stderr, "\r\033[K[run] %s",
                 actor::ProgressLine(*progress, actor::UnixNow()).c_str());
    std::fflush(stderr);
    bar_on_screen_ = true;
  }
  // Prints the last steps and leaves the bar off the screen.
  void Finish() {
    PrintNewSteps();
    ClearBar();
  }
  // `line` on stderr on a line of its own (the bar, if shown, is erased first).
  void SayLine(const std::string& line) { Say("%s\n", line.c_str()); }
  // printf to stderr on a line of its own (the bar, if shown, is erased first).
  __attribute__((format(printf, 2, 3))) void Say(const char* format, ...) {
    ClearBar();
    va_list args;
    va_start(args, format);
    std::vfprintf(stderr, format, args);
    va_end(args);
  }

 private:
  void ClearBar() {
    if (!bar_on_screen_) return;
    std::fprintf(stderr, "\r\033[K");
    bar_on_screen_ = false;
  }
  // Prints the metrics lines added to the file since `offset_`, one console line each.
  void PrintNewSteps();

  fs::path metrics_;
  std::streamoff offset_;
  fs::path progress_;
  bool tty_;
  Clock::time_point start_;
  bool bar_on_screen_ = false;
};

void Console::PrintNewSteps() {
  std::ifstream in(metrics_);
  if (!in) return;
  in.seekg(offset_);
  for (std::string line; std::getline(in, line);) {
    if (in.eof()) break;  // a line still being written: read it next time
    offset_ = in.tellg();
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    actor::StepMetrics m;
    for (const auto& [k, v] : j.items()) {
      if (v.is_number()) m[k] = v.get<double>();
    }
    ClearBar();
    std::fprintf(stderr, "%s\n",
                 actor::ConsoleLine(m, std::chrono::duration<double>(Clock::now() - start_).count())
                     .c_str());
  }
}

// Everything about the recipe that can be checked before any process starts. Errors: the
// message to fail with.
Status CheckRecipe(const Config& recipe) {
  LAMINAR_RETURN_IF_ERROR(reward::RewardOf(recipe).status());
  LAMINAR_RETURN_IF_ERROR(actor::ActorOptionsOf(recipe).status());
  // The rollout settings (speculation's included), with a stand-in KV size per token: the
  // model's own is checked by each rollout once it has loaded the model.
  LAMINAR_RETURN_IF_ERROR(
      rollout::RolloutWorkerOptionsOf(recipe, /*kv_bytes_per_token=*/1).status());
  if (auto model = model::ResolveModelPath(recipe.GetString("model.path")); !model.ok()) {
    return InvalidArgumentError("recipe model.path: " + std::string(model.status().message()));
  }
  if (const std::string data = recipe.GetString("data.path"); !fs::is_regular_file(data)) {
    return InvalidArgumentError("recipe data.path: " + data + " is not a file");
  }
  return OkStatus();
}

// A run's folder and its effective recipe: the run's files go under `dir` unless the recipe or
// the overrides put them elsewhere.
struct RunFolder {
  fs::path dir;
  std::vector<std::string> overrides;  // the user's, then the defaults under dir
  Config effective;
};

StatusOr<RunFolder> PrepareRunFolder(const RunArgs& a, const Config& recipe) {
  fs::path dir = launch::RunFolderOf(a.run_dir, recipe, a.recipe);
  std::error_code ec;
  fs::create_directories(dir / "logs", ec);
  if (ec) return InternalError("cannot create " + (dir / "logs").string() + ": " + ec.message());
  std::vector<std::string> overrides = a.overrides;
  if (a.rollouts > 0) overrides.push_back("rollout.num_workers=" + std::to_string(a.rollouts));
  for (std::string& o : launch::RunFolderOverrides(recipe, dir)) overrides.push_back(std::move(o));
  LAMINAR_ASSIGN_OR_RETURN(Config effective, recipe::LoadRecipe(a.recipe, overrides));
  RunFolder f{std::move(dir), std::move(overrides), std::move(effective)};
  // A finished or interrupted run is continued with --resume, never silently mixed with a new one.
  const fs::path checkpoints = f.effective.GetString("actor.checkpoint_dir");
  if (!a.resume && !checkpoints.empty() && fs::exists(checkpoints / "latest")) {
    return FailedPreconditionError(
        checkpoints.string() +
        " holds an earlier run's checkpoints: pass --resume to continue it, or choose another "
        "--run-dir");
  }
  const fs::path progress_path = f.effective.GetString("actor.progress_file");
  if (!progress_path.empty()) fs::remove(progress_path, ec);  // an earlier run's
  std::ofstream out(f.dir / (a.resume ? "recipe.resumed.yaml" : "recipe.yaml"));
  out << "# the effective recipe of this run: " << a.recipe << " with its overrides\n"
      << f.effective.ToYaml();
  return f;
}

// "N faults (crash 2, hang 1) in FILE; " for a non-empty faults.jsonl, then "effective training
// time ratio X" from the last step's perf/ettr in `metrics`; empty when there is neither.
std::string FaultSummary(const fs::path& faults, const fs::path& metrics) {
  std::map<std::string, int> by_kind;
  int total = 0;
  for (const nlohmann::json& j : ReadFaults(faults.string())) {
    ++by_kind[j["kind"].get<std::string>()];
    ++total;
  }
  std::string out;
  if (total > 0) {
    out = std::to_string(total) + (total == 1 ? " fault (" : " faults (");
    bool first = true;
    for (const auto& [kind, n] : by_kind) {
      out += (first ? "" : ", ") + kind + " " + std::to_string(n);
      first = false;
    }
    out += ") in " + faults.string();
  }
  std::ifstream m(metrics);
  std::optional<double> ettr;
  for (std::string line; std::getline(m, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("perf/ettr") && j["perf/ettr"].is_number()) {
      ettr = j["perf/ettr"].get<double>();
    }
  }
  if (ettr) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "effective training time ratio %.3f", *ettr);
    out += (out.empty() ? "" : "; ") + std::string(buf);
  }
  return out;
}

// How the run ended, on the console; returns the exit code.
int ReportEnd(const RunArgs& a, const RunFolder& f, launch::RunRoles& roles,
              const launch::WatchResult& end, Console& console) {
  if (const std::string faults =
          FaultSummary(f.effective.GetString("run.faults"), f.effective.GetString("actor.metrics"));
      !faults.empty()) {
    console.Say("[run] %s\n", faults.c_str());
  }
  if (end.end == launch::RunEnd::kInterrupted) {
    std::string again = "laminar run " + a.recipe;
    for (const std::string& o : a.overrides) again += " " + o;
    again += " --run-dir " + f.dir.string() + " --resume";
    console.Say("[run] stopped; continue with: %s\n", again.c_str());
    return 130;
  }
  if (end.end == launch::RunEnd::kActorExited && end.exit_code != 0) {
    console.Say("[run] the actor failed (exit %d); %s:%s\n", end.exit_code,
                roles.actor.log.string().c_str(), launch::LogTail(roles.actor.log, 5).c_str());
    // A data-parallel rank that failed first is the likelier cause.
    for (launch::SupervisedRole& r : roles.actor_ranks) {
      auto code = r.process.Wait(0);
      if (code.ok() && *code != 0) {
        console.Say("[run] %s failed too (exit %d); %s:%s\n", r.name.c_str(), *code,
                    r.log.string().c_str(), launch::LogTail(r.log, 5).c_str());
      }
    }
    return 1;
  }
  if (end.exit_code == 0) {
    console.Say("[run] finished; metrics %s, checkpoints %s, policy %s\n",
                f.effective.GetString("actor.metrics").c_str(),
                f.effective.GetString("actor.checkpoint_dir").c_str(),
                f.effective.GetString("actor.export_dir").c_str());
  }
  return end.exit_code;
}

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick).
StatusOr<int> FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return InternalError(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) return InternalError("no free port on 127.0.0.1");
  return static_cast<int>(ntohs(addr.sin_port));
}

int RunJob(const RunArgs& a) {
  // Block the stop signals before any child exists; WatchRun takes them with sigtimedwait.
  const sigset_t stop_signals = launch::BlockStopSignals();

  auto recipe = recipe::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return Fail(recipe.status().message());
  // Data-parallel actor ranks on this machine meet on a loopback port of this invocation's own,
  // which only the actor processes are told (the run folder's recipe keeps none).
  std::vector<std::string> actor_overrides;
  if (recipe->GetInt("actor.world_size") > 1 && recipe->GetString("actor.rendezvous").empty()) {
    auto port = FreeLoopbackPort();
    if (!port.ok()) return Fail(port.status().message());
    actor_overrides.push_back("actor.rendezvous=tcp://127.0.0.1:" + std::to_string(*port));
  }
  {
    std::vector<std::string> checked = a.overrides;
    checked.insert(checked.end(), actor_overrides.begin(), actor_overrides.end());
    auto full = recipe::LoadRecipe(a.recipe, checked);
    if (!full.ok()) return Fail(full.status().message());
    if (Status s = CheckRecipe(*full); !s.ok()) return Fail(s.message());
  }
  auto folder = PrepareRunFolder(a, *recipe);
  if (!folder.ok()) return Fail(folder.status().message());
  const fs::path metrics_path = folder->effective.GetString("actor.metrics");
  // Steps an interrupted run trained after its newest checkpoint are trained again: their lines
  // go now (the actor does the same), before the console's offset is taken.
  int64_t resume_step = 0;
  if (a.resume) {
    auto latest =
        trainer::LatestCheckpointStep(folder->effective.GetString("actor.checkpoint_dir"));
    if (latest.ok()) resume_step = *latest;
  }
  for (const auto& [key, path] :
       {std::pair{"training/global_step", metrics_path.string()},
        std::pair{"step", folder->effective.GetString("actor.trajectory_log")}}) {
    if (path.empty()) continue;
    if (Status st = actor::DropStepsAfter(path, key, resume_step); !st.ok())
      return Fail(st.message());
  }
  // The console shows the steps this run adds, from the first: the offset is taken before any
  // role starts (a fast actor may finish steps before the last rollout is ready).
  std::streamoff metrics_offset = 0;
  if (fs::exists(metrics_path)) {
    metrics_offset = static_cast<std::streamoff>(fs::file_size(metrics_path));
  }

  // Every role stops when this process dies, even by SIGKILL (cli/main.cc StopWithSupervisor).
  ::setenv(kSupervisorPidEnv, std::to_string(getpid()).c_str(), /*overwrite=*/1);
  // Every role's reward pool records its workers' deaths there (core/fault_log.h).
  ::setenv(kFaultsEnv, folder->effective.GetString("run.faults").c_str(), /*overwrite=*/1);
  // The actor's effective training time ratio counts from here (actor/actor.h).
  ::setenv(actor::kRunStartEnv, std::to_string(FaultClockNow()).c_str(), /*overwrite=*/1);
  std::error_code self_ec;
  launch::RunLaunch launch;
  launch.self = fs::read_symlink("/proc/self/exe", self_ec).string();
  if (self_ec) return Fail("cannot find this binary: " + self_ec.message());
  launch.recipe_args = {"--recipe", a.recipe};
  launch.recipe_args.insert(launch.recipe_args.end(), folder->overrides.begin(),
                            folder->overrides.end());
  launch.log_dir = folder->dir / "logs";
  launch.num_rollouts = static_cast<int>(folder->effective.GetInt("rollout.num_workers"));
  launch.actor_ranks = static_cast<int>(folder->effective.GetInt("actor.world_size"));
  launch.actor_overrides = actor_overrides;
  launch.resume = a.resume;
  launch.shm_prefix = launch::RunShmPrefix(getpid());
  launch.keys = folder->effective.GetString("run.keys");
  if (!launch.keys.empty()) {
    // Read here first, so that a bad key file is reported before any role starts.
    if (Status s = launch::SecureRunTransport(folder->effective); !s.ok()) return Fail(s.message());
  }
  auto roles = launch::StartRunRoles(launch);
  if (!roles.ok()) return Fail(roles.status().message());
  std::fprintf(stderr, "[run] %d rollouts, manager %s, relay %s; logs in %s\n", launch.num_rollouts,
               roles->manager_endpoint.c_str(), roles->relay_endpoint.c_str(),
               launch.log_dir.string().c_str());

  Console console(metrics_path, metrics_offset, folder->effective.GetString("actor.progress_file"));
  auto say = [&console](const std::string& line) { console.SayLine(line); };
  const launch::WatchResult end = launch::WatchRun(
      *roles, stop_signals,
      {.max_restarts = a.max_restarts,
       .hang_timeout_s =
           launch::HangTimeoutS(folder->effective.GetFloat("rollout.heartbeat_timeout_s")),
       .tick = [&console] { console.Update(); },
       .say = say,
       .faults = FaultLog(folder->effective.GetString("run.faults"))});
  if (end.end == launch::RunEnd::kActorExited) console.Finish();
  // Without its manager the actor cannot save (a checkpoint holds the manager's snapshot): it
  // gets a moment, not the ten minutes a save may take; the run resumes from its last checkpoint.
  constexpr int kNoManagerActorTimeoutMs = 3000, kActorTimeoutMs = 600000;
  const bool manager_down = !roles->manager.process.Running();
  launch::StopRun(
      *roles, say, [&console] { console.Finish(); },
      manager_down ? kNoManagerActorTimeoutMs : kActorTimeoutMs);
  return ReportEnd(a, *folder, *roles, end, console);
}

std::function<int()> SetupRun(CLI::App* app) {
  auto a = std::make_shared<RunArgs>();
  app->add_option("recipe", a->recipe, "the run's recipe (YAML)")->required();
  app->add_option("overrides", a->overrides, "dotted overrides, e.g. actor.lr=2e-6");
  app->add_option("--run-dir", a->run_dir,
                  "where metrics, checkpoints and logs go (default: run.dir, else runs/<recipe>)");
  app->add_option("--rollouts", a->rollouts, "rollout processes (default: rollout.num_workers)")
      ->check(CLI::Range(1, 1024));
  app->add_flag("--resume", a->resume, "continue from the newest checkpoint of the run");
  app->add_option("--max-restarts", a->max_restarts,
                  "times a dead rollout is started again before the run goes on without it (and "
                  "the relay before the run stops)")
      ->check(CLI::Range(0, 1000));
  return [a] { return RunJob(*a); };
}

}  // namespace

LAMINAR_REGISTER_COMMAND("run",
                         "run an RL job on this machine: relay, manager, actor and rollouts, "
                         "supervised; Ctrl-C saves a checkpoint and stops",
                         SetupRun);

}  // namespace laminar::cli
