// `laminar run` as a user runs it: the whole job as real processes on the synthetic tiny-llama
// policy, supervised (a killed rollout is started again), stopped with Ctrl-C (a checkpoint is
// saved) and continued with --resume; the exported policy loads in `laminar generate`.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "actor/console.h"
#include "actor/tensorboard.h"
#include "core/host.h"
#include "core/mapped_file.h"
#include "core/process.h"
#include "tests/cli/cli_util.h"
#include "tests/test_util.h"

namespace laminar::testing {
namespace {

namespace fs = std::filesystem;

// A run recipe in `dir` on the synthetic tiny-llama; with `python_reward` the reward is a Python
// plug-in (verl's compute_score signature) instead of the built-in `contains`.
std::string WriteRunRecipe(const fs::path& dir, const std::string& model, const std::string& tok,
                           bool python_reward = false) {
  StoriesRun run;
  run.rollout = "num_workers: 2";
  run.actor = "save_every: 1";
  if (python_reward) {
    std::ofstream(dir / "reward.py")
        << "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        << "    return {'score': float(ground_truth in solution_str), 'length': "
           "len(solution_str)}\n";
    run.reward = "{python: {path: " + (dir / "reward.py").string() + "}}";
  }
  return WriteStoriesRecipe(dir, model, tok, run);
}

// `laminar run RECIPE --run-dir OUT` in the background, its stderr appended to `err`.
StatusOr<Process> SpawnRun(const std::string& recipe, const fs::path& out, const fs::path& err) {
  return Process::Spawn({LAMINAR_BINARY, "run", recipe, "--run-dir", out.string()}, err.string());
}

std::vector<nlohmann::json> Lines(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

bool WaitFor(const std::function<bool()>& done, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

// The pid of the process whose command line holds every one of `words`, or -1.
pid_t FindProcess(const std::vector<std::string>& words) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = Slurp(entry.path() / "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    bool all = !cmdline.empty();
    for (const std::string& w : words) all = all && cmdline.find(w) != std::string::npos;
    if (all) return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

TEST(RunCliTest, TrainsAFewStepsAndTheExportedPolicyLoadsInGenerate) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  const fs::path dir = TempDir("run");
  const std::string recipe = WriteRunRecipe(dir, model, tok, /*python_reward=*/true);
  auto r = RunLaminar("run " + recipe + " actor.max_steps=3 --run-dir " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("step 3 "), std::string::npos) << r.err;
  const auto metrics = Lines(dir / "out" / "metrics.jsonl");
  ASSERT_EQ(metrics.size(), 3u);
  EXPECT_EQ(metrics.back()["training/global_step"].get<double>(), 3);
  // The Python reward scored every sample without an error.
  for (const auto& m : metrics) EXPECT_EQ(m.value("reward/error_count", -1.0), 0) << m.dump();
  // Its dict's other entries are metrics: the mean response length in characters.
  for (const auto& m : metrics) EXPECT_GT(m.value("reward/length", -1.0), 0) << m.dump();
  EXPECT_TRUE(fs::exists(dir / "out" / "checkpoints" / "step_3" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "out" / "recipe.yaml"));
  // The progress file the run's bar is drawn from: its last state is step 3's training.
  auto progress_text = ReadFileToString((dir / "out" / "progress.json").string());
  ASSERT_TRUE(progress_text.ok()) << progress_text.status();
  auto progress = actor::ParseProgress(*progress_text);
  ASSERT_TRUE(progress) << *progress_text;
  EXPECT_EQ(progress->step, 3);
  EXPECT_EQ(progress->phase, "training");
  // TensorBoard events with the same values as the JSONL lines.
  std::vector<fs::path> events;
  for (const auto& e : fs::directory_iterator(dir / "out" / "tensorboard")) events.push_back(e);
  ASSERT_EQ(events.size(), 1u);
  auto read = actor::ReadTensorBoardEvents(events[0].string());
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 4u);  // the file version, then one event per step
  for (size_t i = 1; i < read->size(); ++i) {
    const auto& ev = (*read)[i];
    EXPECT_EQ(ev.step(), static_cast<int64_t>(i));
    bool found = false;
    for (const auto& v : ev.summary().value()) {
      if (v.tag() != "critic/score/mean") continue;
      found = true;
      EXPECT_FLOAT_EQ(v.simple_value(), metrics[i - 1]["critic/score/mean"].get<float>());
    }
    EXPECT_TRUE(found) << "step " << i;
  }
  EXPECT_TRUE(fs::exists(dir / "out" / "logs" / "rollout_1.log"));
  auto gen = RunLaminar("generate --model " + (dir / "out" / "model").string() +
                        " --prompt 'Once upon a time' --max-tokens 8");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_FALSE(gen.out.empty());
  // The finished run is not mixed with a new one.
  auto again =
      RunLaminar("run " + recipe + " actor.max_steps=3 --run-dir " + (dir / "out").string());
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("pass --resume"), std::string::npos) << again.err;
  EXPECT_EQ(Lines(dir / "out" / "metrics.jsonl").size(), 3u);
}

// A rollout whose manager and relay are gone stops with an error naming them instead of waiting.
TEST(RunCliTest, ARolloutWithoutItsManagerStopsWithAnError) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  const fs::path dir = TempDir("run_orphan");
  const std::string recipe = WriteRunRecipe(dir, model, tok);
  auto r = RunLaminar("rollout --recipe " + recipe +
                      " rollout.manager_timeout_s=0.5 rollout.relay_timeout_s=0.5"
                      " --manager tcp://127.0.0.1:9 --relay tcp://127.0.0.1:9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tcp://127.0.0.1:9"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("_timeout_s"), std::string::npos) << r.err;
}

TEST(RunCliTest, AKilledRolloutIsRestartedAndCtrlCSavesACheckpointToResumeFrom) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  const fs::path dir = TempDir("run_faults");
  const std::string recipe = WriteRunRecipe(dir, model, tok);
  const fs::path out = dir / "out";
  auto run = SpawnRun(recipe, out, dir / "run.err");
  ASSERT_TRUE(run.ok()) << run.status();
  const fs::path metrics = out / "metrics.jsonl";
  ASSERT_TRUE(WaitFor([&] { return Lines(metrics).size() >= 2; }, 60000)) << Slurp(dir / "run.err");
  const pid_t rollout = FindProcess({"rollout", "--id", "rollout/0", recipe});
  ASSERT_GT(rollout, 0);
  kill(rollout, SIGKILL);
  ASSERT_TRUE(WaitFor(
      [&] {
        return Slurp(dir / "run.err").find("rollout/0 killed by SIGKILL") != std::string::npos;
      },
      30000))
      << Slurp(dir / "run.err");
  EXPECT_TRUE(WaitFor(
      [&] {
        return FindProcess({"rollout", "--id", "rollout/0", recipe}) > 0;
      },
      30000));
  // Training goes on after the restart.
  const size_t before = Lines(metrics).size();
  ASSERT_TRUE(WaitFor([&] { return Lines(metrics).size() >= before + 2; }, 60000))
      << Slurp(dir / "run.err");
  run->Signal(SIGINT);
  auto code = run->Wait(60000);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 130) << Slurp(dir / "run.err");
  const std::string err = Slurp(dir / "run.err");
  EXPECT_NE(err.find("restarting it"), std::string::npos) << err;
  EXPECT_NE(err.find("--resume"), std::string::npos) << err;
  // The kill is demarcated in faults.jsonl: the role, this host, the signal, the time to recover;
  // the run's summary counts it and gives the effective training time ratio.
  nlohmann::json crash;
  for (const auto& f : Lines(out / "faults.jsonl")) {
    if (f["kind"] == "crash") crash = f;
  }
  ASSERT_TRUE(crash.is_object()) << Slurp(out / "faults.jsonl");
  EXPECT_EQ(crash["kind"], "crash") << crash.dump();
  EXPECT_EQ(crash["role"], "rollout/0") << crash.dump();
  EXPECT_EQ(crash["host"], Hostname()) << crash.dump();
  EXPECT_EQ(crash["detail"], "killed by SIGKILL") << crash.dump();
  EXPECT_EQ(crash["seen_by"], "supervisor") << crash.dump();
  EXPECT_GE(crash["recovery_s"].get<double>(), 0) << crash.dump();
  EXPECT_NE(err.find("crash 1"), std::string::npos) << err;
  EXPECT_NE(err.find("effective training time ratio"), std::string::npos) << err;
  for (const auto& m : Lines(metrics)) {
    EXPECT_GT(m.value("perf/ettr", -1.0), 0) << m.dump();
    EXPECT_LE(m.value("perf/ettr", 2.0), 1) << m.dump();
  }
  // Nothing of the run is left running.
  EXPECT_EQ(FindProcess({recipe}), -1);
  const double last = Lines(metrics).back()["training/global_step"].get<double>();
  EXPECT_TRUE(fs::exists(out / "checkpoints" / ("step_" + std::to_string(int(last)))));
  // --resume continues with the next step.
  auto resumed = RunLaminar("run " + recipe + " actor.max_steps=" + std::to_string(int(last) + 2) +
                            " --run-dir " + out.string() + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const auto all = Lines(metrics);
  EXPECT_EQ(all.back()["training/global_step"].get<double>(), last + 2);
  EXPECT_EQ(all[all.size() - 2]["training/global_step"].get<double>(), last + 1);
}

// A supervisor killed outright (SIGKILL: no chance to stop its children) does not leave the
// roles running: each gets SIGTERM from the kernel and stops as on Ctrl-C, the actor with a
// checkpoint.
TEST(RunCliTest, RolesStopWhenTheSupervisorIsKilled) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  const fs::path dir = TempDir("run_killed");
  const std::string recipe = WriteRunRecipe(dir, model, tok);
  const fs::path out = dir / "out";
  auto run = SpawnRun(recipe, out, dir / "run.err");
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(WaitFor([&] { return Lines(out / "metrics.jsonl").size() >= 1; }, 60000))
      << Slurp(dir / "run.err");
  run->Signal(SIGKILL);
  ASSERT_TRUE(run->Wait(10000).ok());
  EXPECT_TRUE(WaitFor([&] { return FindProcess({recipe}) == -1; }, 60000))
      << "roles of the killed run still run";
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "latest"));
}

// The CI-sized chaos run: every kind of fault at random (seed 1) for 40 s of a real run, which
// is resumed after each killed relay, manager or actor. The audit finds nothing lost, trained
// twice or leaked, every fault demarcated to its role, and the recovery times.
TEST(ChaosCliTest, RandomFaultsLoseNothingLeakNothingAndAreDemarcated) {
  const fs::path dir = TempDir("chaos");
  const std::string recipe = WriteRunRecipe(dir, TinyModel(), TinyModel(), /*python_reward=*/true);
  const fs::path out = dir / "out";
  auto r = RunLaminar("chaos " + recipe +
                      " rollout.heartbeat_timeout_s=2 --kill rollout,reward,relay,manager,actor"
                      " --every 4s --for 40s --seed 1 --run-dir " +
                      out.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto text = ReadFileToString((out / "chaos_report.json").string());
  ASSERT_TRUE(text.ok()) << text.status() << r.err;
  const nlohmann::json report = nlohmann::json::parse(*text);
  EXPECT_TRUE(report["clean"].get<bool>()) << report.dump(2);
  EXPECT_GE(report["injections"].size(), 5u) << report.dump(2);
  EXPECT_EQ(report["lost"], 0);
  EXPECT_EQ(report["duplicated"], 0);
  EXPECT_EQ(report["version_regressions"], 0);
  EXPECT_TRUE(report["leaked"].empty()) << report.dump(2);
  EXPECT_GT(report["steps"].get<int64_t>(), 0);
  EXPECT_GT(report["ettr"].get<double>(), 0);
  for (const auto& inj : report["injections"]) {
    EXPECT_TRUE(inj["demarcated"].get<bool>()) << inj.dump();
  }
  EXPECT_NE(r.err.find("[chaos] clean"), std::string::npos) << r.err;
}

TEST(ChaosCliTest, BadArgumentsAreRefused) {
  const fs::path dir = TempDir("chaos_bad");
  const std::string recipe = WriteRunRecipe(dir, TinyModel(), TinyModel());
  auto kind = RunLaminar("chaos " + recipe + " --kill rollout,disk");
  EXPECT_EQ(kind.exit_code, 2);
  EXPECT_NE(kind.err.find("'disk'"), std::string::npos) << kind.err;
  auto every = RunLaminar("chaos " + recipe + " --every soon");
  EXPECT_EQ(every.exit_code, 2);
  EXPECT_NE(every.err.find("--every 'soon'"), std::string::npos) << every.err;
}

TEST(RunCliTest, BadRecipesFailBeforeAnythingStarts) {
  const fs::path dir = TempDir("run_bad");
  std::ofstream(dir / "unknown.yaml") << "model: {path: m}\ndata: {path: d}\nactor: {lr_typo: 1}\n";
  auto unknown = RunLaminar("run " + (dir / "unknown.yaml").string());
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("actor.lr_typo"), std::string::npos) << unknown.err;
  std::ofstream(dir / "reward.yaml") << "model: {path: m}\ndata: {path: d}\nreward: {name: nope}\n";
  auto reward = RunLaminar("run " + (dir / "reward.yaml").string());
  EXPECT_EQ(reward.exit_code, 1);
  EXPECT_NE(reward.err.find("nope"), std::string::npos) << reward.err;
  // Speculation settings only the rollout uses are checked here too, not once the relay, the
  // manager and the actor are up.
  std::ofstream(dir / "spec.yaml")
      << "model: {path: m}\ndata: {path: d}\n"
         "rollout: {speculative: {drafter: suffix, async_draft: true}}\n";
  auto spec = RunLaminar("run " + (dir / "spec.yaml").string());
  EXPECT_EQ(spec.exit_code, 1);
  EXPECT_NE(spec.err.find("rollout.speculative.async_draft"), std::string::npos) << spec.err;
  const fs::path model = TinyModel();
  std::ofstream(dir / "data.yaml")
      << "model: {path: " << model.string() << "}\ndata: {path: " << (dir / "absent.jsonl").string()
      << "}\n";
  if (fs::exists(model)) {
    auto data = RunLaminar("run " + (dir / "data.yaml").string());
    EXPECT_EQ(data.exit_code, 1);
    EXPECT_NE(data.err.find("data.path"), std::string::npos) << data.err;
    // A row without its prompt: the manager refuses the dataset, naming the line and field.
    std::ofstream(dir / "rows.jsonl") << "{\"prompt\": \"Once\", \"ground_truth\": \"a\"}\n"
                                      << "{\"text\": \"Once\", \"ground_truth\": \"a\"}\n";
    std::ofstream(dir / "rows.yaml")
        << "model: {path: " << model.string() << "}\ndata: {path: " << (dir / "rows.jsonl").string()
        << ", default_data_source: x}\nreward: {name: contains}\n";
    auto rows = RunLaminar("run " + (dir / "rows.yaml").string() + " --run-dir " +
                           (dir / "rows_run").string());
    EXPECT_EQ(rows.exit_code, 1);
    EXPECT_NE(rows.err.find("manager stopped (exit 1) before it was ready"), std::string::npos)
        << rows.err;
    EXPECT_NE(rows.err.find("rows.jsonl:2: field 'prompt' is missing"), std::string::npos)
        << rows.err;
  }
  auto missing = RunLaminar("run " + (dir / "absent.yaml").string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("absent.yaml"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists("runs/unknown"));  // nothing created
}

}  // namespace
}  // namespace laminar::testing
