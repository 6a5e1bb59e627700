// `laminar run` as a user runs it: the whole job as real processes on the synthetic tiny-llama
// policy, supervised (a killed rollout is started again), stopped with Ctrl-C (a checkpoint is
// saved) and continued with --resume; the exported policy loads in `laminar generate`.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "actor/console.h"
#include "actor/tensorboard.h"
#include "core/fault_log.h"
#include "core/host.h"
#include "core/mapped_file.h"
#include "core/process.h"
#include "launch/manager_ledger.h"
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

// actor.world_size 2: two actor processes each train on half of every mini-batch's groups
// (balanced by tokens) and all-reduce their gradients. In sync mode the rollouts sample the same
// groups either way, so two ranks end with one rank's weights, within f32 reduction-order
// rounding, and report the same batch metrics; the checkpoint resumes with one rank or two.
TEST(RunCliTest, TwoActorRanksTrainAsOneRankOnTheSameGlobalBatch) {
  const std::string model = TinyModel();
  const fs::path dir = TempDir("dp_run");
  // A reward that differs within a group, so that every step has a policy gradient.
  std::ofstream(dir / "reward.py")
      << "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
      << "    return float(len(solution_str) % 7) / 6\n";
  StoriesRun run;
  run.num_prompts = 8;
  run.reward = "{python: {path: " + (dir / "reward.py").string() + ", num_workers: 1}}";
  run.rollout = "num_workers: 2";
  run.actor = "save_every: 2, compute: f32";
  run.extra = "mode: sync\n";
  const std::string recipe = WriteStoriesRecipe(dir, model, model, run);
  // Four groups a step, one update (the order in which groups finish, which timing decides even
  // in sync mode, would change what several mini-batches hold).
  const std::string batch = " actor.groups_per_step=4";
  auto one = RunLaminar("run " + recipe + batch + " actor.max_steps=4 --run-dir " +
                        (dir / "one").string());
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = RunLaminar("run " + recipe + batch + " actor.max_steps=4 actor.world_size=2 " +
                        "--run-dir " + (dir / "two").string());
  ASSERT_EQ(two.exit_code, 0) << two.err << Slurp(dir / "two" / "logs" / "actor_1.log");
  const std::string rank1 = Slurp(dir / "two" / "logs" / "actor_1.log");
  EXPECT_NE(rank1.find("actor rank 1 of 2 joined at step 0"), std::string::npos) << rank1;
  EXPECT_NE(rank1.find("step 4: trained 4 of 8 samples"), std::string::npos) << rank1;
  EXPECT_NE(rank1.find("rank 0 ended the run at step 4"), std::string::npos) << rank1;
  const auto m1 = Lines(dir / "one" / "metrics.jsonl");
  const auto m2 = Lines(dir / "two" / "metrics.jsonl");
  ASSERT_EQ(m1.size(), 4u);
  ASSERT_EQ(m2.size(), 4u);
  double grad_norm = 0;
  for (size_t i = 0; i < m1.size(); ++i) {
    grad_norm = std::max(grad_norm, m1[i]["actor/grad_norm"].get<double>());
    // The whole batch's metrics, whichever rank trained which group.
    for (const char* k : {"critic/score/mean", "response_length/mean", "critic/advantages/max",
                          "critic/advantages/min", "actor/grad_norm"}) {
      EXPECT_NEAR(m2[i][k].get<double>(), m1[i][k].get<double>(),
                  1e-4 * std::max(1.0, std::abs(m1[i][k].get<double>())))
          << k << " at step " << i + 1;
    }
  }
  EXPECT_GT(grad_norm, 0) << "no step had a gradient: the comparison below proves nothing";
  // Adam's normalized steps carry the rounding of the gradient's sum order (about 1e-5 after
  // four steps); ranks that trained on their halves alone differ by the step size.
  ExpectTensorsNear(F32Tensors(dir / "one" / "checkpoints" / "step_4" / "model.safetensors"),
                    F32Tensors(dir / "two" / "checkpoints" / "step_4" / "model.safetensors"),
                    1e-4f);
  // Every rank holds the whole state: a checkpoint of two ranks resumes with one, and that one's
  // with two again.
  auto resumed = RunLaminar("run " + recipe + batch + " actor.max_steps=5 --resume --run-dir " +
                            (dir / "two").string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  // (with two mini-batches of two groups: each rank updates on one group of each)
  auto again = RunLaminar("run " + recipe + batch +
                          " actor.mini_batch_size=4 actor.max_steps=6 actor.world_size=2 "
                          "--resume --run-dir " +
                          (dir / "two").string());
  ASSERT_EQ(again.exit_code, 0) << again.err << Slurp(dir / "two" / "logs" / "actor_1.log");
  EXPECT_EQ(Lines(dir / "two" / "metrics.jsonl").size(), 6u);
  EXPECT_NE(Slurp(dir / "two" / "logs" / "actor_1.log").find("joined at step 5"),
            std::string::npos);
  // Steps or mini-batches that do not split evenly over the ranks are refused before anything
  // starts.
  auto uneven =
      RunLaminar("run " + recipe + " actor.world_size=3 --run-dir " + (dir / "three").string());
  EXPECT_EQ(uneven.exit_code, 1);
  EXPECT_NE(uneven.err.find("actor.groups_per_step 2 is not a multiple of actor.world_size 3"),
            std::string::npos)
      << uneven.err;
  auto cut = RunLaminar("run " + recipe + " actor.world_size=2 actor.mini_batch_size=2 " +
                        "--run-dir " + (dir / "cut").string());
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_NE(cut.err.find("actor.mini_batch_size 2 is not a multiple of actor.world_size 2 x "
                         "rollout.n 2"),
            std::string::npos)
      << cut.err;
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

// With run.keys every role authenticates with the run's CURVE keys (`laminar keys`), and the run
// trains as without; a bad key file, a key file written twice and a multi-machine recipe without
// keys are refused before anything starts.
TEST(RunCliTest, RolesAuthenticateWithTheRunsKeys) {
  const std::string model = TinyModel();
  const fs::path dir = TempDir("run_keys");
  const std::string recipe = WriteRunRecipe(dir, model, model);
  const std::string keys = (dir / "run.keys").string();
  auto made = RunLaminar("keys " + keys);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_EQ(made.out.size(), 41u) << made.out;  // the public key, Z85, and a newline
  EXPECT_NE(RunLaminar("keys " + keys).err.find("never overwritten"), std::string::npos);
  auto r = RunLaminar("run " + recipe + " actor.max_steps=2 run.keys=" + keys + " --run-dir " +
                      (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(dir / "out" / "metrics.jsonl").size(), 2u);
  int logs = 0;
  for (const auto& e : fs::directory_iterator(dir / "out" / "logs")) {
    const std::string log = Slurp(e.path());
    EXPECT_NE(log.find("authenticated and encrypted with CURVE"), std::string::npos) << e.path();
    EXPECT_EQ(log.find("refused"), std::string::npos) << e.path() << ":\n" << log;
    ++logs;
  }
  EXPECT_EQ(logs, 5);  // the relay, the manager, the actor and two rollouts
  std::ofstream(dir / "bad.keys") << "public = nope\n";
  auto bad = RunLaminar("run " + recipe + " run.keys=" + (dir / "bad.keys").string() +
                        " --run-dir " + (dir / "bad").string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("run.keys"), std::string::npos) << bad.err;
  EXPECT_FALSE(fs::exists(dir / "bad" / "logs" / "relay.log"));
  auto open = RunLaminar("manager --recipe " + recipe + " cluster.nodes=2");
  EXPECT_EQ(open.exit_code, 1);
  EXPECT_NE(open.err.find("laminar keys"), std::string::npos) << open.err;
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

// A `laminar run` of the test recipe, two steps in, and its master relay.
struct StartedRun {
  fs::path dir, out;
  std::string recipe;
  Process run;
  pid_t relay = -1;
};

// Starts `laminar run` of WriteRunRecipe's recipe in TempDir(`name`) and waits for two steps.
void StartRunTwoStepsIn(const std::string& name, StartedRun* r) {
  r->dir = TempDir(name);
  r->recipe = WriteRunRecipe(r->dir, TinyModel(), TinyModel());
  r->out = r->dir / "out";
  auto run = SpawnRun(r->recipe, r->out, r->dir / "run.err");
  ASSERT_TRUE(run.ok()) << run.status();
  r->run = std::move(*run);
  ASSERT_TRUE(WaitFor([&] { return Lines(r->out / "metrics.jsonl").size() >= 2; }, 60000))
      << Slurp(r->dir / "run.err");
  // This run's relay (other tests' runs may be running too).
  r->relay =
      FindProcess({"relay", "--id master", "laminar-run-" + std::to_string(r->run.pid()) + " "});
  ASSERT_GT(r->relay, 0);
}

// The master relay killed mid-run is started again in place, on the endpoint the others know:
// the actor's publisher sends it the newest version again, the rollouts pull the versions that
// follow, and training goes on without a resume; faults.jsonl records the crash and its recovery.
TEST(RunCliTest, AKilledRelayIsRestartedInPlaceAndTrainingGoesOn) {
  StartedRun s;
  ASSERT_NO_FATAL_FAILURE(StartRunTwoStepsIn("run_relay_killed", &s));
  const fs::path &dir = s.dir, &out = s.out, metrics = out / "metrics.jsonl";
  const std::string& recipe = s.recipe;
  Process* run = &s.run;
  kill(s.relay, SIGKILL);
  ASSERT_TRUE(WaitFor(
      [&] {
        return Slurp(dir / "run.err").find("relay killed by SIGKILL; restarting it") !=
               std::string::npos;
      },
      30000))
      << Slurp(dir / "run.err");
  // The actor's publisher finds the new relay empty and sends it the newest version; steps go on,
  // with versions published after the restart, and the run never resumed.
  EXPECT_TRUE(WaitFor(
      [&] {
        return Slurp(out / "logs" / "actor.log").find("restarted without version") !=
               std::string::npos;
      },
      30000))
      << Slurp(out / "logs" / "actor.log");
  const size_t before = Lines(metrics).size();
  ASSERT_TRUE(WaitFor([&] { return Lines(metrics).size() >= before + 3; }, 120000))
      << Slurp(dir / "run.err");
  EXPECT_TRUE(run->Running());
  run->Signal(SIGINT);
  auto code = run->Wait(60000);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 130) << Slurp(dir / "run.err");
  nlohmann::json crash;
  for (const auto& f : Lines(out / "faults.jsonl")) {
    if (f["kind"] == "crash" && f["role"] == "relay") crash = f;
  }
  ASSERT_TRUE(crash.is_object()) << Slurp(out / "faults.jsonl");
  EXPECT_EQ(crash["detail"], "killed by SIGKILL") << crash.dump();
  ASSERT_TRUE(crash["recovery_s"].is_number()) << crash.dump();
  EXPECT_GE(crash["recovery_s"].get<double>(), 0) << crash.dump();
  EXPECT_EQ(FindProcess({recipe}), -1);
}

// A role that is there but gives no sign of life is hung: `laminar run` records it and kills it
// after twice the heartbeat timeout. The master relay stopped (SIGSTOP) answers no ping and is
// restarted in place, its hang recovered; the actor stopped ends the run, to be resumed. Neither
// is recorded as a crash as well.
TEST(RunCliTest, HungRolesAreDeclaredHungKilledAndRecorded) {
  StartedRun s;
  ASSERT_NO_FATAL_FAILURE(StartRunTwoStepsIn("run_roles_hung", &s));
  const fs::path &dir = s.dir, &out = s.out, metrics = out / "metrics.jsonl";
  const std::string& recipe = s.recipe;
  Process* run = &s.run;
  kill(s.relay, SIGSTOP);
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::string err = Slurp(dir / "run.err");
        return err.find("relay answered no ping for") != std::string::npos &&
               err.find("relay killed by SIGKILL; restarting it") != std::string::npos;
      },
      30000))
      << Slurp(dir / "run.err");
  const size_t before = Lines(metrics).size();
  ASSERT_TRUE(WaitFor([&] { return Lines(metrics).size() >= before + 2; }, 60000))
      << Slurp(dir / "run.err");
  const pid_t actor = FindProcess({" actor --recipe", recipe});  // every role has actor.* args
  ASSERT_GT(actor, 0);
  kill(actor, SIGSTOP);
  auto code = run->Wait(60000);
  ASSERT_TRUE(code.ok()) << code.status() << Slurp(dir / "run.err");
  EXPECT_NE(*code, 0);
  EXPECT_NE(Slurp(dir / "run.err").find("actor was stopped for"), std::string::npos)
      << Slurp(dir / "run.err");
  std::map<std::string, nlohmann::json> hangs;
  for (const nlohmann::json& f : ReadFaults((out / "faults.jsonl").string())) {
    EXPECT_FALSE(f["kind"] == "crash" && (f["role"] == "relay" || f["role"] == "actor")) << f;
    if (f["kind"] == "hang") hangs[f["role"].get<std::string>()] = f;
  }
  ASSERT_TRUE(hangs.contains("relay") && hangs.contains("actor")) << Slurp(out / "faults.jsonl");
  EXPECT_EQ(hangs["relay"]["seen_by"], "supervisor");
  EXPECT_EQ(hangs["relay"]["host"], Hostname());
  ASSERT_TRUE(hangs["relay"]["recovery_s"].is_number()) << hangs["relay"];
  EXPECT_GT(hangs["relay"]["recovery_s"].get<double>(), 0);
  EXPECT_TRUE(hangs["actor"]["recovered_unix_s"].is_null()) << hangs["actor"];  // a resume's
  EXPECT_EQ(FindProcess({recipe}), -1);
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

// Whether this process holds CAP_SYS_ADMIN (what a mount namespace and a tmpfs need).
bool MayMount() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("CapEff:")) {
      constexpr int kCapSysAdmin = 21;
      return (std::stoull(line.substr(7), nullptr, 16) >> kCapSysAdmin & 1) != 0;
    }
  }
  return false;
}

// The CI-sized chaos run: every kind of fault at random (seed 1) for about two minutes of a real
// run: rollouts killed, hung and slowed, reward workers killed, the relay killed or hung (restarted
// in place), the manager and actor killed or hung (the run resumed each time), the checkpoints'
// disk full now and then. The checkpoints are on the folder underneath afterwards. The audit finds
// nothing lost, trained twice or leaked, every fault demarcated to its role and host, no record
// without a fault, and the recovery times.
TEST(ChaosCliTest, RandomFaultsLoseNothingLeakNothingAndAreDemarcated) {
  const fs::path dir = TempDir("chaos");
  const std::string recipe = WriteRunRecipe(dir, TinyModel(), TinyModel(), /*python_reward=*/true);
  const fs::path out = dir / "out";
  // A full disk needs a mount namespace of chaos's own: CAP_SYS_ADMIN (CI runs as root).
  const std::string kinds =
      std::string("rollout,straggler,reward,relay,manager,actor") + (MayMount() ? ",disk" : "");
  // Responses of up to 256 tokens keep groups on a rollout long enough for a slowed one to show.
  auto r = RunLaminar("chaos " + recipe +
                      " rollout.heartbeat_timeout_s=2 rollout.max_tokens=256 --kill " + kinds +
                      " --every 5s --for 100s --seed 1 --run-dir " + out.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto text = ReadFileToString((out / "chaos_report.json").string());
  ASSERT_TRUE(text.ok()) << text.status() << r.err;
  const nlohmann::json report = nlohmann::json::parse(*text);
  EXPECT_TRUE(report["clean"].get<bool>()) << report.dump(2);
  EXPECT_GE(report["injections"].size(), 10u) << report.dump(2);
  EXPECT_TRUE(report["unexplained"].empty()) << report.dump(2);
  EXPECT_EQ(report["lost"], 0);
  EXPECT_EQ(report["duplicated"], 0);
  EXPECT_EQ(report["version_regressions"], 0);
  EXPECT_TRUE(report["leaked"].empty()) << report.dump(2);
  EXPECT_GT(report["steps"].get<int64_t>(), 0);
  EXPECT_GT(report["ettr"].get<double>(), 0);
  std::set<std::string> kinds_hit;
  for (const auto& inj : report["injections"]) {
    EXPECT_TRUE(inj["demarcated"].get<bool>()) << inj.dump();
    EXPECT_EQ(inj["host"], Hostname()) << inj.dump();
    kinds_hit.insert(inj["how"].get<std::string>() + " " + inj["kind"].get<std::string>());
  }
  EXPECT_TRUE(kinds_hit.contains("straggle straggler")) << report.dump(2);
  EXPECT_NE(r.err.find("[chaos] clean"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(out / "checkpoints" / "latest"));
}

// What ResumeAudit saw: the trajectory log's prompt ids by step (the last run's, for a step trained
// again after a resume), every step number in metrics.jsonl in file order, and how each attempt
// was interrupted.
struct AuditedRun {
  std::map<int64_t, std::multiset<std::string>> prompts;
  std::vector<int64_t> steps;
  std::vector<std::string> interrupts;
};

// SIGKILLs `pid` the moment an entry named `prefix`* (but not *-delete) appears in `dir`
// (inotify), or after `timeout_ms`; returns the entry's name, empty when none appeared.
std::string KillWhenCreated(const fs::path& dir, const std::string& prefix, pid_t pid,
                            int timeout_ms) {
  fs::create_directories(dir);
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return "";
  std::string name;
  if (inotify_add_watch(fd, dir.c_str(), IN_CREATE | IN_MOVED_TO) >= 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    alignas(inotify_event) char buf[4096];
    while (name.empty() && std::chrono::steady_clock::now() < deadline) {
      pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const ssize_t n = read(fd, buf, sizeof(buf));
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
        // "-delete": an old checkpoint on its way out, not a write.
        if (e->len > 0 && std::string_view(e->name).starts_with(prefix) &&
            !std::string_view(e->name).ends_with("-delete")) {
          kill(pid, SIGKILL);
          name = e->name;
          break;
        }
        at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
    }
  }
  close(fd);
  return name;
}

// The rows of `rows` whose groups the manager of the run logging to `run_err` from byte `from` on
// has handed to a rollout now (its ledger, asked over its control socket), or none when it does
// not answer or has not started.
std::set<int64_t> RowsInFlight(const fs::path& run_err, size_t from,
                               const std::set<int64_t>& rows) {
  const std::string all = Slurp(run_err);
  const std::string endpoint =
      launch::ManagerEndpointInRunLog(all.size() > from ? all.substr(from) : "");
  if (endpoint.empty()) return {};
  auto ledger = launch::AskManagerLedger(endpoint, "test", 2000);
  if (!ledger.ok()) return {};
  std::set<int64_t> found;
  for (const nlohmann::json& g : ledger->value("in_flight", nlohmann::json::array())) {
    const int64_t row = g.value("row", int64_t{-1});
    if (rows.contains(row) && !g.value("rollout", std::string()).empty()) found.insert(row);
  }
  return found;
}

// `laminar run RECIPE OVERRIDES --run-dir OUT` to the end, interrupted `max_interrupts` times, each
// time continued with --resume (once a checkpoint exists). The interruption points are taken in
// turn from a seeded start: the actor SIGKILLed while it writes a checkpoint (the moment its
// temporary folder appears; checkpoints are saved every step); the run interrupted at an epoch
// boundary (the first step of an epoch, every `steps_per_epoch`: Ctrl-C or `laminar run`
// SIGKILLed in turn) or, with `long_tail_rows` instead, while a rollout generates the group of one
// of those rows (the same signals in turn); and mid-step (a random number of steps plus a random
// fraction of one, then the actor SIGKILLed, Ctrl-C, or `laminar run` SIGKILLed). Each interruption
// is named with what it hit: a checkpoint write that finished before the signal is said so.
AuditedRun ResumeAudit(const std::string& recipe, const std::vector<std::string>& overrides,
                       const fs::path& out, int64_t max_steps, int max_interrupts, uint32_t seed,
                       int64_t steps_per_epoch = 0, const std::set<int64_t>& long_tail_rows = {}) {
  AuditedRun audit;
  std::mt19937 rng(seed);
  for (int attempt = 0; attempt < max_interrupts + 4; ++attempt) {
    std::vector<std::string> argv = {LAMINAR_BINARY, "run", recipe};
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    argv.insert(argv.end(), {"--run-dir", out.string()});
    if (fs::exists(out / "checkpoints" / "latest")) argv.push_back("--resume");
    const fs::path run_err = out.parent_path() / "run.err";
    const size_t err_from = Slurp(run_err).size();  // this attempt's lines come after
    auto run = Process::Spawn(argv, run_err.string());
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return audit;
    const bool interrupt = static_cast<int>(audit.interrupts.size()) < max_interrupts;
    const auto lines = [&] { return Lines(out / "metrics.jsonl").size(); };
    // Steps are counted once every role is up: a resume first cuts metrics.jsonl back to its
    // checkpoint.
    if (interrupt) {
      WaitFor(
          [&] {
            return !run->Running() ||
                   Slurp(run_err).find(" rollouts, manager ", err_from) != std::string::npos;
          },
          60000);
    }
    // Steps of the test model take tens of milliseconds: poll often.
    const auto wait_for_steps = [&](size_t at) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (lines() < at && run->Running() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    };
    const size_t turn = seed + audit.interrupts.size();
    const size_t point = turn % 3;
    if (interrupt && point == 0) {
      // Mid-checkpoint-write: the actor is up once the run has taken a step.
      wait_for_steps(lines() + 1);
      const pid_t actor = FindProcess({" actor --recipe", recipe});
      const std::string tmp =
          actor > 0 ? KillWhenCreated(out / "checkpoints", ".tmp-step_", actor, 30000) : "";
      if (!tmp.empty()) {
        const bool mid = fs::exists(out / "checkpoints" / tmp);
        audit.interrupts.push_back(
            std::string("actor killed ") +
            (mid ? "mid-checkpoint-write (left " + tmp + ")" : "as a checkpoint write finished") +
            " after " + std::to_string(lines()) + " steps");
      }
    } else if (interrupt && point == 1 && !long_tail_rows.empty()) {
      // While a long-tail group is being generated.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      std::set<int64_t> rows;
      while (rows.empty() && run->Running() && std::chrono::steady_clock::now() < deadline) {
        rows = RowsInFlight(run_err, err_from, long_tail_rows);
        if (rows.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (!rows.empty() && run->Running()) {
        const bool ctrl_c = turn / 3 % 2 == 0;
        run->Signal(ctrl_c ? SIGINT : SIGKILL);
        std::string which;
        for (int64_t row : rows) which += (which.empty() ? "" : ",") + std::to_string(row);
        audit.interrupts.push_back(std::string(ctrl_c ? "Ctrl-C" : "laminar run killed") +
                                   " with the long-tail group of row(s) " + which +
                                   " in flight after " + std::to_string(lines()) + " steps");
      }
    } else if (interrupt && point == 1 && steps_per_epoch > 0) {
      // At the epoch boundary ahead: the first step of the next epoch is written.
      const size_t next = (lines() / steps_per_epoch + 1) * steps_per_epoch + 1;
      if (next < static_cast<size_t>(max_steps)) {
        wait_for_steps(next);
        if (run->Running()) {
          const bool ctrl_c = turn / 3 % 2 == 0;
          run->Signal(ctrl_c ? SIGINT : SIGKILL);
          audit.interrupts.push_back(std::string(ctrl_c ? "Ctrl-C" : "laminar run killed") +
                                     " at the epoch boundary after " + std::to_string(lines()) +
                                     " steps");
        }
      }
    } else if (interrupt) {
      // One or two more steps than the attempt started with (so every attempt makes progress),
      // then up to a step's time more: mid-step, mid-save or between steps.
      wait_for_steps(std::min<size_t>(lines() + std::uniform_int_distribution<size_t>(1, 2)(rng),
                                      static_cast<size_t>(max_steps - 1)));
      std::this_thread::sleep_for(
          std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 40)(rng)));
      if (run->Running() && lines() < static_cast<size_t>(max_steps)) {
        const size_t how = turn / 3 % 3;
        const pid_t actor = FindProcess({" actor --recipe", recipe});
        if (how == 0 && actor > 0) {
          kill(actor, SIGKILL);
          audit.interrupts.push_back("actor killed mid-step after " + std::to_string(lines()) +
                                     " steps");
        } else if (how == 1) {
          run->Signal(SIGINT);
          audit.interrupts.push_back("Ctrl-C mid-step after " + std::to_string(lines()) + " steps");
        } else {
          run->Signal(SIGKILL);
          audit.interrupts.push_back("laminar run killed mid-step after " +
                                     std::to_string(lines()) + " steps");
        }
      }
    }
    auto code = run->Wait(120000);
    EXPECT_TRUE(code.ok()) << code.status();
    if (code.ok() && *code == 0) break;
    // Roles of a killed `laminar run` stop on their own (they watch it); wait for the actor.
    WaitFor([&] { return FindProcess({" actor --recipe", recipe}) < 0; }, 30000);
  }
  int64_t previous = 0;
  for (const auto& t : Lines(out / "trajectories.jsonl")) {
    const int64_t step = t["step"].get<int64_t>();
    if (step != previous) audit.prompts[step].clear();
    audit.prompts[step].insert(t["prompt_id"].get<std::string>());
    previous = step;
  }
  for (const auto& m : Lines(out / "metrics.jsonl")) {
    audit.steps.push_back(m["training/global_step"].get<int64_t>());
  }
  return audit;
}

std::string Bytes(const fs::path& p) { return Slurp(p); }

// Sync mode with f32 trains the same prompts at every step and
// ends with bit-identical weights however often and wherever the run is interrupted and resumed:
// mid-step, mid-checkpoint-write and at an epoch boundary (8 prompts, 2 groups a step: an epoch
// ends every 4 steps).
TEST(ResumeAuditTest, SyncRunsInterruptedAnywhereEndWithTheUninterruptedWeights) {
  const std::string model = TinyModel();
  constexpr int64_t kSteps = 12, kStepsPerEpoch = 4;
  auto recipe_in = [&](const fs::path& dir) {
    StoriesRun run;
    run.num_prompts = 8;
    run.rollout = "num_workers: 2";
    run.actor = "save_every: 1, compute: f32";
    run.extra = "mode: sync\n";
    return WriteStoriesRecipe(dir, model, model, run);
  };
  auto overrides = [](const fs::path& out) {
    return std::vector<std::string>{
        "actor.max_steps=" + std::to_string(kSteps),
        "actor.trajectory_log=" + (out / "trajectories.jsonl").string()};
  };
  const fs::path a = TempDir("audit_sync_straight");
  const AuditedRun straight =
      ResumeAudit(recipe_in(a), overrides(a / "out"), a / "out", kSteps, 0, 0);
  const fs::path b = TempDir("audit_sync_interrupted");
  const AuditedRun resumed =
      ResumeAudit(recipe_in(b), overrides(b / "out"), b / "out", kSteps, 3, 41, kStepsPerEpoch);
  std::string how;
  for (const std::string& i : resumed.interrupts) how += i + "; ";
  std::cout << "interrupts: " << how << "\n";
  EXPECT_EQ(resumed.interrupts.size(), 3u) << how;
  EXPECT_NE(how.find("checkpoint"), std::string::npos) << how;
  EXPECT_NE(how.find("at the epoch boundary"), std::string::npos) << how;
  std::vector<int64_t> want_steps(kSteps);
  std::iota(want_steps.begin(), want_steps.end(), 1);
  EXPECT_EQ(straight.steps, want_steps);
  EXPECT_EQ(resumed.steps, want_steps) << how << "see " << b;  // none repeated, none missing
  ASSERT_EQ(straight.prompts.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(resumed.prompts, straight.prompts) << how << "see " << b;
  const std::string final_ckpt = "out/checkpoints/step_" + std::to_string(kSteps);
  const std::string want = Bytes(a / final_ckpt / "model.safetensors");
  ASSERT_FALSE(want.empty());
  EXPECT_TRUE(Bytes(b / final_ckpt / "model.safetensors") == want)
      << "the final weights differ after " << how << "see " << b;
}

// async mode over one epoch: whatever the interrupts, every prompt is trained exactly once, as in
// the uninterrupted run (the order within the epoch may differ: groups complete as they finish).
// Every fourth row is a long tail (up to 256 tokens where the rest stop at 16), and one interrupt
// comes while a rollout generates one.
TEST(ResumeAuditTest, AsyncRunsInterruptedAnywhereConsumeEveryPromptOnce) {
  const std::string model = TinyModel();
  constexpr int64_t kSteps = 6;  // 12 prompts, 2 groups a step: one epoch
  const std::set<int64_t> long_tail = {0, 4, 8};
  auto recipe_in = [&](const fs::path& dir) {
    StoriesRun run;
    run.num_prompts = 12;
    run.rollout = "num_workers: 2";
    run.actor = "save_every: 1";
    run.data = "num_epochs: 1, max_tokens_key: max_tokens";
    const std::string recipe = WriteStoriesRecipe(dir, model, model, run);
    std::vector<nlohmann::json> rows = Lines(dir / "prompts.jsonl");
    std::ofstream out(dir / "prompts.jsonl");
    for (size_t i = 0; i < rows.size(); ++i) {
      if (long_tail.contains(static_cast<int64_t>(i))) rows[i]["max_tokens"] = 256;
      out << rows[i].dump() << "\n";
    }
    return recipe;
  };
  auto overrides = [](const fs::path& out) {
    return std::vector<std::string>{
        "rollout.kv_cache_mb=8",  // room for the long tails
        "actor.max_steps=" + std::to_string(kSteps),
        "actor.trajectory_log=" + (out / "trajectories.jsonl").string()};
  };
  auto consumed = [](const AuditedRun& r) {
    std::multiset<std::string> all;
    for (const auto& [step, ids] : r.prompts) all.insert(ids.begin(), ids.end());
    return all;
  };
  const fs::path a = TempDir("audit_async_straight");
  const AuditedRun straight =
      ResumeAudit(recipe_in(a), overrides(a / "out"), a / "out", kSteps, 0, 0);
  const fs::path b = TempDir("audit_async_interrupted");
  const AuditedRun resumed =
      ResumeAudit(recipe_in(b), overrides(b / "out"), b / "out", kSteps, 3, 7, 0, long_tail);
  std::string how;
  for (const std::string& i : resumed.interrupts) how += i + "; ";
  std::cout << "interrupts: " << how << "\n";
  std::vector<int64_t> want_steps(kSteps);
  std::iota(want_steps.begin(), want_steps.end(), 1);
  EXPECT_EQ(resumed.interrupts.size(), 3u) << how;
  EXPECT_NE(how.find("long-tail group"), std::string::npos) << how;
  EXPECT_EQ(resumed.steps, want_steps) << how << "see " << b;
  std::multiset<std::string> every;
  for (int row = 0; row < 12; ++row) {
    // n = 2 samples of each group
    every.insert(std::to_string(row) + "@0");
    every.insert(std::to_string(row) + "@0");
  }
  EXPECT_EQ(consumed(straight), every);
  EXPECT_EQ(consumed(resumed), consumed(straight)) << how << "see " << b;
}

TEST(ChaosCliTest, BadArgumentsAreRefused) {
  const fs::path dir = TempDir("chaos_bad");
  const std::string recipe = WriteRunRecipe(dir, TinyModel(), TinyModel());
  auto kind = RunLaminar("chaos " + recipe + " --kill rollout,meteor");
  EXPECT_EQ(kind.exit_code, 2);
  EXPECT_NE(kind.err.find("'meteor'"), std::string::npos) << kind.err;
  auto no_saves = RunLaminar("chaos " + recipe + " actor.save_every=0 --kill disk --run-dir " +
                             (dir / "out").string());
  EXPECT_EQ(no_saves.exit_code, 2);
  EXPECT_NE(no_saves.err.find("actor.save_every"), std::string::npos) << no_saves.err;
  auto every = RunLaminar("chaos " + recipe + " --every soon");
  EXPECT_EQ(every.exit_code, 2);
  EXPECT_NE(every.err.find("--every 'soon'"), std::string::npos) << every.err;
  // Unbounded durations are refused, not run for ever.
  for (const std::string bad : {"inf", "1e400", "nan"}) {
    auto forever = RunLaminar("chaos " + recipe + " --for " + bad);
    EXPECT_EQ(forever.exit_code, 2) << bad;
    EXPECT_NE(forever.err.find("--for '" + bad + "'"), std::string::npos) << forever.err;
  }
  // A folder an earlier run wrote to, if only its metrics, is not audited as this run's.
  fs::create_directories(dir / "used");
  std::ofstream(dir / "used" / "metrics.jsonl") << "{}\n";
  auto used = RunLaminar("chaos " + recipe + " --run-dir " + (dir / "used").string());
  EXPECT_NE(used.exit_code, 0);
  EXPECT_NE(used.err.find("holds an earlier run (metrics.jsonl)"), std::string::npos) << used.err;
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
