// The asynchronous RL loop as real processes: `laminar relay`, `laminar manager`, two
// `laminar rollout`s and `laminar actor` on the synthetic tiny-llama policy, in each mode; faults
// by SIGKILL of a rollout and of the actor (then --resume).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/fault_log.h"
#include "core/mapped_file.h"
#include "core/process.h"
#include "core/zmq_transport.h"
#include "proto/codec.h"
#include "tests/cli/cli_util.h"
#include "tests/test_util.h"

namespace laminar::testing {
namespace {

namespace fs = std::filesystem;

std::vector<nlohmann::json> ReadJsonl(const fs::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

// A run's processes; the destructor (Process's) stops whatever is still running.
struct RlRun {
  fs::path dir;
  Process relay, manager, actor;
  std::vector<Process> rollouts;
  std::string relay_endpoint, manager_endpoint;
  std::vector<std::string> overrides;

  // Starts `argv` with its stderr in dir/<name>.log and reads its ready line's `key`.
  static std::string StartRole(Process* p, const std::vector<std::string>& argv,
                               const fs::path& log, const std::string& key) {
    auto spawned = Process::Spawn(argv, log.string());
    EXPECT_TRUE(spawned.ok()) << spawned.status();
    if (!spawned.ok()) return "";
    *p = std::move(*spawned);
    auto line = p->ReadLine(20000);
    EXPECT_TRUE(line.ok()) << line.status() << " (see " << log << ")";
    auto j = nlohmann::json::parse(line.ok() ? *line : "{}", nullptr, false);
    return j.is_object() && j.contains(key) ? j[key].get<std::string>() : "";
  }

  std::vector<std::string> Role(const std::string& role) const {
    std::vector<std::string> argv = {LAMINAR_BINARY, role, "--recipe", (dir / "recipe.yaml")};
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    return argv;
  }

  void StartActor(bool resume) {
    auto argv = Role("actor");
    argv.insert(argv.end(), {"--manager", manager_endpoint, "--relay", relay_endpoint});
    if (resume) argv.push_back("--resume");
    StartRole(&actor, argv, dir / (resume ? "actor_resumed.log" : "actor.log"), "role");
  }

  void StartRollout(int i) {
    auto argv = Role("rollout");
    const std::string id = "rollout/" + std::to_string(i);
    argv.insert(argv.end(), {"--id", id, "--manager", manager_endpoint, "--relay", relay_endpoint});
    rollouts.emplace_back();
    StartRole(
        &rollouts.back(), argv,
        dir / ("rollout" + std::to_string(i) + "_" + std::to_string(rollouts.size()) + ".log"),
        "role");
  }

  // Starts every role; `resume` restarts a killed run (logs get the suffix "_resumed").
  void Start(int num_rollouts, bool resume = false) {
    const std::string tag = resume ? "_resumed" : "";
    relay_endpoint = StartRole(&relay,
                               {LAMINAR_BINARY, "relay", "--id", "master", "--shm-prefix",
                                "lt" + std::to_string(getpid()) + dir.filename().string() + tag},
                               dir / ("relay" + tag + ".log"), "control");
    manager_endpoint =
        StartRole(&manager, Role("manager"), dir / ("manager" + tag + ".log"), "endpoint");
    ASSERT_FALSE(relay_endpoint.empty());
    ASSERT_FALSE(manager_endpoint.empty());
    StartActor(resume);
    for (int i = 0; i < num_rollouts; ++i) StartRollout(i);
  }

  // The actor's exit code (-1 on timeout).
  int WaitActor(int timeout_ms) {
    auto code = actor.Wait(timeout_ms);
    EXPECT_TRUE(code.ok()) << code.status() << " (see " << dir / "actor.log"
                           << ")";
    return code.ok() ? *code : -1;
  }
};

std::string WriteRecipe(const fs::path& dir, const std::string& model, const std::string& tok,
                        const std::string& extra) {
  StoriesRun run;
  run.num_prompts = 24;
  run.data = "seed: 3";
  run.actor = "max_steps: 3, metrics: " + (dir / "metrics.jsonl").string() +
              ", trajectory_log: " + (dir / "trajectories.jsonl").string();
  run.extra = "repack: {interval_s: 0.2}\n" + extra;
  run.heartbeat_timeout_s = 1.5;
  return WriteStoriesRecipe(dir, model, tok, run);
}

class RlLoopTest : public ::testing::TestWithParam<std::string> {};

bool WaitForLines(const fs::path& path, size_t lines, int timeout_ms);
size_t WaitForMetric(const fs::path& path, const std::string& key, double at_least, int timeout_ms);

// Checks shared by every run: versions advance by one per step, every trained sample's version
// is at most the actor's, staleness within the mode's bound, whole groups, no (prompt, sample)
// trained twice, the metric keys.
void CheckRun(const fs::path& dir, int64_t steps, int64_t max_staleness) {
  auto metrics = ReadJsonl(dir / "metrics.jsonl");
  ASSERT_EQ(static_cast<int64_t>(metrics.size()), steps);
  for (int64_t i = 0; i < steps; ++i) {
    const auto& m = metrics[static_cast<size_t>(i)];
    EXPECT_EQ(m["training/version"].get<double>(), static_cast<double>(i + 1));
    for (const char* key : {"actor/pg_loss",
                            "actor/grad_norm",
                            "critic/score/mean",
                            "response_length/mean",
                            "staleness/mean",
                            "staleness/p50",
                            "staleness/p99",
                            "staleness/max",
                            "timing_s/gen",
                            "timing_s/step",
                            "timing_s/update_weights",
                            "perf/throughput",
                            "trainer/idle_ratio",
                            "rollout/kv_util_mean",
                            "rollout/kv_util_peak",
                            "rollouter/idle_ratio",
                            "repack/rounds",
                            "repack/requests_moved",
                            "relay/publish_stall_s",
                            "relay/pull_wait_s",
                            "rollout/weight_build_s",
                            "rollout/spec_enabled_frac",
                            "relay/bytes",
                            "timing_s/reward",
                            "timing_s/old_log_prob",
                            "timing_s/update_actor",
                            "critic/rewards/mean",
                            "rollout_corr/kl",
                            "rollout_corr/ppl_ratio",
                            "rollout_corr/abs_logprob_diff_mean",
                            "reward/error_count",
                            "reward/timeout_count",
                            "perf/total_num_tokens",
                            "response_length/clip_ratio",
                            "rollout/non_finite_finishes",
                            "actor/entropy",
                            "actor/ppo_kl",
                            "actor/pg_clipfrac",
                            "actor/lr"}) {
      EXPECT_TRUE(m.contains(key)) << key << " missing at step " << i + 1;
    }
    EXPECT_LE(m["staleness/max"].get<double>(), static_cast<double>(max_staleness));
  }
  std::set<std::pair<std::string, int>> seen;
  std::map<std::string, std::set<int>> groups;
  for (const auto& t : ReadJsonl(dir / "trajectories.jsonl")) {
    EXPECT_LE(t["version"].get<int64_t>(), t["actor_version"].get<int64_t>());
    EXPECT_LE(t["actor_version"].get<int64_t>() - t["version"].get<int64_t>(), max_staleness);
    auto key = std::make_pair(t["prompt_id"].get<std::string>(), t["sample_index"].get<int>());
    EXPECT_TRUE(seen.insert(key).second) << key.first << "/" << key.second << " trained twice";
    groups[key.first].insert(key.second);
  }
  EXPECT_EQ(static_cast<int64_t>(groups.size()), steps * 2);  // B = 2 groups per step
  for (const auto& m : metrics) EXPECT_TRUE(m.contains("rollout/version_spread_max"));
  for (const auto& [prompt, samples] : groups) {
    EXPECT_EQ(samples, (std::set<int>{0, 1})) << prompt << " trained without all its samples";
  }
}

TEST_P(RlLoopTest, TrainsAFewStepsWithVersionsAndStalenessInBounds) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  const std::string mode = GetParam();
  RlRun run;
  run.dir = TempDir("rl_loop_" + mode);
  WriteRecipe(run.dir, model, tok, "mode: " + mode + "\n");
  // Longer responses and at least 6 steps, so that generation spans several versions.
  const bool async = mode == "async";
  run.overrides = {async ? "actor.max_steps=0" : "actor.max_steps=6", "rollout.max_tokens=48"};
  // Two modes also run the rollouts with speculative decoding: the suffix drafter, and a draft
  // model drafting ahead on its own thread: the policy itself (draft_model: policy), which each
  // rollout rebuilds from every version it pulls. In f32 it is the policy, so every version's
  // drafts are accepted (a draft that stayed at an old version would be accepted less and less
  // as the policy trains).
  const bool speculative = mode != "async";
  const bool policy_draft = mode == "sync";
  if (speculative) {
    if (mode == "one_step_off") {
      run.overrides.push_back("rollout.speculative.drafter=suffix");
    } else {
      run.overrides.push_back("rollout.speculative.drafter=draft_model");
      run.overrides.push_back("rollout.speculative.draft_model=policy");
      run.overrides.push_back("rollout.speculative.draft_weight_dtype=f32");
      run.overrides.push_back("rollout.speculative.async_draft=true");
    }
    run.overrides.push_back("rollout.speculative.adaptive=false");  // always draft: a fixed path
  }
  run.Start(2);
  if (async) {
    // Trajectory-level asynchrony: at some moment the two rollouts hold different versions.
    const size_t apart =
        WaitForMetric(run.dir / "metrics.jsonl", "rollout/version_spread_max", 1, 90000);
    ASSERT_GT(apart, 0u) << "the rollouts never held different versions; see " << run.dir;
    ASSERT_TRUE(WaitForLines(run.dir / "metrics.jsonl", std::max<size_t>(apart + 1, 6), 60000));
    run.actor.Signal(SIGTERM);
  }
  ASSERT_EQ(run.WaitActor(90000), 0) << "see " << run.dir;
  const int64_t bound = mode == "sync" ? 0 : mode == "one_step_off" ? 1 : 1000;
  const auto metrics = ReadJsonl(run.dir / "metrics.jsonl");
  CheckRun(run.dir, async ? static_cast<int64_t>(metrics.size()) : 6, bound);
  double stale = 0, spec_frac = 0, spec_accept = 0;
  for (const auto& m : metrics) {
    stale = std::max(stale, m["staleness/max"].get<double>());
    spec_frac = std::max(spec_frac, m["rollout/spec_enabled_frac"].get<double>());
    // Absent in a step that drafted nothing.
    EXPECT_EQ(m.contains("rollout/spec_accept_rate"),
              m["rollout/spec_enabled_frac"].get<double>() > 0);
    spec_accept = std::max(spec_accept, m.value("rollout/spec_accept_rate", 0.0));
    if (policy_draft && m.contains("rollout/spec_accept_rate")) {
      // p = q up to rounding: min(1, p/q) rejects nothing, at every version.
      EXPECT_GT(m["rollout/spec_accept_rate"].get<double>(), 0.99)
          << "version " << m["training/version"] << "; see " << run.dir;
    }
  }
  if (speculative) {
    EXPECT_GT(spec_frac, 0) << "no decode verified a draft; see " << run.dir;
    EXPECT_GT(spec_accept, 0) << "no draft accepted; see " << run.dir;
  } else {
    EXPECT_EQ(spec_frac, 0);
  }
  if (mode == "sync") {
    EXPECT_EQ(stale, 0);  // on-policy: every rollout waits for each version
  } else {
    EXPECT_GE(stale, 1);  // generation overlaps training
  }
}

// Waits until `path` has at least `lines` lines; false after `timeout_ms`.
bool WaitForLines(const fs::path& path, size_t lines, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(path) && ReadJsonl(path).size() >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Waits until the manager at `endpoint` has a group in flight on `rollout`.
bool WaitUntilHolding(const std::string& endpoint, const std::string& rollout, int timeout_ms) {
  ZmqRequestClient client(endpoint);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    proto::ManagerRequest q;
    q.mutable_snapshot();
    auto bytes = client.Call(proto::Encode(q), 1000);
    if (bytes.ok()) {
      auto reply = proto::Decode<proto::ManagerReply>(*bytes, "manager");
      if (reply.ok()) {
        auto snapshot = nlohmann::json::parse(reply->snapshot_json(), nullptr, false);
        if (snapshot.is_object() && snapshot.contains("in_flight")) {
          for (const auto& g : snapshot["in_flight"]) {
            if (g.value("rollout", "") == rollout) return true;
          }
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// Waits until a line of the metrics file `path` has `key` >= `at_least`; returns the number of
// lines up to it, or 0 after `timeout_ms`.
size_t WaitForMetric(const fs::path& path, const std::string& key, double at_least,
                     int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(path)) {
      const auto lines = ReadJsonl(path);
      for (size_t i = 0; i < lines.size(); ++i) {
        if (lines[i].contains(key) && lines[i][key].get<double>() >= at_least) return i + 1;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

TEST(RlLoopFaultTest, AKilledRolloutsWorkIsReissuedAndTrainingGoesOn) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  RlRun run;
  run.dir = TempDir("rl_rollout_killed");
  WriteRecipe(run.dir, model, tok, "mode: async\n");
  // Long responses keep rollout/0 holding its groups most of the time, so the kill below rarely
  // lands in the gap between returning one batch and taking the next (nothing to re-issue then).
  run.overrides = {"actor.max_steps=0", "rollout.max_tokens=256",
                   "rollout.heartbeat_timeout_s=0.4"};
  run.Start(2);
  ASSERT_TRUE(WaitForLines(run.dir / "metrics.jsonl", 2, 60000)) << "see " << run.dir;
  // Frozen first (SIGSTOP), so that it cannot hand its groups back between the check and the
  // kill; the check waits for messages it sent before it froze to land. Thawed and tried again
  // when it held nothing.
  bool held = false;
  for (int attempt = 0; attempt < 20 && !held; ++attempt) {
    ASSERT_TRUE(WaitUntilHolding(run.manager_endpoint, "rollout/0", 30000)) << "see " << run.dir;
    run.rollouts[0].Signal(SIGSTOP);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    held = WaitUntilHolding(run.manager_endpoint, "rollout/0", 1);
    if (!held) run.rollouts[0].Signal(SIGCONT);
  }
  ASSERT_TRUE(held) << "see " << run.dir;
  run.rollouts[0].Signal(SIGKILL);
  // The manager notices the silence and re-issues the dead rollout's groups; training goes on.
  const size_t after_expiry =
      WaitForMetric(run.dir / "metrics.jsonl", "manager/rollouts_dead", 1, 60000);
  ASSERT_GT(after_expiry, 0u) << "see " << run.dir;
  ASSERT_TRUE(WaitForLines(run.dir / "metrics.jsonl", after_expiry + 3, 60000))
      << "see " << run.dir;
  run.actor.Signal(SIGTERM);
  ASSERT_EQ(run.WaitActor(30000), 0) << "see " << run.dir;
  const auto metrics = ReadJsonl(run.dir / "metrics.jsonl");
  CheckRun(run.dir, static_cast<int64_t>(metrics.size()), 1000);
  const auto& last = metrics.back();
  EXPECT_EQ(last["manager/rollouts_dead"].get<double>(), 1) << "see " << run.dir;
  EXPECT_GE(last["manager/reissued"].get<double>(), 1) << "see " << run.dir;
}

// Long: one run of the whole loop (actor, manager and two rollout processes) is costly to start,
// so this test sets up a long-tail workload, waits for a completed move and checks it end to end
// in one body; the waiting loop keeps its bookkeeping (the last move checked) next to it.
TEST(RlLoopFaultTest, RepackMovesALongTailAndFreesItsSource) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  RlRun run;
  run.dir = TempDir("rl_repack");
  WriteRecipe(run.dir, model, tok, "mode: async\n");
  // Every other prompt may answer with 400 tokens, the others with 24: each rollout holds a long
  // and a short group, and once a version is out the short ones finish and leave long tails.
  {
    std::ofstream data(run.dir / "prompts.jsonl");
    for (int i = 0; i < 24; ++i) {
      data << nlohmann::json{{"prompt", i % 4 < 2 ? "Once upon a time" : "The dog"},
                             {"ground_truth", "cat"},
                             {"data_source", "stories"},
                             {"max_tokens", i % 2 == 0 ? 400 : 24}}
                  .dump()
           << "\n";
    }
  }
  // A step trains 4 groups, what both rollouts hold together: versions come no faster than both
  // rollouts turn over, so the two often run the same version (repack moves only within a
  // version). With 2 groups per step, once decoding got 4x faster the rollouts were almost never
  // on the same version while one had a long tail, and no move happened in 90 s.
  run.overrides = {"actor.max_steps=0",     "actor.groups_per_step=4",
                   "rollout.n=4",           "rollout.max_groups=2",
                   "rollout.kv_cache_mb=8", "data.max_tokens_key=max_tokens",
                   "data.shuffle=false",    "repack.interval_s=0.05"};
  run.Start(2);
  // Runs until a repack move completed, its group was trained, and the freed source generated
  // under a newer version.
  const size_t moved = WaitForMetric(run.dir / "metrics.jsonl", "repack/requests_moved", 1, 90000);
  ASSERT_GT(moved, 0u) << "see " << run.dir;
  const std::regex move_line(R"(repack: moved (\S+) from (\S+) to (\S+) \(version (\d+)\))");
  // A move whose group finished, its moved samples on the destination under the version they
  // started with, and whose source was freed: it generated later samples under a newer version.
  // Samples that ended (a stop token) before the move are the source's; a destination that
  // changed version before the import gives the group back, and it runs again elsewhere: such
  // moves are not the one this test looks for, so every logged move is considered.
  struct Move {
    std::string prompt_id, source, destination;
    int64_t version = 0;
  };
  std::optional<Move> done;
  std::string last_checked;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  while (!done && std::chrono::steady_clock::now() < deadline) {
    const std::string log = Slurp(run.dir / "manager.log");
    const auto trajectories = ReadJsonl(run.dir / "trajectories.jsonl");
    for (auto it = std::sregex_iterator(log.begin(), log.end(), move_line);
         it != std::sregex_iterator() && !done; ++it) {
      const Move m{(*it)[1], (*it)[2], (*it)[3], std::stoll((*it)[4])};
      int64_t finished = 0, there = 0, there_same_version = 0, source_newest = -1;
      for (const auto& t : trajectories) {
        if (t["prompt_id"] == m.prompt_id) {
          ++finished;
          there += t["rollout_id"] == m.destination;
          there_same_version += t["rollout_id"] == m.destination && t["version"] == m.version;
        }
        if (t["rollout_id"] == m.source) {
          source_newest = std::max(source_newest, t["version"].get<int64_t>());
        }
      }
      last_checked = m.prompt_id + " moved to " + m.destination + ": " + std::to_string(finished) +
                     " finished, " + std::to_string(there) + " there (" +
                     std::to_string(there_same_version) + " at version " +
                     std::to_string(m.version) + "), source newest version " +
                     std::to_string(source_newest);
      if (finished == 4 && there >= 1 && there == there_same_version && source_newest > m.version) {
        done = m;
      }
    }
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  run.actor.Signal(SIGTERM);
  ASSERT_EQ(run.WaitActor(30000), 0) << "see " << run.dir;
  EXPECT_TRUE(done.has_value()) << "no move finished on its destination and freed its source; "
                                << "last checked: " << last_checked << "; see " << run.dir;
  std::set<std::pair<std::string, int>> seen;
  for (const auto& t : ReadJsonl(run.dir / "trajectories.jsonl")) {
    EXPECT_TRUE(
        seen.insert({t["prompt_id"].get<std::string>(), t["sample_index"].get<int>()}).second);
  }
  const auto metrics = ReadJsonl(run.dir / "metrics.jsonl");
  EXPECT_GE(metrics.back()["repack/sources_freed"].get<double>(), 1) << "see " << run.dir;
  EXPECT_GE(metrics.back()["repack/requests_moved"].get<double>(), 1) << "see " << run.dir;
}

// The prompt ids trained at each step (the last run's, when a step was trained twice).
std::map<int64_t, std::set<std::string>> PromptsByStep(const fs::path& dir) {
  std::map<int64_t, std::set<std::string>> last;
  std::map<int64_t, std::set<std::string>> current;
  int64_t previous = 0;
  for (const auto& t : ReadJsonl(dir / "trajectories.jsonl")) {
    const int64_t step = t["step"].get<int64_t>();
    if (step != previous) current[step].clear();  // a resumed actor trains the step again
    current[step].insert(t["prompt_id"].get<std::string>());
    previous = step;
  }
  return current;
}

TEST(RlLoopFaultTest, AKilledActorResumesWithTheUninterruptedDataOrder) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  // sync mode: batch b is groups [bB, (b+1)B) of the data order, whatever the timing.
  RlRun straight;
  straight.dir = TempDir("rl_straight");
  WriteRecipe(straight.dir, model, tok, "mode: sync\n");
  straight.overrides = {"actor.max_steps=4"};
  straight.Start(2);
  ASSERT_EQ(straight.WaitActor(90000), 0) << "see " << straight.dir;
  const auto want = PromptsByStep(straight.dir);
  ASSERT_EQ(want.size(), 4u);

  const fs::path dir = TempDir("rl_resumed");
  WriteRecipe(dir, model, tok, "mode: sync\n");
  const std::vector<std::string> overrides = {"actor.max_steps=4", "actor.save_every=2",
                                              "actor.checkpoint_dir=" + (dir / "ckpt").string()};
  {
    RlRun first;
    first.dir = dir;
    first.overrides = overrides;
    first.Start(2);
    ASSERT_TRUE(WaitForLines(dir / "metrics.jsonl", 3, 60000)) << "see " << dir;
    first.actor.Signal(SIGKILL);
    ASSERT_TRUE(fs::exists(dir / "ckpt" / "latest")) << "see " << dir;
  }  // the rest of the run stops with it; the launcher starts it again
  const double resumed_at = FaultClockNow();
  RlRun second;
  second.dir = dir;
  second.overrides = overrides;
  second.Start(2, /*resume=*/true);
  ASSERT_EQ(second.WaitActor(90000), 0) << "see " << dir;
  const auto metrics = ReadJsonl(dir / "metrics.jsonl");
  EXPECT_EQ(metrics.back()["training/version"].get<double>(), 4);
  EXPECT_EQ(PromptsByStep(dir), want) << "see " << dir;
  // perf/ettr spans both invocations: the resumed actor took the run's start from the checkpoint
  // and writes it on into its own final one.
  auto state = ReadFileToString((dir / "ckpt" / "step_4" / "trainer_state.json").string());
  ASSERT_TRUE(state.ok()) << state.status();
  const auto ettr = nlohmann::json::parse(*state)["user"]["ettr"];
  ASSERT_TRUE(ettr.is_object()) << *state;
  EXPECT_LT(ettr["run_start_unix_s"].get<double>(), resumed_at);
  EXPECT_GT(ettr["kept_s"].get<double>(), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, RlLoopTest, ::testing::Values("sync", "one_step_off", "async"));

}  // namespace
}  // namespace laminar::testing
