// The RL loop's roles as threads of one process (DESIGN.md §2: every role can run as a thread
// for tests): a master relay, the manager server, two rollout workers and the actor, on the
// stories260K policy, in async mode with repack on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "actor/actor.h"
#include "model/checkpoint.h"
#include "model/tokenizer_loader.h"
#include "relay/relay.h"
#include "reward/reward.h"
#include "rollout/manager/manager_server.h"
#include "rollout/worker.h"
#include "tests/test_util.h"

namespace laminar::testing {
namespace {

TEST(RlThreadsTest, AllRolesAsThreadsTrainAndEveryGroupIsTrainedOnce) {
  LAMINAR_SHARED_OR_SKIP(model_path, "models/stories260K/stories260K.bin");
  LAMINAR_SHARED_OR_SKIP(tok_path, "models/stories260K/tok512.bin");
  auto ckpt = model::LoadCheckpoint(model_path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  auto tok = model::LoadTokenizer(tok_path);
  ASSERT_TRUE(tok.ok()) << tok.status();

  relay::RelayOptions ro;
  ro.id = "master";
  ro.shm_prefix = "lt" + std::to_string(getpid()) + "threads";
  auto relay = relay::Relay::Start(std::move(ro));
  ASSERT_TRUE(relay.ok()) << relay.status();
  const std::string relay_endpoint = (*relay)->info().control_endpoint();

  std::vector<manager::PromptRow> rows;
  for (int i = 0; i < 12; ++i) {
    auto ids = (*tok)->Encode(i % 2 ? "The dog" : "Once upon a time", {.add_special = true});
    ASSERT_TRUE(ids.ok()) << ids.status();
    rows.push_back({.id = std::to_string(i),
                    .prompt_ids = *ids,
                    .ground_truth = "cat",
                    .data_source = "stories",
                    .extra_info_json = "",
                    .source = "row " + std::to_string(i)});
  }
  auto dataset = manager::MakePromptDataset("threads", std::move(rows));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  manager::ManagerConfig mc;
  mc.num_samples = 2;
  mc.sampling.set_temperature(1.0f);
  mc.sampling.set_top_p(1.0f);
  mc.sampling.set_max_tokens(16);
  mc.sampling.set_seed(5);
  manager::ManagerServerOptions so;
  so.groups_per_step = 2;
  so.repack_interval_s = 0.05;
  auto server = manager::ManagerServer::Start(
      std::make_shared<const manager::PromptDataset>(std::move(*dataset)), mc, so);
  ASSERT_TRUE(server.ok()) << server.status();

  std::atomic<bool> stop{false}, stop_rollouts{false};
  std::vector<std::thread> rollouts;
  // Every fifth score fails and every fifth (another) runs past its deadline: the samples count
  // as 0 and the run goes on.
  auto contains = reward::BuiltinReward("contains");
  ASSERT_TRUE(contains.ok());
  auto calls = std::make_shared<std::atomic<int>>(0);
  reward::RewardFn flaky = [calls, contains = *contains](
                               const reward::RewardInput& in) -> StatusOr<reward::RewardResult> {
    const int call = (*calls)++;
    if (call % 5 == 1) return InvalidArgumentError("flaky reward: refused");
    if (call % 5 == 3) return DeadlineExceededError("flaky reward: too slow");
    return contains(in);
  };
  std::vector<Status> rollout_status(2);
  for (int i = 0; i < 2; ++i) {
    rollout::RolloutWorkerOptions wo;
    wo.id = "rollout/" + std::to_string(i);
    wo.manager = (*server)->endpoint();
    wo.relays = {relay_endpoint};
    wo.engine.num_blocks = 64;
    wo.max_groups = 2;
    wo.heartbeat_interval_ms = 50;
    auto w = rollout::RolloutWorker::Create(ckpt->config, tok->get(), flaky, std::move(wo));
    ASSERT_TRUE(w.ok()) << w.status();
    rollouts.emplace_back([worker = std::shared_ptr<rollout::RolloutWorker>(std::move(*w)),
                           &stop_rollouts, &rollout_status,
                           i] { rollout_status[i] = worker->Run(stop_rollouts); });
  }
  actor::ActorOptions ao;
  ao.manager = (*server)->endpoint();
  ao.master_relay = relay_endpoint;
  ao.groups_per_step = 2;
  ao.max_steps = 3;
  ao.trainer.optimizer.lr = 1e-3;
  auto act = actor::Actor::Create(ckpt->config, ckpt->weights, std::move(ao), /*resume=*/false);
  ASSERT_TRUE(act.ok()) << act.status();
  std::vector<actor::StepMetrics> steps;
  Status st = (*act)->Run(stop, [&](const actor::StepMetrics& m) { steps.push_back(m); });
  // The failures reach the manager with the rollouts' heartbeats.
  for (int i = 0; i < 200; ++i) {
    const auto m = (*server)->Metrics();
    if (m.contains("reward/error_count") && m.at("reward/error_count") >= 1 &&
        m.contains("reward/timeout_count") && m.at("reward/timeout_count") >= 1) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  stop_rollouts.store(true);
  for (auto& t : rollouts) t.join();
  ASSERT_TRUE(st.ok()) << st;
  for (const Status& s : rollout_status) EXPECT_TRUE(s.ok()) << s;
  ASSERT_EQ(steps.size(), 3u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].at("training/version"), static_cast<double>(i + 1));
    EXPECT_GE(steps[i].at("staleness/mean"), 0.0);
  }
  EXPECT_EQ((*act)->policy_version(), 3);
  const auto m = (*server)->Metrics();
  EXPECT_EQ(m.at("manager/taken"), 6);  // 3 steps x 2 groups, each taken once
  EXPECT_GE(m.at("reward/error_count"), 1);
  EXPECT_GE(m.at("reward/timeout_count"), 1);
  EXPECT_EQ(steps.back().count("reward/error_count"), 1u);
  (*server)->Stop();
  (*relay)->Stop();
}

}  // namespace
}  // namespace laminar::testing
