// `laminar run RECIPE [key=value ...]`: one RL job on this machine (issue 9 item 3). Starts the
// master relay, the manager, the actor and rollout.num_workers rollouts as child processes of this
// binary, each in its own session with its log in RUN_DIR/logs/, and supervises them: a rollout
// that dies is started again under its id (the manager re-issues what it held), a dead actor,
// manager or relay ends the run with the tail of its log. Ctrl-C (SIGINT) or SIGTERM stops the
// actor first, which saves a checkpoint while the manager still answers, then the rest. Prints one
// line per training step from the run's metrics.jsonl. --resume continues from the newest
// checkpoint in RUN_DIR/checkpoints.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "actor/console.h"
#include "actor/recipe.h"
#include "cli/command.h"
#include "core/mapped_file.h"
#include "core/process.h"
#include "model/model_path.h"

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
  int max_restarts = 5;  // per rollout
};

int Fail(std::string_view message) { return CommandFail("run", message); }

// The last `n` lines of `path`, indented, for error messages.
std::string Tail(const fs::path& path, int n) {
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

// One supervised role: its command line, log and process.
struct Role {
  Role() = default;
  Role(std::string n, std::vector<std::string> a, fs::path l)
      : name(std::move(n)), argv(std::move(a)), log(std::move(l)) {}
  std::string name;  // "relay", "manager", "actor", "rollout/0", ...
  std::vector<std::string> argv;
  fs::path log;
  Process process;
  int restarts = 0;
  bool gone = false;  // a rollout past its restarts
};

// Starts `role` and waits for its ready line (a JSON object); returns it. Errors name the log.
StatusOr<nlohmann::json> Start(Role* role, int timeout_ms) {
  LAMINAR_ASSIGN_OR_RETURN(
      role->process,
      Process::Spawn(role->argv, Process::SpawnOptions{.stderr_path = role->log.string(),
                                                       .new_session = true}));
  auto line = role->process.ReadLine(timeout_ms);
  if (!line.ok()) {
    // It stopped (a bad recipe, dataset or model: its log says why), or it hangs.
    auto code = role->process.Wait(2000);
    const std::string what =
        code.ok() ? " stopped (exit " + std::to_string(*code) + ") before it was ready"
                  : " did not start (" + std::string(line.status().message()) + ")";
    return UnavailableError(role->name + what + "; " + role->log.string() + ":" +
                            Tail(role->log, 5));
  }
  nlohmann::json ready = nlohmann::json::parse(*line, nullptr, false);
  if (!ready.is_object()) {
    return UnavailableError(role->name + " printed '" + *line + "' instead of its ready line");
  }
  return ready;
}

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

int RunJob(const RunArgs& a) {
  // Block the stop signals before any child exists; they are taken with sigtimedwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // Everything that can be checked here is, before any process starts.
  auto recipe = actor::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return Fail(recipe.status().message());
  if (auto reward = actor::RewardOf(*recipe); !reward.ok()) return Fail(reward.status().message());
  if (auto options = actor::ActorOptionsOf(*recipe); !options.ok()) {
    return Fail(options.status().message());
  }
  // The rollout settings (speculation's included), with a stand-in KV size per token: the
  // model's own is checked by each rollout once it has loaded the model.
  if (auto rollout = actor::RolloutWorkerOptionsOf(*recipe, /*kv_bytes_per_token=*/1);
      !rollout.ok()) {
    return Fail(rollout.status().message());
  }
  if (auto model = model::ResolveModelPath(recipe->GetString("model.path")); !model.ok()) {
    return Fail("recipe model.path: " + std::string(model.status().message()));
  }
  if (const std::string data = recipe->GetString("data.path"); !fs::is_regular_file(data)) {
    return Fail("recipe data.path: " + data + " is not a file");
  }
  const fs::path run_dir = !a.run_dir.empty() ? fs::path(a.run_dir)
                           : !recipe->GetString("run.dir").empty()
                               ? fs::path(recipe->GetString("run.dir"))
                               : fs::path("runs") / fs::path(a.recipe).stem();
  std::error_code ec;
  fs::create_directories(run_dir / "logs", ec);
  if (ec) return Fail("cannot create " + (run_dir / "logs").string() + ": " + ec.message());
  // The run's files go under run_dir unless the recipe or the overrides put them elsewhere.
  std::vector<std::string> overrides = a.overrides;
  if (a.rollouts > 0) overrides.push_back("rollout.num_workers=" + std::to_string(a.rollouts));
  auto default_path = [&](const std::string& key, const fs::path& value) {
    if (!recipe->IsSet(key)) overrides.push_back(key + "=" + value.string());
  };
  default_path("actor.metrics", run_dir / "metrics.jsonl");
  default_path("actor.progress_file", run_dir / "progress.json");
  default_path("actor.checkpoint_dir", run_dir / "checkpoints");
  default_path("actor.export_dir", run_dir / "model");
  if (actor::RecipeSchema().Find("actor.tensorboard_dir") != nullptr) {
    default_path("actor.tensorboard_dir", run_dir / "tensorboard");
  }
  auto effective = actor::LoadRecipe(a.recipe, overrides);
  if (!effective.ok()) return Fail(effective.status().message());
  const fs::path metrics_path = effective->GetString("actor.metrics");
  // The console shows the steps this run adds, from the first: the offset is taken before any
  // role starts (a fast actor may finish steps before the last rollout is ready).
  std::streamoff metrics_offset = 0;
  if (fs::exists(metrics_path)) {
    metrics_offset = static_cast<std::streamoff>(fs::file_size(metrics_path));
  }
  // A finished or interrupted run is continued with --resume, never silently mixed with a new one.
  const fs::path checkpoints = effective->GetString("actor.checkpoint_dir");
  if (!a.resume && !checkpoints.empty() && fs::exists(checkpoints / "latest")) {
    return Fail(checkpoints.string() +
                " holds an earlier run's checkpoints: pass --resume to continue it, or choose "
                "another --run-dir");
  }
  const fs::path progress_path = effective->GetString("actor.progress_file");
  if (!progress_path.empty()) fs::remove(progress_path, ec);  // an earlier run's
  const int num_rollouts = static_cast<int>(effective->GetInt("rollout.num_workers"));
  {
    std::ofstream out(run_dir / (a.resume ? "recipe.resumed.yaml" : "recipe.yaml"));
    out << "# the effective recipe of this run: " << a.recipe << " with its overrides\n"
        << effective->ToYaml();
  }

  // Every role stops when this process dies, even by SIGKILL (cli/main.cc StopWithSupervisor).
  ::setenv(kSupervisorPidEnv, std::to_string(getpid()).c_str(), /*overwrite=*/1);
  std::error_code self_ec;
  const std::string self = fs::read_symlink("/proc/self/exe", self_ec).string();
  if (self_ec) return Fail("cannot find this binary: " + self_ec.message());
  std::vector<std::string> recipe_args = {"--recipe", a.recipe};
  recipe_args.insert(recipe_args.end(), overrides.begin(), overrides.end());
  auto role_argv = [&](const std::string& command, std::vector<std::string> extra) {
    std::vector<std::string> argv = {self, command};
    argv.insert(argv.end(), recipe_args.begin(), recipe_args.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  auto log_of = [&](std::string name) {
    for (char& c : name) c = c == '/' ? '_' : c;
    return run_dir / "logs" / (name + ".log");
  };
  constexpr int kStartTimeoutMs = 120000;  // loading a model can take a while

  Role relay(
      "relay",
      {self, "relay", "--id", "master", "--shm-prefix", "laminar-run-" + std::to_string(getpid())},
      log_of("relay"));
  auto relay_ready = Start(&relay, kStartTimeoutMs);
  if (!relay_ready.ok()) return Fail(relay_ready.status().message());
  const std::string relay_endpoint = (*relay_ready)["control"].get<std::string>();

  Role manager("manager", role_argv("manager", {}), log_of("manager"));
  auto manager_ready = Start(&manager, kStartTimeoutMs);
  if (!manager_ready.ok()) return Fail(manager_ready.status().message());
  const std::string manager_endpoint = (*manager_ready)["endpoint"].get<std::string>();

  std::vector<std::string> actor_extra = {"--manager", manager_endpoint, "--relay", relay_endpoint};
  if (a.resume) actor_extra.push_back("--resume");
  Role actor("actor", role_argv("actor", actor_extra), log_of("actor"));
  if (auto r = Start(&actor, kStartTimeoutMs); !r.ok()) return Fail(r.status().message());

  std::vector<Role> rollouts(static_cast<size_t>(num_rollouts));
  for (int i = 0; i < num_rollouts; ++i) {
    Role& r = rollouts[static_cast<size_t>(i)];
    r.name = "rollout/" + std::to_string(i);
    r.argv = role_argv("rollout",
                       {"--id", r.name, "--manager", manager_endpoint, "--relay", relay_endpoint});
    r.log = log_of(r.name);
    if (auto st = Start(&r, kStartTimeoutMs); !st.ok()) return Fail(st.status().message());
  }
  std::fprintf(stderr, "[run] %d rollouts, manager %s, relay %s; logs in %s\n", num_rollouts,
               manager_endpoint.c_str(), relay_endpoint.c_str(),
               (run_dir / "logs").string().c_str());

  Console console(metrics_path, metrics_offset, progress_path);
  int exit_code = 0;
  bool interrupted = false;
  while (true) {
    const timespec wait = {.tv_sec = 0, .tv_nsec = 200'000'000};
    if (sigtimedwait(&stop_signals, nullptr, &wait) > 0) {
      interrupted = true;
      break;
    }
    console.Update();
    if (!actor.process.Running()) {
      console.Finish();
      auto code = actor.process.Wait(1000);
      exit_code = code.ok() ? *code : 1;
      if (exit_code != 0) {
        console.Say("[run] the actor failed (exit %d); %s:%s\n", exit_code,
                    actor.log.string().c_str(), Tail(actor.log, 5).c_str());
        exit_code = 1;
      }
      break;
    }
    bool infrastructure_down = false;
    for (Role* r : {&relay, &manager}) {
      if (!r->process.Running()) {
        console.Say("[run] the %s exited; %s:%s\n", r->name.c_str(), r->log.string().c_str(),
                    Tail(r->log, 5).c_str());
        infrastructure_down = true;
      }
    }
    if (infrastructure_down) {
      exit_code = 1;
      break;
    }
    int alive = 0;
    for (Role& r : rollouts) {
      if (r.gone) continue;
      if (r.process.Running()) {
        ++alive;
        continue;
      }
      auto code = r.process.Wait(1000);
      if (r.restarts >= a.max_restarts) {
        console.Say("[run] %s exited (%d) after %d restarts; giving up on it. %s:%s\n",
                    r.name.c_str(), code.ok() ? *code : -1, r.restarts, r.log.string().c_str(),
                    Tail(r.log, 3).c_str());
        r.gone = true;
        continue;
      }
      ++r.restarts;
      console.Say("[run] %s exited (%d); restarting it (%d of %d)\n", r.name.c_str(),
                  code.ok() ? *code : -1, r.restarts, a.max_restarts);
      if (auto st = Start(&r, kStartTimeoutMs); !st.ok()) {
        console.Say("[run] %s\n", std::string(st.status().message()).c_str());
        continue;  // its Process is not running: the next round counts another restart
      }
      ++alive;
    }
    if (alive == 0) {
      console.Say("[run] every rollout is gone; nothing can generate\n");
      exit_code = 1;
      break;
    }
  }
  // The actor stops first: it saves a checkpoint, which needs the manager's snapshot.
  if (actor.process.Running()) {
    console.Say("[run] stopping: the actor saves a checkpoint first\n");
    actor.process.Signal(SIGTERM);
    auto code = actor.process.Wait(600000);
    if (!code.ok()) {
      actor.process.Signal(SIGKILL);
      (void)actor.process.Wait(5000);
    }
  }
  console.Finish();
  for (Role& r : rollouts) r.process.Signal(SIGTERM);
  manager.process.Signal(SIGTERM);
  relay.process.Signal(SIGTERM);
  // (Each Process's destructor waits, then kills what is left.)
  if (interrupted) {
    std::string again = "laminar run " + a.recipe;
    for (const std::string& o : a.overrides) again += " " + o;
    again += " --run-dir " + run_dir.string() + " --resume";
    console.Say("[run] stopped; continue with: %s\n", again.c_str());
    return 130;
  }
  if (exit_code == 0) {
    console.Say("[run] finished; metrics %s, checkpoints %s, policy %s\n",
                metrics_path.string().c_str(), effective->GetString("actor.checkpoint_dir").c_str(),
                effective->GetString("actor.export_dir").c_str());
  }
  return exit_code;
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
                  "times a dead rollout is started again before the run goes on without it")
      ->check(CLI::Range(0, 1000));
  return [a] { return RunJob(*a); };
}

}  // namespace

LAMINAR_REGISTER_COMMAND("run",
                         "run an RL job on this machine: relay, manager, actor and rollouts, "
                         "supervised; Ctrl-C saves a checkpoint and stops",
                         SetupRun);

}  // namespace laminar::cli
