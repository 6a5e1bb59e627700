// The RL loop's roles as threads of one process (docs/architecture.md: every role can run as a
// thread for tests): a master relay, the manager server, two rollout workers (one drafting with a
// draft model the actor publishes) and the actor, on the synthetic tiny-llama policy, in async mode
// with repack on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "actor/actor.h"
#include "core/fault_log.h"
#include "core/zmq_transport.h"
#include "model/checkpoint.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "proto/codec.h"
#include "relay/policy_weights.h"
#include "relay/publisher.h"
#include "relay/relay.h"
#include "reward/reward.h"
#include "rollout/manager/manager_server.h"
#include "rollout/worker/worker.h"
#include "tests/test_util.h"
#include "trainer/parameters.h"

namespace laminar::testing {
namespace {

// What a run of every role as threads left behind.
struct ThreadsRun {
  Status actor_status;
  std::vector<Status> rollout_status;
  std::vector<actor::StepMetrics> steps;
  std::map<std::string, double> manager_metrics;  // after `settled` held or 5 s passed
};

// A master relay, the manager, 2 rollouts scoring with `reward` and the actor for 3 steps of 2
// groups of 2 samples; rollouts silent for `heartbeat_timeout_s` are dead. After the actor, waits
// (up to 5 s) for `settled` to hold on the manager's metrics.
// Kept whole: starts every role in order and wires each to the next; the order is the point.
ThreadsRun RunAllRolesAsThreads(
    const model::Checkpoint& ckpt, const model::Tokenizer& tok, reward::RewardFn reward,
    double heartbeat_timeout_s,
    const std::function<bool(const std::map<std::string, double>&)>& settled) {
  ThreadsRun out;
  relay::RelayOptions ro;
  ro.id = "master";
  ro.shm_prefix = "lt" + std::to_string(getpid()) + "threads";
  auto relay = relay::Relay::Start(std::move(ro));
  EXPECT_TRUE(relay.ok()) << relay.status();
  if (!relay.ok()) return out;
  const std::string relay_endpoint = (*relay)->info().control_endpoint();

  std::vector<manager::PromptRow> rows;
  for (int i = 0; i < 12; ++i) {
    auto ids = tok.Encode(i % 2 ? "The dog" : "Once upon a time", {.add_special = true});
    EXPECT_TRUE(ids.ok()) << ids.status();
    rows.push_back({.id = std::to_string(i),
                    .prompt_ids = *ids,
                    .ground_truth = "cat",
                    .data_source = "stories",
                    .extra_info_json = "",
                    .source = "row " + std::to_string(i)});
  }
  auto dataset = manager::MakePromptDataset("threads", std::move(rows));
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  manager::ManagerConfig mc;
  mc.num_samples = 2;
  mc.sampling.set_temperature(1.0f);
  mc.sampling.set_top_p(1.0f);
  mc.sampling.set_max_tokens(16);
  mc.sampling.set_seed(5);
  manager::ManagerServerOptions so;
  so.groups_per_step = 2;
  so.repack_interval_s = 0.05;
  so.heartbeat_timeout_s = heartbeat_timeout_s;
  auto server = manager::ManagerServer::Start(
      std::make_shared<const manager::PromptDataset>(std::move(*dataset)), mc, so);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return out;

  std::atomic<bool> stop{false}, stop_rollouts{false};
  std::vector<std::thread> rollouts;
  out.rollout_status.resize(2);
  for (int i = 0; i < 2; ++i) {
    rollout::RolloutWorkerOptions wo;
    wo.id = "rollout/" + std::to_string(i);
    wo.manager = (*server)->endpoint();
    wo.relays = {relay_endpoint};
    wo.engine.num_blocks = 64;
    wo.max_groups = 2;
    wo.heartbeat_interval_ms = 50;
    if (i == 0) {
      // rollout/0 drafts with a separate draft model (here the policy's checkpoint) whose weights
      // the actor publishes with every version.
      wo.engine.speculative.drafter = rollout::DrafterKind::kDraftModel;
      wo.engine.speculative.adaptive = false;  // always draft
      wo.draft_model_path = "tiny-llama";
      wo.draft_model_config = ckpt.config;
    }
    auto w = rollout::RolloutWorker::Create(ckpt.config, &tok, reward, std::move(wo));
    EXPECT_TRUE(w.ok()) << w.status();
    if (!w.ok()) return out;
    rollouts.emplace_back([worker = std::shared_ptr<rollout::RolloutWorker>(std::move(*w)),
                           &stop_rollouts, &out,
                           i] { out.rollout_status[i] = worker->Run(stop_rollouts); });
  }
  actor::ActorOptions ao;
  ao.manager = (*server)->endpoint();
  ao.master_relay = relay_endpoint;
  ao.groups_per_step = 2;
  ao.max_steps = 3;
  ao.trainer.optimizer.lr = 1e-3;
  auto draft = trainer::ParameterSet::FromWeights(ckpt.config, ckpt.weights);
  EXPECT_TRUE(draft.ok()) << draft.status();
  if (!draft.ok()) return out;
  ao.draft_model_weights = std::make_shared<const model::WeightStore>(draft->ToWeightStore());
  auto act = actor::Actor::Create(ckpt.config, ckpt.weights, std::move(ao), /*resume=*/false);
  EXPECT_TRUE(act.ok()) << act.status();
  if (act.ok()) {
    out.actor_status =
        (*act)->Run(stop, [&](const actor::StepMetrics& m) { out.steps.push_back(m); });
  }
  for (int i = 0; i < 200 && !settled((*server)->Metrics()); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  // The manager's view while every role still runs: the rollouts stop one after another (one may
  // finish scoring a slow reward seconds after the other), and the manager would rightly call the
  // first one stopped dead.
  out.manager_metrics = (*server)->Metrics();
  stop_rollouts.store(true);
  for (auto& t : rollouts) t.join();
  (*server)->Stop();
  (*relay)->Stop();
  return out;
}

// The synthetic tiny-llama policy and its tokenizer (made by the build).
class RlThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string model_path = TinyModel();
    const std::string tok_path = TinyModel();
    auto ckpt = model::LoadCheckpoint(model_path);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ckpt_ = std::make_unique<model::Checkpoint>(std::move(*ckpt));
    auto tok = model::LoadTokenizer(tok_path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }
  std::unique_ptr<model::Checkpoint> ckpt_;
  std::unique_ptr<model::Tokenizer> tok_;
};

// Two-sample groups with these response lengths (and a one-token prompt each).
std::vector<trainer::TrainSample> GroupsOfTwo(const std::vector<int>& lengths) {
  std::vector<trainer::TrainSample> samples;
  for (size_t g = 0; g < lengths.size(); ++g) {
    for (int k = 0; k < 2; ++k) {
      trainer::TrainSample s;
      s.prompt_ids = {1};
      s.response_ids.assign(static_cast<size_t>(lengths[g]), 2);
      s.group_id = static_cast<int64_t>(g);
      samples.push_back(s);
    }
  }
  return samples;
}

// Rank `rank`'s share as its groups, in order.
std::vector<int64_t> GroupsOfShare(const std::vector<trainer::TrainSample>& samples, int rank,
                                   int world, int64_t mini_batch = 0) {
  auto share = actor::ShareOfBatch(samples, rank, world, mini_batch);
  EXPECT_TRUE(share.ok()) << share.status();
  std::vector<int64_t> groups;
  for (const auto& s : share.ok() ? *share : std::vector<trainer::TrainSample>()) {
    if (groups.empty() || groups.back() != s.group_id) groups.push_back(s.group_id);
  }
  return groups;
}

// Data-parallel shares: whole groups, as many per rank, the longest first to the lightest rank,
// each rank's in the batch's order; with mini-batches, each split so.
TEST(ShareOfBatchTest, WholeGroupsAsManyPerRankBalancedByTokens) {
  // Tokens per group 22, 22, 4, 4, 14, 12: the 22s to different ranks, the 14 to rank 0 (a tie
  // goes to the lower rank), the 12 and a 4 to rank 1, the last 4 to rank 0 (rank 1 has three).
  const auto samples = GroupsOfTwo({10, 10, 1, 1, 6, 5});
  EXPECT_EQ(GroupsOfShare(samples, 0, 2), (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(GroupsOfShare(samples, 1, 2), (std::vector<int64_t>{1, 2, 5}));
  // One long group: the count, not the tokens, sends the last short one to its rank.
  const auto long_one = GroupsOfTwo({100, 1, 1, 1});
  EXPECT_EQ(GroupsOfShare(long_one, 0, 2), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(GroupsOfShare(long_one, 1, 2), (std::vector<int64_t>{1, 2}));
  // Mini-batches of 4 samples (two groups): each rank gets one group of each, in order.
  EXPECT_EQ(GroupsOfShare(samples, 0, 2, 4), (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(GroupsOfShare(samples, 1, 2, 4), (std::vector<int64_t>{1, 3, 5}));
  auto uneven = actor::ShareOfBatch(samples, 0, 4);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("6 groups do not split evenly over 4 ranks"),
            std::string::npos)
      << uneven.status();
  auto cut = actor::ShareOfBatch(samples, 0, 2, 3);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("mini-batch of samples 0..2 ends inside a group"),
            std::string::npos)
      << cut.status();
  EXPECT_FALSE(actor::ShareOfBatch(samples, 2, 2).ok());
}

TEST_F(RlThreadsTest, AllRolesAsThreadsTrainAndEveryGroupIsTrainedOnce) {
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
  // The failures reach the manager with their trajectories; rollout/0's drafting with its
  // heartbeats (the run's three steps can be over before one lands in a step's window).
  const ThreadsRun run = RunAllRolesAsThreads(
      *ckpt_, *tok_, flaky, /*heartbeat_timeout_s=*/5, [](const std::map<std::string, double>& m) {
        return m.contains("reward/error_count") && m.at("reward/error_count") >= 1 &&
               m.contains("reward/timeout_count") && m.at("reward/timeout_count") >= 1 &&
               m.contains("rollout/spec_verify_steps") && m.at("rollout/spec_verify_steps") > 0;
      });
  ASSERT_TRUE(run.actor_status.ok()) << run.actor_status;
  for (const Status& s : run.rollout_status) EXPECT_TRUE(s.ok()) << s;
  ASSERT_EQ(run.steps.size(), 3u);
  for (size_t i = 0; i < run.steps.size(); ++i) {
    EXPECT_EQ(run.steps[i].at("training/version"), static_cast<double>(i + 1));
    EXPECT_GE(run.steps[i].at("staleness/mean"), 0.0);
  }
  const auto& m = run.manager_metrics;
  EXPECT_EQ(m.at("manager/taken"), 6);  // 3 steps x 2 groups, each taken once
  EXPECT_GE(m.at("reward/error_count"), 1);
  EXPECT_GE(m.at("reward/timeout_count"), 1);
  EXPECT_EQ(run.steps.back().count("reward/error_count"), 1u);
  // rollout/0 drafted with the draft model the actor published: its tokens were verified.
  EXPECT_GT(m.at("rollout/spec_verify_steps"), 0);
  EXPECT_GT(m.at("rollout/spec_accepted_tokens"), 0);
}

// A reward slower than the manager's heartbeat timeout (summed over the samples a rollout scores
// at once) does not make the rollout look dead: it keeps its heartbeats going while it scores,
// listing the samples it scores, so nothing is re-issued as a dead rollout's or an orphan, and
// training goes on.
TEST_F(RlThreadsTest, ASlowRewardDoesNotMakeARolloutLookDead) {
  auto contains = reward::BuiltinReward("contains");
  ASSERT_TRUE(contains.ok());
  reward::RewardFn slow = [contains = *contains](const reward::RewardInput& in) {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    return contains(in);
  };
  const ThreadsRun run =
      RunAllRolesAsThreads(*ckpt_, *tok_, slow, /*heartbeat_timeout_s=*/2.5,
                           [](const std::map<std::string, double>&) { return true; });
  ASSERT_TRUE(run.actor_status.ok()) << run.actor_status;
  for (const Status& s : run.rollout_status) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(run.steps.size(), 3u);
  // Nothing was taken from a rollout for want of heartbeats or listed samples (a repack whose
  // destination moved to a newer version before it imported may still give a group back).
  EXPECT_EQ(run.manager_metrics.at("manager/rollouts_dead"), 0);
  EXPECT_EQ(run.manager_metrics.at("manager/orphans_reissued"), 0);
}

// A rollout whose rollout.max_groups asks for ten times what its KV pool can run holds only what
// the pool can run (back-pressure: it asks the manager for nothing while a sample waits for KV
// blocks, and for no more groups than its free blocks hold), and completes every group it takes.
TEST_F(RlThreadsTest, ARolloutAskedForTenTimesItsCapacityHoldsOnlyWhatItCanRun) {
  relay::RelayOptions ro;
  ro.id = "master";
  ro.shm_prefix = "lt" + std::to_string(getpid()) + "pressure";
  auto relay = relay::Relay::Start(std::move(ro));
  ASSERT_TRUE(relay.ok()) << relay.status();
  relay::PublisherOptions po;
  po.master_endpoint = (*relay)->info().control_endpoint();
  auto publisher = relay::Publisher::Create(std::move(po));
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  auto tensors = relay::TensorsOf(ckpt_->weights);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_TRUE((*publisher)->Publish(0, *tensors).ok());

  std::vector<manager::PromptRow> rows;
  for (int i = 0; i < 40; ++i) {
    rows.push_back({.id = std::to_string(i),
                    .prompt_ids = {1, 10 + i, 20, 30},
                    .ground_truth = "cat",
                    .data_source = "pressure",
                    .extra_info_json = "",
                    .source = "row " + std::to_string(i)});
  }
  auto dataset = manager::MakePromptDataset("pressure", std::move(rows));
  ASSERT_TRUE(dataset.ok()) << dataset.status();
  manager::ManagerConfig mc;
  mc.num_samples = 2;
  mc.sampling.set_temperature(1.0f);
  mc.sampling.set_max_tokens(24);
  mc.sampling.set_seed(3);
  manager::ManagerServerOptions so;
  so.repack.enabled = false;
  auto server = manager::ManagerServer::Start(
      std::make_shared<const manager::PromptDataset>(std::move(*dataset)), mc, so);
  ASSERT_TRUE(server.ok()) << server.status();

  // A sample needs up to 2 blocks of 16 tokens (4 prompt + 24 generated): 8 blocks run 2 groups
  // of 2 at their longest.
  constexpr int32_t kGroupsThatFit = 2;
  rollout::RolloutWorkerOptions wo;
  wo.manager = (*server)->endpoint();
  wo.relays = {(*relay)->info().control_endpoint()};
  wo.engine.block_size = 16;
  wo.engine.num_blocks = 8;
  wo.max_groups = 10 * kGroupsThatFit;
  wo.heartbeat_interval_ms = 50;
  auto contains = reward::BuiltinReward("contains");
  ASSERT_TRUE(contains.ok());
  auto worker = rollout::RolloutWorker::Create(ckpt_->config, tok_.get(), *contains, std::move(wo));
  ASSERT_TRUE(worker.ok()) << worker.status();
  std::atomic<bool> stop{false};
  Status run_status;
  std::thread t([&] { run_status = (*worker)->Run(stop); });
  const bool done =
      WaitFor([&] { return (*server)->Metrics().at("manager/completed") >= 24; }, 60000);
  stop.store(true);
  t.join();
  EXPECT_TRUE(done) << "24 groups were not completed in 60 s";
  EXPECT_TRUE(run_status.ok()) << run_status;
  const rollout::RolloutWorkerStats st = (*worker)->stats();
  std::cout << "max_groups " << 10 * kGroupsThatFit << ": held at most " << st.peak_groups_held
            << " groups, " << st.peak_waiting_samples << " samples waiting for KV blocks\n";
  EXPECT_GE(st.groups_received, 24);
  EXPECT_EQ(st.trajectories_dropped, 0);
  EXPECT_GT(st.peak_waiting_samples, 0) << "the pool never filled: the test does not overload";
  // It asks only while every sample it holds has its blocks, each at least one: never more groups
  // than num_blocks / n, whatever max_groups says.
  EXPECT_LE(st.peak_groups_held, 8 / mc.num_samples);
  EXPECT_LE(st.peak_waiting_samples, 8);
  const auto m = (*server)->Metrics();
  EXPECT_EQ(m.at("manager/reissued"), 0);
  (*server)->Stop();
  (*relay)->Stop();
}

// A hand-driven rollout over the manager's real socket: takes work, answers groups with fixed
// tokens, sends heartbeats listing what it says it runs.
class ScriptedRollout {
 public:
  ScriptedRollout(const std::string& manager, std::string id)
      : client_(manager), id_(std::move(id)) {}

  std::vector<proto::PromptGroup> Work(int64_t version, int32_t max_groups) {
    proto::ManagerRequest work;
    work.mutable_work()->set_rollout_id(id_);
    work.mutable_work()->set_version(version);
    work.mutable_work()->set_max_groups(max_groups);
    auto groups = Call(std::move(work)).work().groups();
    return {groups.begin(), groups.end()};
  }

  // Sends every sample of `g`, generated by `version` (sample i's reward went as `outcomes[i]`,
  // ok past its end); returns how many the manager dropped.
  int32_t Finish(const proto::PromptGroup& g, int64_t version,
                 const std::vector<proto::RewardOutcome>& outcomes = {},
                 proto::FinishReason reason = proto::FINISH_REASON_STOP) {
    proto::ManagerRequest done;
    for (int i = 0; i < g.num_samples(); ++i) {
      proto::Trajectory* t = done.mutable_trajectories()->add_trajectories();
      t->set_prompt_id(g.prompt_id());
      t->set_sample_index(i);
      *t->mutable_prompt_ids() = g.prompt_ids();
      for (int32_t id : {5, 6 + i, 7}) t->add_response_ids(id);
      for (int k = 0; k < 3; ++k) t->add_logprobs(-2.0f);
      t->set_version(version);
      t->set_finish_reason(i == 0 ? reason : proto::FINISH_REASON_STOP);
      t->set_reward(static_cast<float>(i));
      t->set_rollout_id(id_);
      if (static_cast<size_t>(i) < outcomes.size()) t->set_reward_outcome(outcomes[i]);
    }
    return Call(std::move(done)).dropped();
  }

  // A heartbeat saying sample 0 of each of `running` is in flight, from `host`, with
  // `tokens` forwarded so far and `pull_wait_s` spent pulling versions (< 0: no such counter).
  // `busy`: one sent during a long call (no counters then).
  void Heartbeat(int64_t version, const std::vector<std::string>& running, double tokens = -1,
                 const std::string& host = "", double pull_wait_s = -1, bool busy = false,
                 int unanswered = 0, double unanswered_s = 0) {
    proto::ManagerRequest req;
    proto::Heartbeat* h = req.mutable_heartbeat();
    h->set_unanswered(unanswered);
    h->set_unanswered_s(unanswered_s);
    h->set_role("rollout");
    h->set_id(id_);
    h->set_version(version);
    h->set_host(host);
    h->set_busy(busy);
    if (tokens >= 0) (*h->mutable_counters())["rollout/tokens_forwarded"] = tokens;
    if (pull_wait_s >= 0) (*h->mutable_counters())["relay/pull_wait_s"] = pull_wait_s;
    h->set_running(static_cast<int32_t>(running.size()));
    for (const std::string& p : running) h->add_running_samples()->set_prompt_id(p);
    Call(std::move(req));
  }

  // Asks for one group under `version` and finishes it.
  void GenerateOneGroup(int64_t version) {
    auto groups = Work(version, 1);
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(Finish(groups[0], version), 0);
  }

 private:
  proto::ManagerReply Call(proto::ManagerRequest request) {
    request.mutable_header()->set_sender(id_);
    auto bytes = client_.Call(proto::Encode(request), 5000);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    if (!bytes.ok()) return {};
    auto reply = proto::Decode<proto::ManagerReply>(*bytes, "manager");
    EXPECT_TRUE(reply.ok()) << reply.status();
    EXPECT_TRUE(reply.ok() && reply->error().empty()) << reply->error();
    return reply.ok() ? *reply : proto::ManagerReply{};
  }

  ZmqRequestClient client_;
  std::string id_;
};

// A manager over six scripted rows, groups of two samples.
StatusOr<std::unique_ptr<manager::ManagerServer>> StartScriptedManager(
    int32_t groups_per_step, manager::ManagerServerOptions so = {}) {
  std::vector<manager::PromptRow> rows;
  for (int i = 0; i < 6; ++i) {
    rows.push_back({.id = std::to_string(i),
                    .prompt_ids = {1, 10 + i, 20},
                    .ground_truth = "",
                    .data_source = "scripted",
                    .extra_info_json = "",
                    .source = "row " + std::to_string(i)});
  }
  LAMINAR_ASSIGN_OR_RETURN(auto dataset, manager::MakePromptDataset("scripted", std::move(rows)));
  manager::ManagerConfig mc;
  mc.num_samples = 2;
  mc.sampling.set_max_tokens(3);
  mc.shuffle = false;
  so.groups_per_step = groups_per_step;
  so.repack.enabled = false;
  return manager::ManagerServer::Start(
      std::make_shared<const manager::PromptDataset>(std::move(dataset)), mc, so);
}

// A failed reward counts when its trajectory reaches the manager, not with the rollout's next
// heartbeat: the batch that trains the sample carries the count in its step metrics.
TEST(ManagerServerTest, RewardFailuresCountInTheBatchThatTrainsThem) {
  auto server = StartScriptedManager(1);
  ASSERT_TRUE(server.ok()) << server.status();
  ScriptedRollout a((*server)->endpoint(), "rollout/a");
  auto held = a.Work(0, 1);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(a.Finish(held[0], 0, {proto::REWARD_OUTCOME_ERROR, proto::REWARD_OUTCOME_TIMEOUT}), 0);
  ZmqRequestClient actor((*server)->endpoint());
  proto::ManagerRequest take;
  take.mutable_header()->set_sender("actor");
  take.mutable_take_batch()->set_num_groups(1);
  auto bytes = actor.Call(proto::Encode(take), 5000);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto reply = proto::Decode<proto::ManagerReply>(*bytes, "manager");
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->batch().trajectories_size(), 2);
  EXPECT_EQ(reply->metrics().at("reward/error_count"), 1);
  EXPECT_EQ(reply->metrics().at("reward/timeout_count"), 1);
  // A trajectory whose outcome is out of range is refused whole, naming the field.
  auto again = a.Work(0, 1);
  ASSERT_EQ(again.size(), 1u);
  proto::ManagerRequest bad;
  bad.mutable_header()->set_sender("rollout/a");
  proto::Trajectory* t = bad.mutable_trajectories()->add_trajectories();
  t->set_prompt_id(again[0].prompt_id());
  t->set_finish_reason(proto::FINISH_REASON_STOP);
  t->set_reward_outcome(static_cast<proto::RewardOutcome>(7));
  auto refused = actor.Call(proto::Encode(bad), 5000);
  ASSERT_TRUE(refused.ok()) << refused.status();
  auto refused_reply = proto::Decode<proto::ManagerReply>(*refused, "manager");
  ASSERT_TRUE(refused_reply.ok()) << refused_reply.status();
  EXPECT_NE(refused_reply->error().find("reward_outcome 7"), std::string::npos)
      << refused_reply->error();
  EXPECT_EQ((*server)->Metrics().at("reward/error_count"), 1);
}

// A group handed to a live rollout that then stops listing it in its heartbeats (it never got the
// reply, or could not send the trajectories) is re-issued: no prompt is lost while its rollout
// lives on; the first holder's late samples are dropped.
TEST(ManagerServerTest, AGroupALiveRolloutStoppedRunningIsReissued) {
  auto server = StartScriptedManager(1);
  ASSERT_TRUE(server.ok()) << server.status();
  ScriptedRollout a((*server)->endpoint(), "rollout/a"), b((*server)->endpoint(), "rollout/b");
  auto held = a.Work(0, 2);
  ASSERT_EQ(held.size(), 2u);
  const std::string kept = held[0].prompt_id(), lost = held[1].prompt_id();
  a.Heartbeat(0, {kept, lost});
  a.Heartbeat(0, {kept});  // one heartbeat without it: not yet
  EXPECT_EQ((*server)->Metrics().at("manager/orphans_reissued"), 0);
  a.Heartbeat(0, {kept});
  EXPECT_EQ((*server)->Metrics().at("manager/orphans_reissued"), 1);
  auto again = b.Work(0, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].prompt_id(), lost);  // re-issued before new prompts
  EXPECT_EQ(a.Finish(held[1], 0), 2);     // late: dropped
  EXPECT_EQ(b.Finish(again[0], 0), 0);
  EXPECT_EQ(a.Finish(held[0], 0), 0);
  const auto m = (*server)->Metrics();
  EXPECT_EQ(m.at("manager/completed"), 2);
  EXPECT_EQ(m.at("manager/orphans_reissued"), 1);
  (*server)->Stop();
}

// A scripted manager that records faults (rollouts silent for `heartbeat_timeout_s` are dead)
// and rollouts a, b and c holding one group each.
struct ThreeHeldGroups {
  std::filesystem::path faults;
  std::unique_ptr<manager::ManagerServer> server;
  std::unique_ptr<ScriptedRollout> a, b, c;
  proto::PromptGroup group_a, group_b, group_c;
};
StatusOr<ThreeHeldGroups> StartWithThreeHeldGroups(double heartbeat_timeout_s) {
  ThreeHeldGroups t;
  t.faults = TempDir("faults") / "faults.jsonl";
  manager::ManagerServerOptions so;
  so.heartbeat_timeout_s = heartbeat_timeout_s;
  so.faults = FaultLog(t.faults.string());
  LAMINAR_ASSIGN_OR_RETURN(t.server, StartScriptedManager(1, so));
  const std::string endpoint = t.server->endpoint();
  t.a = std::make_unique<ScriptedRollout>(endpoint, "rollout/a");
  t.b = std::make_unique<ScriptedRollout>(endpoint, "rollout/b");
  t.c = std::make_unique<ScriptedRollout>(endpoint, "rollout/c");
  for (auto [rollout, group] : {std::pair{t.a.get(), &t.group_a}, std::pair{t.b.get(), &t.group_b},
                                std::pair{t.c.get(), &t.group_c}}) {
    auto held = rollout->Work(0, 1);
    if (held.size() != 1) return InternalError("a rollout got no group");
    *group = held[0];
  }
  return t;
}

// The records of a faults.jsonl, by kind.
std::map<std::string, std::vector<nlohmann::json>> FaultsByKind(const std::filesystem::path& path) {
  std::map<std::string, std::vector<nlohmann::json>> by_kind;
  for (nlohmann::json& j : ReadFaults(path.string())) {
    EXPECT_EQ(j["seen_by"], "manager") << j.dump();
    by_kind[j["kind"].get<std::string>()].push_back(std::move(j));
  }
  return by_kind;
}

// The rollouts a faults.jsonl names as stragglers, in order.
std::vector<std::string> StragglerRoles(const std::filesystem::path& path) {
  std::vector<std::string> roles;
  auto by_kind = FaultsByKind(path);
  for (const nlohmann::json& f : by_kind["straggler"]) {
    roles.push_back(f["role"].get<std::string>());
  }
  return roles;
}

// The manager demarcates what it sees in faults.jsonl, naming the rollout and the host its
// heartbeats gave: non-finite logits that ended a response, a straggler (decoding at a fraction
// of the others' rate, then recovering) and a hang (no heartbeat within the timeout).
TEST(ManagerServerTest, FaultsNameTheRolloutAndItsHost) {
  auto t = StartWithThreeHeldGroups(2.5);
  ASSERT_TRUE(t.ok()) << t.status();
  ScriptedRollout &a = *t->a, &b = *t->b, &c = *t->c;
  // Each holds a group; rollout/c generates at a tenth of a's and b's rate for two intervals,
  // then catches up.
  double tokens_ab = 0, tokens_c = 0;
  for (int round = 0; round < 5; ++round) {
    a.Heartbeat(0, {t->group_a.prompt_id()}, tokens_ab, "host-a");
    b.Heartbeat(0, {t->group_b.prompt_id()}, tokens_ab, "host-b");
    c.Heartbeat(0, {t->group_c.prompt_id()}, tokens_c, "host-c");
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    tokens_ab += 100;
    tokens_c += round < 2 ? 10 : 100;
  }
  EXPECT_EQ(a.Finish(t->group_a, 0, {}, proto::FINISH_REASON_NON_FINITE_LOGITS), 0);
  // b and c fall silent; a, still beating, finds them dead past the timeout.
  for (int i = 0; i < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1400));
    a.Heartbeat(0, {}, tokens_ab, "host-a");
  }
  t->server->Stop();
  auto by_kind = FaultsByKind(t->faults);
  ASSERT_EQ(by_kind["non_finite"].size(), 1u);
  EXPECT_EQ(by_kind["non_finite"][0]["role"], "rollout/a");
  EXPECT_EQ(by_kind["non_finite"][0]["host"], "host-a");
  EXPECT_NE(by_kind["non_finite"][0]["detail"].get<std::string>().find(t->group_a.prompt_id()),
            std::string::npos);
  ASSERT_EQ(by_kind["straggler"].size(), 1u);
  EXPECT_EQ(by_kind["straggler"][0]["role"], "rollout/c");
  EXPECT_EQ(by_kind["straggler"][0]["host"], "host-c");
  EXPECT_GT(by_kind["straggler"][0]["recovery_s"].get<double>(), 0.3);
  ASSERT_EQ(by_kind["hang"].size(), 2u);
  EXPECT_EQ(by_kind["hang"][0]["role"], "rollout/b");
  EXPECT_EQ(by_kind["hang"][0]["host"], "host-b");
  EXPECT_EQ(by_kind["hang"][1]["role"], "rollout/c");
  EXPECT_EQ(by_kind["hang"][1]["host"], "host-c");
}

// A rollout that forwards nothing while it pulls a new version (its heartbeats' pull time grows
// by the interval) is waiting on the relay, not straggling; one as slow without pulling is.
TEST(ManagerServerTest, PullingAVersionIsNotStraggling) {
  auto t = StartWithThreeHeldGroups(30);
  ASSERT_TRUE(t.ok()) << t.status();
  double tokens = 0, pull_b = 0;
  for (int round = 0; round < 5; ++round) {
    const auto b_at = std::chrono::steady_clock::now();
    t->a->Heartbeat(0, {t->group_a.prompt_id()}, tokens, "host-a", 0);
    t->b->Heartbeat(0, {t->group_b.prompt_id()}, round < 3 ? 0 : tokens, "host-b", pull_b);
    t->c->Heartbeat(0, {t->group_c.prompt_id()}, tokens / 10, "host-c", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    tokens += 100;
    // b pulls for two intervals (the whole of each, however long the calls took), then forwards
    // at a's rate.
    if (round < 2) {
      pull_b +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - b_at).count() + 0.1;
    }
  }
  t->server->Stop();
  EXPECT_EQ(StragglerRoles(t->faults), std::vector<std::string>{"rollout/c"});
}

// The rate is per running sample: a rollout left with its group's last long sample (a long tail)
// forwards fewer tokens than rollouts decoding eight samples each, but faster per sample, and is
// not a straggler; one forwarding as few with eight running is.
TEST(ManagerServerTest, ALongTailIsNotStraggling) {
  auto t = StartWithThreeHeldGroups(30);
  ASSERT_TRUE(t.ok()) << t.status();
  auto eight = [](const proto::PromptGroup& g) {
    return std::vector<std::string>(8, g.prompt_id());
  };
  double tokens = 0, tail = 0;
  for (int round = 0; round < 5; ++round) {
    t->a->Heartbeat(0, eight(t->group_a), tokens, "host-a", 0);
    t->b->Heartbeat(0, {t->group_b.prompt_id()}, tail, "host-b", 0);
    t->c->Heartbeat(0, eight(t->group_c), tail, "host-c", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    tokens += 800;
    tail += 120;
  }
  t->server->Stop();
  EXPECT_EQ(StragglerRoles(t->faults), std::vector<std::string>{"rollout/c"});
}

// With no other rollout busy (they wait for the actor), a rollout is measured against its own
// recent rate: a tenfold drop for two intervals is a straggler, named with that reference.
TEST(ManagerServerTest, AStragglerWithNoBusyPeerIsMeasuredAgainstItsOwnPast) {
  auto t = StartWithThreeHeldGroups(30);
  ASSERT_TRUE(t.ok()) << t.status();
  // b and c hand their groups back: only a holds work.
  EXPECT_EQ(t->b->Finish(t->group_b, 0), 0);
  EXPECT_EQ(t->c->Finish(t->group_c, 0), 0);
  double tokens = 0;
  for (int round = 0; round < 10; ++round) {
    t->a->Heartbeat(0, {t->group_a.prompt_id()}, tokens, "host-a", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    tokens += round < 7 ? 100 : 10;
  }
  // Recorded when detected, before it recovers (a manager killed now would lose nothing).
  auto by_kind = FaultsByKind(t->faults);
  t->server->Stop();
  ASSERT_EQ(by_kind["straggler"].size(), 1u);
  EXPECT_EQ(by_kind["straggler"][0]["role"], "rollout/a");
  EXPECT_TRUE(by_kind["straggler"][0]["recovered_unix_s"].is_null());
  EXPECT_NE(by_kind["straggler"][0]["detail"].get<std::string>().find("its own median"),
            std::string::npos)
      << by_kind["straggler"][0]["detail"];
}

// A rollout inside one long call (an engine step on a slowed machine) that outlasts the heartbeat
// timeout sends busy heartbeats meanwhile: it is neither hung nor a straggler when the call's
// tokens arrive with its next heartbeat at the others' rate, and its group stays with it.
TEST(ManagerServerTest, BusyHeartbeatsKeepARolloutInALongCallAlive) {
  auto t = StartWithThreeHeldGroups(1.5);
  ASSERT_TRUE(t.ok()) << t.status();
  ScriptedRollout &a = *t->a, &b = *t->b, &c = *t->c;
  double tokens = 0;
  for (int round = 0; round < 2; ++round) {
    a.Heartbeat(0, {t->group_a.prompt_id()}, tokens, "host-a", 0);
    b.Heartbeat(0, {t->group_b.prompt_id()}, tokens, "host-b", 0);
    c.Heartbeat(0, {t->group_c.prompt_id()}, tokens, "host-c", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    tokens += 100;
  }
  // c's call lasts twice the timeout: busy heartbeats only; a and b go on as before.
  const double c_tokens = tokens;
  for (int round = 0; round < 5; ++round) {
    a.Heartbeat(0, {t->group_a.prompt_id()}, tokens, "host-a", 0);
    b.Heartbeat(0, {t->group_b.prompt_id()}, tokens, "host-b", 0);
    c.Heartbeat(0, {t->group_c.prompt_id()}, -1, "host-c", -1, /*busy=*/true);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    tokens += 100;
  }
  // The call ends; its tokens came at a's rate.
  for (int round = 0; round < 3; ++round) {
    a.Heartbeat(0, {t->group_a.prompt_id()}, tokens, "host-a", 0);
    b.Heartbeat(0, {t->group_b.prompt_id()}, tokens, "host-b", 0);
    c.Heartbeat(0, {t->group_c.prompt_id()}, round == 0 ? c_tokens + 500 : tokens, "host-c", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    tokens += 100;
  }
  const auto m = t->server->Metrics();
  t->server->Stop();
  auto by_kind = FaultsByKind(t->faults);
  EXPECT_TRUE(by_kind["hang"].empty()) << by_kind["hang"].size() << " hang records";
  EXPECT_TRUE(by_kind["straggler"].empty()) << by_kind["straggler"].size() << " straggler records";
  EXPECT_EQ(m.at("manager/orphans_reissued"), 0);
}

// A rollout declared hung that comes back having sent requests no one answered was alive behind a
// lost link: its hang record is reclassified as lost_link, recovered when it came back. One that
// comes back having sent nothing (stuck), or missed only the attempt in flight when it was
// stopped, stays a hang.
TEST(ManagerServerTest, ALostLinkIsToldFromAHang) {
  auto t = StartWithThreeHeldGroups(1.0);
  ASSERT_TRUE(t.ok()) << t.status();
  ScriptedRollout &a = *t->a, &b = *t->b, &c = *t->c;
  a.Heartbeat(0, {t->group_a.prompt_id()}, -1, "host-a");
  b.Heartbeat(0, {t->group_b.prompt_id()}, -1, "host-b");
  c.Heartbeat(0, {t->group_c.prompt_id()}, -1, "host-c");
  // b and c fall silent; a, still beating, finds them dead past the timeout.
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    a.Heartbeat(0, {t->group_a.prompt_id()}, -1, "host-a");
  }
  b.Heartbeat(0, {}, -1, "host-b", -1, false, /*unanswered=*/6, /*unanswered_s=*/2.4);
  // c was stopped in the middle of a request: the one attempt in flight went unanswered.
  c.Heartbeat(0, {}, -1, "host-c", -1, false, /*unanswered=*/1, /*unanswered_s=*/2.4);
  t->server->Stop();
  auto by_kind = FaultsByKind(t->faults);
  ASSERT_EQ(by_kind["lost_link"].size(), 1u);
  const nlohmann::json& lost = by_kind["lost_link"][0];
  EXPECT_EQ(lost["role"], "rollout/b");
  EXPECT_EQ(lost["host"], "host-b");
  EXPECT_EQ(lost["supersedes"], "hang");
  EXPECT_GT(lost["recovery_s"].get<double>(), 0);
  EXPECT_NE(lost["detail"].get<std::string>().find("6 sends of its requests over 2.4 s"),
            std::string::npos)
      << lost;
  ASSERT_EQ(by_kind["hang"].size(), 1u);  // b's hang record was replaced; c's stays
  EXPECT_EQ(by_kind["hang"][0]["role"], "rollout/c");
}

// actor.max_staleness: a group generated a version back, taken when the limit is 0, is dropped
// (drop_stale) or trained and counted (keep); either way staleness/stale_groups reports it.
class MaxStalenessTest : public ::testing::TestWithParam<bool> {};

TEST_P(MaxStalenessTest, OldGroupsAreDroppedOrKeptAndCounted) {
  const bool drop = GetParam();
  const std::string model_path = TinyModel();
  auto ckpt = model::LoadCheckpoint(model_path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  relay::RelayOptions ro;
  ro.id = "master";
  ro.shm_prefix = "lt" + std::to_string(getpid()) + "stale" + (drop ? "d" : "k");
  auto relay = relay::Relay::Start(std::move(ro));
  ASSERT_TRUE(relay.ok()) << relay.status();
  auto server = StartScriptedManager(1);
  ASSERT_TRUE(server.ok()) << server.status();

  // Groups 0 and 1 come from version 0 before the actor starts; group 0 trains step 1 fresh.
  ScriptedRollout rollout((*server)->endpoint(), "rollout/scripted");
  rollout.GenerateOneGroup(0);
  rollout.GenerateOneGroup(0);
  actor::ActorOptions ao;
  ao.manager = (*server)->endpoint();
  ao.master_relay = (*relay)->info().control_endpoint();
  ao.groups_per_step = 1;
  ao.max_steps = 3;
  ao.max_staleness = 0;
  ao.drop_stale = drop;
  auto act = actor::Actor::Create(ckpt->config, ckpt->weights, std::move(ao), /*resume=*/false);
  ASSERT_TRUE(act.ok()) << act.status();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> version{0};
  std::vector<actor::StepMetrics> steps;
  std::thread actor_thread([&] {
    Status st = (*act)->Run(stop, [&](const actor::StepMetrics& m) {
      steps.push_back(m);
      version = static_cast<int64_t>(m.at("training/version"));
    });
    EXPECT_TRUE(st.ok()) << st;
  });
  // After each step, one fresh group from the newest version.
  for (int64_t v = 1; v <= 3; ++v) {
    for (int i = 0; i < 1000 && version.load() < v; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (version.load() < v) {
      stop = true;
      ADD_FAILURE() << "the actor did not train step " << v;
      break;
    }
    if (v < 3) rollout.GenerateOneGroup(v);
  }
  actor_thread.join();
  ASSERT_EQ(steps.size(), 3u);
  // Step 2 takes the old group first (version 0 at actor version 1: staleness 1 > 0).
  EXPECT_EQ(steps[0].at("staleness/stale_groups"), 0);
  EXPECT_EQ(steps[1].at("staleness/stale_groups"), 1);
  EXPECT_EQ(steps[1].at("staleness/max"), drop ? 0 : 1);
  // Dropped, the old group leaves room for the fresh one in step 2; kept, it fills step 2 and the
  // fresh group of version 1 trains in step 3 (staleness 1 again, counted).
  EXPECT_EQ(steps[2].at("staleness/stale_groups"), drop ? 0 : 1);
  EXPECT_EQ((*server)->Metrics().at("manager/taken"), drop ? 4 : 3);
  (*server)->Stop();
  (*relay)->Stop();
}

INSTANTIATE_TEST_SUITE_P(DropOrKeep, MaxStalenessTest, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Drop" : "Keep"; });

}  // namespace
}  // namespace laminar::testing
