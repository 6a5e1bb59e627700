// ManagerState: hand cases for the prompt pool, exactly-once acceptance, rollout death and
// re-issue, repack moves, partial responses, FIFO batches and the outstanding bound; snapshots
// (the same consumed sequence as an uninterrupted run, bad snapshots named by field); and a
// randomized interleaving of fake rollouts (deaths, zombies, duplicates, moves, version bumps,
// restores) checked against a model of what was consumed. Time is a number passed in.
// Kept in one file over ~600 lines: the hand cases and the randomized interleaving share one
// harness of fake rollouts and one model of what was consumed.
#include "rollout/manager/manager_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "proto/codec.h"

namespace laminar::manager {
namespace {

using Consumed = std::pair<std::string, int32_t>;  // (prompt id, sample index)

std::shared_ptr<const PromptDataset> Dataset(int num_rows) {
  std::vector<PromptRow> rows;
  for (int i = 0; i < num_rows; ++i) {
    rows.push_back({.id = "r" + std::to_string(i),
                    .prompt_ids = {1, 100 + i},
                    .ground_truth = std::to_string(i),
                    .data_source = "toy",
                    .extra_info_json = "",
                    .source = "row " + std::to_string(i)});
  }
  auto ds = MakePromptDataset("toy", std::move(rows));
  EXPECT_TRUE(ds.ok()) << ds.status();
  return std::make_shared<const PromptDataset>(*std::move(ds));
}

ManagerConfig Config(int32_t n, bool shuffle = false) {
  ManagerConfig c;
  c.num_samples = n;
  c.shuffle = shuffle;
  c.sampling.set_temperature(1.0f);
  c.sampling.set_top_p(1.0f);
  c.sampling.set_max_tokens(16);
  c.sampling.add_stop("\n\n");
  c.sampling.set_seed(7);
  return c;
}

std::unique_ptr<ManagerState> State(int num_rows, ManagerConfig config) {
  auto s = ManagerState::Create(Dataset(num_rows), std::move(config));
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

// A finished sample whose tokens encode (group seed, sample index, version), so a consumed
// trajectory shows which hand-out produced it.
proto::Trajectory Traj(const proto::PromptGroup& g, int32_t i, const std::string& rollout,
                       int64_t version) {
  proto::Trajectory t;
  t.set_prompt_id(g.prompt_id());
  t.set_sample_index(i);
  t.add_response_ids(static_cast<int32_t>(g.sampling().seed() % 1000));
  t.add_response_ids(i);
  t.add_response_ids(static_cast<int32_t>(version));
  t.add_logprobs(-0.5f);
  t.add_logprobs(-0.25f);
  t.add_logprobs(-1.0f);
  t.set_version(version);
  t.set_finish_reason(proto::FINISH_REASON_STOP);
  t.set_reward(0.5f * static_cast<float>(i));
  t.set_rollout_id(rollout);
  return t;
}

proto::Heartbeat Beat(const std::string& id, int64_t version) {
  proto::Heartbeat h;
  h.set_role("rollout");
  h.set_id(id);
  h.set_version(version);
  h.set_running(3);
  h.set_waiting(1);
  h.set_kv_blocks_used(40);
  h.set_kv_blocks_capacity(100);
  h.set_kv_blocks_used_previous(50);
  return h;
}

std::vector<proto::PromptGroup> Assign(ManagerState& s, const std::string& rollout, int32_t max,
                                       int64_t version, double now = 0) {
  auto groups = s.Assign(rollout, max, version, now);
  EXPECT_TRUE(groups.ok()) << groups.status();
  return groups.ok() ? *groups : std::vector<proto::PromptGroup>{};
}

void Finish(ManagerState& s, const proto::PromptGroup& g, const std::string& rollout,
            int64_t version, double now = 0) {
  for (int32_t i = 0; i < g.num_samples(); ++i) {
    Status st = s.OnTrajectory(Traj(g, i, rollout, version), now);
    ASSERT_TRUE(st.ok()) << st;
  }
}

int64_t Dropped(const ManagerState& s, DropReason r) {
  return s.stats().dropped[static_cast<int>(r)];
}

TEST(ManagerStateTest, AssignHandsOutGroupsInDataOrderWithDeterministicSeeds) {
  auto s = State(5, Config(4));
  auto groups = Assign(*s, "r1", 3, 0);
  ASSERT_EQ(groups.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const proto::PromptGroup& g = groups[i];
    EXPECT_EQ(g.prompt_id(), "r" + std::to_string(i) + "@0");
    EXPECT_EQ(g.num_samples(), 4);
    EXPECT_EQ(std::vector<int32_t>(g.prompt_ids().begin(), g.prompt_ids().end()),
              (std::vector<int32_t>{1, 100 + i}));
    EXPECT_EQ(g.ground_truth(), std::to_string(i));
    EXPECT_EQ(g.data_source(), "toy");
    EXPECT_EQ(g.sampling().max_tokens(), 16);
    EXPECT_EQ(g.sampling().stop(0), "\n\n");
    EXPECT_EQ(g.sampling().seed(), GroupSeed(7, i, 0));
    EXPECT_TRUE(proto::Validate(g).ok());
  }
  EXPECT_EQ(s->GroupRollout("r1@0"), "r1");
  EXPECT_EQ(s->stats().num_in_flight, 3);
  EXPECT_EQ(s->stats().cursor, (DataCursor{0, 3}));
  EXPECT_EQ(s->Rollout("r1")->num_groups, 3);
  EXPECT_EQ(s->Rollout("r1")->version, 0);
  EXPECT_FALSE(s->Assign("", 1, 0, 0).ok());
  EXPECT_FALSE(s->Assign("r1", -1, 0, 0).ok());
  EXPECT_FALSE(s->Assign("r1", 1, -2, 0).ok());
  EXPECT_TRUE(Assign(*s, "r1", 0, 0).empty());
}

TEST(ManagerStateTest, EpochsFollowTheShuffledOrderAndPromptIdsStayUnique) {
  ManagerConfig c = Config(2, /*shuffle=*/true);
  c.num_epochs = 2;
  auto s = State(6, c);
  EXPECT_EQ(s->stats().num_prompts_left, 12);
  auto groups = Assign(*s, "r", 100, 0);
  ASSERT_EQ(groups.size(), 12u);
  EXPECT_TRUE(s->exhausted());
  EXPECT_EQ(s->stats().num_prompts_left, 0);
  std::set<std::string> ids;
  for (int e = 0; e < 2; ++e) {
    const auto order = EpochOrder(6, 7, e, true);
    for (int i = 0; i < 6; ++i) {
      const proto::PromptGroup& g = groups[e * 6 + i];
      EXPECT_EQ(g.prompt_id(), "r" + std::to_string(order[i]) + "@" + std::to_string(e));
      EXPECT_EQ(g.sampling().seed(), GroupSeed(7, order[i], e));
      ids.insert(g.prompt_id());
    }
  }
  EXPECT_EQ(ids.size(), 12u);
  EXPECT_TRUE(Assign(*s, "r", 1, 0).empty());
}

TEST(ManagerStateTest, GroupsEnterTheBufferWhenCompleteAndLeaveInCompletionOrder) {
  auto s = State(5, Config(3));
  auto g = Assign(*s, "r1", 3, 2);
  // Samples of group 2 arrive out of order; it completes first, then 0, then 1.
  for (int i : {2, 0, 1}) ASSERT_TRUE(s->OnTrajectory(Traj(g[2], i, "r1", 2), 10).ok());
  Finish(*s, g[0], "r1", 2, 11);
  EXPECT_FALSE(s->TakeBatch(3));  // only two complete
  Finish(*s, g[1], "r1", 2, 12);
  EXPECT_EQ(s->stats().num_buffered, 3);
  EXPECT_EQ(s->stats().num_in_flight, 0);
  EXPECT_EQ(s->Rollout("r1")->num_groups, 0);
  auto batch = s->TakeBatch(2);
  ASSERT_TRUE(batch);
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_EQ((*batch)[0].prompt_id, "r2@0");
  EXPECT_EQ((*batch)[1].prompt_id, "r0@0");
  EXPECT_EQ((*batch)[0].completed_s, 10);
  EXPECT_EQ((*batch)[0].row, 2);
  EXPECT_EQ((*batch)[0].version, 2);
  for (const CompletedGroup& cg : *batch) {
    ASSERT_EQ(cg.trajectories.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(cg.trajectories[i].sample_index(), i);
      // prompt_ids were empty on the wire and are filled from the dataset.
      EXPECT_EQ(cg.trajectories[i].prompt_ids_size(), 2);
      EXPECT_EQ(cg.trajectories[i].prompt_ids(1), 100 + cg.row);
    }
  }
  EXPECT_FALSE(s->TakeBatch(2));
  auto last = s->TakeBatch(1);
  ASSERT_TRUE(last);
  EXPECT_EQ((*last)[0].prompt_id, "r1@0");
  EXPECT_EQ(s->stats().num_taken, 3);
  EXPECT_EQ(s->stats().num_completed, 3);
}

// The actor's progress bar: finished samples toward the next batch, never more than it holds.
TEST(ManagerStateTest, SamplesTowardBatchCountsTheGroupsNearestCompletion) {
  auto s = State(6, Config(4));
  auto g = Assign(*s, "r1", 5, 1);
  EXPECT_EQ(s->SamplesTowardBatch(2), 0);
  Finish(*s, g[0], "r1", 1, 1);                                  // buffered: 4
  ASSERT_TRUE(s->OnTrajectory(Traj(g[1], 0, "r1", 1), 2).ok());  // 1 of 4
  for (int i : {0, 1, 3}) ASSERT_TRUE(s->OnTrajectory(Traj(g[2], i, "r1", 1), 3).ok());  // 3
  ASSERT_TRUE(s->OnTrajectory(Traj(g[3], 2, "r1", 1), 4).ok());                          // 1 of 4
  EXPECT_EQ(s->SamplesTowardBatch(1), 4);      // the buffered group alone
  EXPECT_EQ(s->SamplesTowardBatch(2), 4 + 3);  // then the fullest in-flight group
  EXPECT_EQ(s->SamplesTowardBatch(3), 4 + 3 + 1);
  EXPECT_EQ(s->SamplesTowardBatch(10), 4 + 3 + 1 + 1);
  EXPECT_EQ(s->SamplesTowardBatch(0), 0);
  ASSERT_TRUE(s->TakeBatch(1));
  EXPECT_EQ(s->SamplesTowardBatch(1), 3);
}

TEST(ManagerStateTest, EverySampleEntersTheBufferAtMostOnce) {
  auto s = State(5, Config(2));
  auto g = Assign(*s, "r1", 1, 0);
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 0, "r1", 0), 0).ok());
  Status dup = s->OnTrajectory(Traj(g[0], 0, "r1", 0), 0);
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists) << dup;
  EXPECT_NE(dup.message().find("duplicate_sample"), std::string::npos) << dup;
  EXPECT_EQ(Dropped(*s, DropReason::kDuplicateSample), 1);
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 1, "r1", 0), 0).ok());
  // The group is complete: any later copy is a late duplicate.
  for (int i : {0, 1}) {
    EXPECT_EQ(s->OnTrajectory(Traj(g[0], i, "r1", 0), 0).code(), StatusCode::kAlreadyExists);
  }
  EXPECT_EQ(Dropped(*s, DropReason::kGroupComplete), 2);
  // Ids never handed out: not of this dataset, not reached by the cursor, a later epoch.
  proto::PromptGroup fake = g[0];
  for (const char* id : {"nope@0", "r3@0", "r0@1", "r0@01", "r0"}) {
    fake.set_prompt_id(id);
    EXPECT_EQ(s->OnTrajectory(Traj(fake, 0, "r1", 0), 0).code(), StatusCode::kNotFound) << id;
  }
  EXPECT_EQ(Dropped(*s, DropReason::kUnknownPrompt), 5);
  auto batch = s->TakeBatch(1);
  ASSERT_TRUE(batch);
  EXPECT_EQ((*batch)[0].trajectories.size(), 2u);
  EXPECT_EQ(s->stats().num_trajectories_accepted, 2);
  EXPECT_EQ(s->stats().num_buffered, 0);
}

TEST(ManagerStateTest, ForeignStaleAndMalformedTrajectoriesAreDropped) {
  auto s = State(5, Config(2));
  auto g = Assign(*s, "r1", 1, 3);
  auto expect_drop = [&](const proto::Trajectory& t, StatusCode code, DropReason reason) {
    const int64_t before = Dropped(*s, reason);
    Status st = s->OnTrajectory(t, 0);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(DropReasonName(reason)), std::string::npos) << st;
    EXPECT_EQ(Dropped(*s, reason), before + 1) << st;
  };
  expect_drop(Traj(g[0], 0, "r2", 3), StatusCode::kFailedPrecondition, DropReason::kNotAssigned);
  expect_drop(Traj(g[0], 0, "r1", 2), StatusCode::kFailedPrecondition,
              DropReason::kVersionMismatch);
  expect_drop(Traj(g[0], 2, "r1", 3), StatusCode::kInvalidArgument, DropReason::kInvalid);
  expect_drop(Traj(g[0], 0, "", 3), StatusCode::kInvalidArgument, DropReason::kInvalid);
  proto::Trajectory other_prompt = Traj(g[0], 0, "r1", 3);
  other_prompt.add_prompt_ids(1);
  other_prompt.add_prompt_ids(999);
  expect_drop(other_prompt, StatusCode::kInvalidArgument, DropReason::kInvalid);
  proto::Trajectory bad = Traj(g[0], 0, "r1", 3);
  bad.add_response_ids(5);  // one more token than logprobs
  expect_drop(bad, StatusCode::kInvalidArgument, DropReason::kInvalid);
  EXPECT_EQ(s->stats().num_trajectories_accepted, 0);
  // The right prompt_ids are accepted as they are.
  proto::Trajectory same_prompt = Traj(g[0], 0, "r1", 3);
  same_prompt.add_prompt_ids(1);
  same_prompt.add_prompt_ids(100);
  EXPECT_TRUE(s->OnTrajectory(same_prompt, 0).ok());
}

TEST(ManagerStateTest, HeartbeatsFeedTheHealthView) {
  auto s = State(5, Config(2));
  ASSERT_TRUE(s->OnHeartbeat(Beat("r2", 4), 1.5).ok());
  Assign(*s, "r2", 2, 4, 2.0);
  auto h = s->Rollout("r2");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->version, 4);
  EXPECT_EQ(h->running, 3);
  EXPECT_EQ(h->waiting, 1);
  EXPECT_EQ(h->kv_blocks_used, 40);
  EXPECT_EQ(h->kv_blocks_capacity, 100);
  EXPECT_EQ(h->kv_blocks_used_previous, 50);
  EXPECT_EQ(h->last_seen_s, 2.0);
  EXPECT_EQ(h->num_groups, 2);
  EXPECT_FALSE(s->Rollout("r9"));
  proto::Heartbeat relay = Beat("relay0", 4);
  relay.set_role("relay");
  EXPECT_EQ(s->OnHeartbeat(relay, 3).code(), StatusCode::kInvalidArgument);
  proto::Heartbeat over = Beat("r2", 4);
  over.set_kv_blocks_used(101);
  EXPECT_FALSE(s->OnHeartbeat(over, 3).ok());
  EXPECT_EQ(s->Rollout("r2")->kv_blocks_used, 40);
  ASSERT_TRUE(s->OnHeartbeat(Beat("r1", 4), 5).ok());
  auto all = s->Rollouts();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, "r1");
  EXPECT_EQ(all[1].id, "r2");
}

TEST(ManagerStateTest, DeadRolloutsGroupsAreReissuedWholeAndTheirLateSamplesDropped) {
  auto s = State(6, Config(2));
  ASSERT_TRUE(s->OnHeartbeat(Beat("r1", 3), 0).ok());
  auto g = Assign(*s, "r1", 2, 3, 0);
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 0, "r1", 3), 1).ok());
  ASSERT_TRUE(s->OnHeartbeat(Beat("r2", 4), 8).ok());
  EXPECT_TRUE(s->ExpireDead(5, 5).empty());  // r1 seen at 1: not more than 5 s ago
  EXPECT_EQ(s->ExpireDead(9, 5), std::vector<std::string>{"r1"});
  EXPECT_FALSE(s->Rollout("r1"));
  EXPECT_EQ(s->stats().num_reissue_queued, 2);
  EXPECT_EQ(s->stats().num_in_flight, 0);
  EXPECT_EQ(s->stats().num_reissued, 2);
  EXPECT_EQ(s->stats().num_rollouts_dead, 1);
  EXPECT_EQ(s->GroupRollout(g[0].prompt_id()), "");
  // While queued, nobody may send its samples.
  EXPECT_EQ(s->OnTrajectory(Traj(g[0], 1, "r1", 3), 9).code(), StatusCode::kFailedPrecondition);
  // Re-issued groups go out first, as the same requests, then new ones.
  auto again = Assign(*s, "r2", 3, 4, 10);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0].SerializeAsString(), g[0].SerializeAsString());
  EXPECT_EQ(again[1].SerializeAsString(), g[1].SerializeAsString());
  EXPECT_EQ(again[2].prompt_id(), "r2@0");
  // The dead rollout's late samples are dropped; its received sample 0 was discarded.
  EXPECT_EQ(s->OnTrajectory(Traj(g[0], 1, "r1", 3), 11).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Dropped(*s, DropReason::kNotAssigned), 2);
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 1, "r2", 4), 12).ok());
  EXPECT_EQ(s->stats().num_buffered, 0);  // sample 0 must come again, from r2
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 0, "r2", 4), 12).ok());
  auto batch = s->TakeBatch(1);
  ASSERT_TRUE(batch);
  EXPECT_EQ((*batch)[0].version, 4);
  for (const proto::Trajectory& t : (*batch)[0].trajectories) {
    EXPECT_EQ(t.rollout_id(), "r2");
    EXPECT_EQ(t.version(), 4);
  }
  // A rollout that comes back is a new rollout with nothing in flight.
  ASSERT_TRUE(s->OnHeartbeat(Beat("r1", 4), 13).ok());
  EXPECT_EQ(s->Rollout("r1")->num_groups, 0);
  EXPECT_EQ(s->DeclareDead("r2").value(), 2);
  EXPECT_EQ(s->DeclareDead("r2").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->stats().num_reissue_queued, 2);
}

TEST(ManagerStateTest, MoveGroupAcceptsTheDestinationOnly) {
  auto s = State(5, Config(3));
  ASSERT_TRUE(s->OnHeartbeat(Beat("r2", 2), 0).ok());
  ASSERT_TRUE(s->OnHeartbeat(Beat("r3", 5), 0).ok());
  auto g = Assign(*s, "r1", 1, 2);
  const std::string id = g[0].prompt_id();
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 0, "r1", 2), 0).ok());
  EXPECT_EQ(s->MoveGroup(id, "r1", "r3").code(), StatusCode::kFailedPrecondition);  // version 5
  EXPECT_EQ(s->MoveGroup(id, "r2", "r3").code(), StatusCode::kFailedPrecondition);  // not on r2
  EXPECT_EQ(s->MoveGroup(id, "r1", "r9").code(), StatusCode::kNotFound);
  EXPECT_EQ(s->MoveGroup("r4@0", "r1", "r2").code(), StatusCode::kNotFound);
  EXPECT_EQ(s->GroupRollout(id), "r1");
  ASSERT_TRUE(s->MoveGroup(id, "r1", "r2").ok());
  EXPECT_EQ(s->GroupRollout(id), "r2");
  EXPECT_EQ(s->Rollout("r1")->num_groups, 0);
  EXPECT_EQ(s->Rollout("r2")->num_groups, 1);
  EXPECT_EQ(s->stats().num_moved, 1);
  EXPECT_EQ(s->OnTrajectory(Traj(g[0], 1, "r1", 2), 0).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 1, "r2", 2), 0).ok());
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 2, "r2", 2), 0).ok());
  auto batch = s->TakeBatch(1);
  ASSERT_TRUE(batch);
  // The sample received before the move is kept.
  EXPECT_EQ((*batch)[0].trajectories[0].rollout_id(), "r1");
  EXPECT_EQ((*batch)[0].trajectories[2].rollout_id(), "r2");
  // When the destination dies, the moved group is re-issued with it.
  auto h = Assign(*s, "r2", 1, 2);
  ASSERT_TRUE(s->OnHeartbeat(Beat("r4", 2), 0).ok());
  ASSERT_TRUE(s->MoveGroup(h[0].prompt_id(), "r2", "r4").ok());
  EXPECT_EQ(s->DeclareDead("r4").value(), 1);
  EXPECT_EQ(s->GroupRollout(h[0].prompt_id()), "");
}

proto::PartialResponse Partial(const proto::PromptGroup& g, int32_t i, const std::string& rollout,
                               int64_t version, int32_t offset, std::vector<int32_t> ids) {
  proto::PartialResponse p;
  p.set_prompt_id(g.prompt_id());
  p.set_sample_index(i);
  p.set_version(version);
  p.set_rollout_id(rollout);
  p.set_offset(offset);
  for (int32_t id : ids) {
    p.add_response_ids(id);
    p.add_logprobs(-0.1f * static_cast<float>(id));
  }
  return p;
}

TEST(ManagerStateTest, PartialResponsesJoinDeltasAndPrefixes) {
  auto s = State(5, Config(2));
  auto g = Assign(*s, "r1", 1, 0);
  auto code = [&](const proto::PartialResponse& p) { return s->OnPartial(p, 0).code(); };
  EXPECT_EQ(code(Partial(g[0], 0, "r1", 0, 0, {5, 6})), StatusCode::kOk);
  EXPECT_EQ(code(Partial(g[0], 0, "r1", 0, 2, {7})), StatusCode::kOk);           // a delta
  EXPECT_EQ(code(Partial(g[0], 0, "r1", 0, 0, {5, 6, 7, 8})), StatusCode::kOk);  // a prefix
  EXPECT_EQ(s->Rollout("r1")->num_tokens_held, 4);
  EXPECT_EQ(code(Partial(g[0], 0, "r1", 0, 1, {6, 7})), StatusCode::kAlreadyExists);  // nothing new
  EXPECT_EQ(code(Partial(g[0], 0, "r1", 0, 6, {9})), StatusCode::kFailedPrecondition);  // gap
  EXPECT_EQ(code(Partial(g[0], 0, "r1", 0, 3, {1, 9})),
            StatusCode::kFailedPrecondition);  // differs
  EXPECT_EQ(Dropped(*s, DropReason::kPartialGap), 2);
  EXPECT_EQ(code(Partial(g[0], 0, "r2", 0, 4, {9})), StatusCode::kFailedPrecondition);
  EXPECT_EQ(code(Partial(g[0], 0, "r1", 1, 4, {9})), StatusCode::kFailedPrecondition);
  EXPECT_EQ(code(Partial(g[0], 0, "", 0, 4, {9})), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(Partial(g[0], 1, "r1", 0, 0, {3})), StatusCode::kOk);
  EXPECT_EQ(s->stats().num_partials_accepted, 4);
  EXPECT_EQ(s->Rollout("r1")->num_tokens_held, 5);
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 0, "r1", 0), 0).ok());
  EXPECT_EQ(s->Rollout("r1")->num_tokens_held, 1);
  EXPECT_EQ(code(Partial(g[0], 0, "r1", 0, 4, {9})), StatusCode::kAlreadyExists);  // finished
  // A re-issue forgets the partials.
  EXPECT_EQ(s->DeclareDead("r1").value(), 1);
  auto again = Assign(*s, "r2", 1, 0);
  EXPECT_EQ(code(Partial(again[0], 1, "r2", 0, 1, {4})), StatusCode::kFailedPrecondition);
  EXPECT_EQ(code(Partial(again[0], 1, "r2", 0, 0, {4})), StatusCode::kOk);
  EXPECT_EQ(s->Rollout("r2")->num_tokens_held, 1);
}

TEST(ManagerStateTest, OutstandingGroupsAreBounded) {
  ManagerConfig c = Config(1);
  c.max_outstanding_groups = 2;
  auto s = State(5, c);
  auto g = Assign(*s, "r1", 5, 0);
  ASSERT_EQ(g.size(), 2u);
  Finish(*s, g[0], "r1", 0);
  EXPECT_TRUE(Assign(*s, "r1", 5, 0).empty());  // one in flight + one in the buffer
  ASSERT_TRUE(s->TakeBatch(1));
  EXPECT_EQ(Assign(*s, "r1", 5, 0).size(), 1u);
  // Re-issued groups are already counted: they go out whatever the bound.
  ASSERT_EQ(s->DeclareDead("r1").value(), 2);
  EXPECT_EQ(Assign(*s, "r2", 5, 0).size(), 2u);
}

TEST(ManagerStateTest, ConfigAndDatasetAreChecked) {
  ManagerConfig c = Config(0);
  EXPECT_NE(ManagerState::Create(Dataset(2), c).status().message().find("num_samples"),
            std::string::npos);
  c = Config(2);
  c.sampling.set_max_tokens(0);
  EXPECT_NE(ManagerState::Create(Dataset(2), c).status().message().find("max_tokens"),
            std::string::npos);
  c = Config(2);
  c.sampling.set_top_p(1.5f);
  EXPECT_FALSE(ManagerState::Create(Dataset(2), c).ok());
  EXPECT_FALSE(ManagerState::Create(nullptr, Config(2)).ok());
  std::vector<PromptRow> dup(2);
  dup[0].id = dup[1].id = "a";
  dup[0].prompt_ids = dup[1].prompt_ids = {1};
  dup[0].source = "x:1";
  dup[1].source = "x:2";
  EXPECT_NE(
      MakePromptDataset("x", dup).status().message().find("x:2: id 'a' is also the id of x:1"),
      std::string::npos);
}

TEST(ManagerStateTest, MetricsNameEveryCounter) {
  auto s = State(3, Config(1));
  auto g = Assign(*s, "r1", 1, 0);
  Finish(*s, g[0], "r1", 0);
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 0, "r1", 0), 0).code() == StatusCode::kAlreadyExists);
  const auto m = s->Metrics();
  EXPECT_EQ(m.at("manager/buffered"), 1);
  EXPECT_EQ(m.at("manager/issued"), 1);
  EXPECT_EQ(m.at("manager/rollouts_alive"), 1);
  EXPECT_EQ(m.at("manager/prompts_left"), -1);
  EXPECT_EQ(m.at("manager/dropped/group_complete"), 1);
  EXPECT_EQ(m.at("manager/dropped/invalid"), 0);
  EXPECT_EQ(m.size(), 14u + kNumDropReasons);
}

// ---- snapshots ----

// A fixed schedule: one rollout keeps three groups in flight; each tick it asks for work, then
// delivers half of the oldest group's samples (so some groups are half received at any time), and
// the actor takes a batch of 3 groups when it can, with version = batches taken.
class Driver {
 public:
  explicit Driver(ManagerState* s) : s_(s) {}

  // Runs until `batches` batches have been taken in total (counting those in `log` already).
  void RunUntil(size_t batches, std::vector<std::vector<Consumed>>* log) {
    for (int tick = 0; log->size() < batches; ++tick) {
      ASSERT_LT(tick, 10000) << "no progress";
      const auto version = static_cast<int64_t>(log->size());
      auto got = Assign(*s_, "r", static_cast<int32_t>(3 - fifo_.size()), version, now_);
      for (auto& g : got) fifo_.push_back({std::move(g), version, 0});
      if (!fifo_.empty()) {
        Front& f = fifo_.front();
        const int32_t n = f.group.num_samples();
        for (int32_t k = 0; k < (n + 1) / 2 && f.next < n; ++k, ++f.next) {
          ASSERT_TRUE(s_->OnTrajectory(Traj(f.group, f.next, "r", f.version), now_).ok());
        }
        if (f.next == n) fifo_.pop_front();
      }
      if (auto batch = s_->TakeBatch(3)) {
        std::vector<Consumed> b;
        for (const CompletedGroup& g : *batch) {
          for (const proto::Trajectory& t : g.trajectories) {
            b.emplace_back(t.prompt_id(), t.sample_index());
          }
        }
        log->push_back(std::move(b));
        last_snapshot_ = s_->Snapshot();
      }
      now_ += 1;
    }
  }
  // The snapshot taken right after the last batch.
  const nlohmann::json& last_snapshot() const { return last_snapshot_; }

 private:
  struct Front {
    proto::PromptGroup group;
    int64_t version = 0;
    int32_t next = 0;
  };
  ManagerState* s_;
  std::deque<Front> fifo_;
  double now_ = 0;
  nlohmann::json last_snapshot_;
};

// Kill the actor after batch j, restore the manager from the snapshot taken with that batch, go
// on: the batches are the uninterrupted run's, none skipped or repeated.
TEST(ManagerStateTest, RestoredRunConsumesTheSameSequenceAsAnUninterruptedOne) {
  ManagerConfig c = Config(3, /*shuffle=*/true);
  c.num_epochs = 3;  // 7 rows: batches straddle epochs
  constexpr size_t kBatches = 6;
  std::vector<std::vector<Consumed>> straight;
  {
    auto s = State(7, c);
    Driver d(s.get());
    d.RunUntil(kBatches, &straight);
  }
  std::set<Consumed> unique;
  for (const auto& b : straight) unique.insert(b.begin(), b.end());
  EXPECT_EQ(unique.size(), kBatches * 3 * 3);
  for (size_t j = 1; j < kBatches; ++j) {
    std::vector<std::vector<Consumed>> log;
    nlohmann::json snapshot;
    {
      auto s = State(7, c);
      Driver d(s.get());
      d.RunUntil(j, &log);
      snapshot = d.last_snapshot();
      ASSERT_FALSE(snapshot["in_flight"].empty());  // the restore has groups to re-issue
      d.RunUntil(j + 2, &log);                      // work after the checkpoint is lost
      log.resize(j);
    }
    // Through text, as a checkpoint file would carry it.
    auto restored = State(7, c);
    ASSERT_TRUE(restored->Restore(nlohmann::json::parse(snapshot.dump())).ok());
    EXPECT_EQ(restored->stats().num_reissue_queued,
              static_cast<int64_t>(snapshot["in_flight"].size()));
    Driver d(restored.get());
    d.RunUntil(kBatches, &log);
    EXPECT_EQ(log, straight) << "restored after batch " << j;
  }
}

TEST(ManagerStateTest, SnapshotCarriesTheBufferExactly) {
  auto s = State(4, Config(2));
  auto g = Assign(*s, "r1", 3, 5, 1);
  Finish(*s, g[1], "r1", 5, 2.5);
  ASSERT_TRUE(s->OnTrajectory(Traj(g[0], 1, "r1", 5), 3).ok());
  const nlohmann::json snap = s->Snapshot();
  EXPECT_EQ(snap["in_flight"].size(), 2u);
  auto r = State(4, Config(2));
  ASSERT_TRUE(r->Restore(snap).ok());
  EXPECT_EQ(r->Snapshot()["buffer"], snap["buffer"]);
  EXPECT_EQ(r->stats().cursor, (DataCursor{0, 3}));
  auto mine = s->TakeBatch(1), theirs = r->TakeBatch(1);
  ASSERT_TRUE(mine && theirs);
  ASSERT_EQ((*theirs)[0].trajectories.size(), 2u);
  EXPECT_EQ((*theirs)[0].completed_s, 2.5);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ((*mine)[0].trajectories[i].SerializeAsString(),
              (*theirs)[0].trajectories[i].SerializeAsString());
  }
  // In-flight groups come back whole, in hand-out order, before any new prompt.
  auto again = Assign(*r, "r2", 3, 6);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(again[0].SerializeAsString(), g[0].SerializeAsString());
  EXPECT_EQ(again[1].SerializeAsString(), g[2].SerializeAsString());
  EXPECT_EQ(again[2].prompt_id(), "r3@0");
  EXPECT_EQ(r->OnTrajectory(Traj(g[0], 1, "r1", 5), 4).code(), StatusCode::kFailedPrecondition);
}

TEST(ManagerStateTest, BadSnapshotsAreRefusedNamingTheField) {
  auto s = State(4, Config(2));
  auto g = Assign(*s, "r1", 3, 5);
  Finish(*s, g[0], "r1", 5);
  const nlohmann::json good = s->Snapshot();
  struct Case {
    std::string name;
    std::function<void(nlohmann::json&)> edit;
    StatusCode code;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"not an object", [](auto& j) { j = nlohmann::json::array(); }, StatusCode::kInvalidArgument,
       "snapshot: is an array of 0 elements, not an object"},
      {"format", [](auto& j) { j["format_version"] = 2; }, StatusCode::kInvalidArgument,
       "snapshot: format 'laminar.manager_state' version 2"},
      {"no cursor", [](auto& j) { j.erase("cursor"); }, StatusCode::kInvalidArgument,
       "snapshot.cursor: missing"},
      {"cursor type", [](auto& j) { j["cursor"]["index"] = "3"; }, StatusCode::kInvalidArgument,
       "snapshot.cursor.index: is \"3\", not an integer"},
      {"cursor range", [](auto& j) { j["cursor"]["index"] = 4; }, StatusCode::kInvalidArgument,
       "snapshot.cursor.index: 4 is outside [0, 3]"},
      {"row range", [](auto& j) { j["in_flight"][0]["row"] = 9; }, StatusCode::kInvalidArgument,
       "snapshot.in_flight[0].row: 9 is outside [0, 3]"},
      {"prompt id", [](auto& j) { j["in_flight"][1]["prompt_id"] = "r1@0"; },
       StatusCode::kInvalidArgument, "snapshot.in_flight[1].prompt_id: 'r1@0' but row 2"},
      {"repeat", [](auto& j) { j["in_flight"][1] = j["in_flight"][0]; },
       StatusCode::kInvalidArgument, "snapshot.in_flight[1]: 'r1@0' repeats"},
      {"past the cursor",
       [](auto& j) {
         j["in_flight"][1] = {{"prompt_id", "r3@0"}, {"row", 3}, {"epoch", 0}};
       },
       StatusCode::kInvalidArgument, "snapshot.in_flight[1]: 'r3@0' lies at or after the cursor"},
      {"trajectory count", [](auto& j) { j["buffer"][0]["trajectories"].erase(1); },
       StatusCode::kInvalidArgument,
       "snapshot.buffer[0].trajectories: 1 trajectories for a group of 2"},
      {"trajectory version", [](auto& j) { j["buffer"][0]["trajectories"][1]["version"] = "4"; },
       StatusCode::kInvalidArgument, "snapshot.buffer[0].trajectories[1]: sample_index 1"},
      {"trajectory field", [](auto& j) { j["buffer"][0]["trajectories"][0]["not_a_field"] = 1; },
       StatusCode::kInvalidArgument, "snapshot.buffer[0].trajectories[0]: not a Trajectory"},
      {"trajectory invariant",
       [](auto& j) { j["buffer"][0]["trajectories"][0]["logprobs"] = {-1.0}; },
       StatusCode::kInvalidArgument, "snapshot.buffer[0].trajectories[0]: response_ids has 3"},
      {"buffer version", [](auto& j) { j["buffer"][0]["version"] = -1; },
       StatusCode::kInvalidArgument, "snapshot.buffer[0].version: -1 is outside"},
      {"other dataset", [](auto& j) { j["dataset"]["fingerprint"] = "0000000000000000"; },
       StatusCode::kFailedPrecondition, "snapshot.dataset: taken with a dataset of 4 rows"},
      {"other seed", [](auto& j) { j["config"]["seed"] = 8; }, StatusCode::kFailedPrecondition,
       "snapshot.config: seed 8"},
      {"other n", [](auto& j) { j["config"]["num_samples"] = 3; }, StatusCode::kFailedPrecondition,
       "num_samples 3"},
  };
  for (const Case& c : cases) {
    nlohmann::json bad = good;
    c.edit(bad);
    auto r = State(4, Config(2));
    Status st = r->Restore(bad);
    EXPECT_EQ(st.code(), c.code) << c.name << ": " << st;
    EXPECT_NE(st.message().find(c.want), std::string::npos) << c.name << ": " << st;
    // Nothing changed: the good snapshot still restores.
    ASSERT_TRUE(r->Restore(good).ok()) << c.name;
    // A restored state holds every in-flight group in its re-issue queue (rollout "").
    nlohmann::json requeued = good;
    for (auto& group : requeued["in_flight"]) group["rollout"] = "";
    EXPECT_EQ(r->Snapshot(), requeued) << c.name;
  }
  auto used = State(4, Config(2));
  Assign(*used, "r1", 1, 0);
  EXPECT_EQ(used->Restore(good).code(), StatusCode::kFailedPrecondition);
}

// ---- randomized interleaving ----

// Fake rollouts hold groups and send their samples at random, with duplicates, partials, moves
// between rollouts of one version, deaths (zombies keep sending for a while), new incarnations
// under new ids, version bumps between groups, actor restores from an older snapshot, and the
// manager's heartbeat expiry. The model: the consumed (prompt id, sample index) pairs of the
// current timeline. Every pair is consumed at most once, every consumed group is one hand-out of
// one version, and after a final drain every prompt of the single epoch is consumed exactly once.
class Simulation {
 public:
  Simulation(uint32_t seed, ManagerConfig config, int num_rows)
      : rng_(seed), config_(config), num_rows_(num_rows), s_(State(num_rows, config)) {
    for (int i = 0; i < 4; ++i) Spawn();
  }

  void Run(int ticks) {
    for (int t = 0; t < ticks; ++t) {
      now_ += 1;
      for (Fake& f : fakes_) Act(f, /*chaos=*/true);
      if (Chance(0.03)) Kill();
      if (Chance(0.2)) Move();
      if (Chance(0.02)) Restore();
      if (Chance(0.05)) snapshot_ = {s_->Snapshot(), consumed_log_.size(), actor_version_};
      for (const std::string& id : s_->ExpireDead(now_, kTimeout)) expired_.insert(id);
      TakeBatches(2);
    }
  }

  // No more chaos: live rollouts work until every prompt is consumed.
  void Drain() {
    for (Fake& f : fakes_) f.zombie_until = 0;
    for (int t = 0; t < 10000; ++t) {
      now_ += 1;
      for (Fake& f : fakes_) Act(f, /*chaos=*/false);
      s_->ExpireDead(now_, kTimeout);
      TakeBatches(1);
      const ManagerStats st = s_->stats();
      if (s_->exhausted() && st.num_in_flight == 0 && st.num_reissue_queued == 0 &&
          st.num_buffered == 0) {
        return;
      }
    }
    FAIL() << "the drain did not finish";
  }

  void CheckAllConsumedOnce() const {
    std::multiset<Consumed> all(consumed_log_.begin(), consumed_log_.end());
    ASSERT_EQ(all.size(), static_cast<size_t>(num_rows_ * config_.num_samples));
    for (int r = 0; r < num_rows_; ++r) {
      for (int i = 0; i < config_.num_samples; ++i) {
        EXPECT_EQ(all.count({"r" + std::to_string(r) + "@0", i}), 1u) << r << " " << i;
      }
    }
  }

  // Counters summed over every manager this run had (a restore starts from zero).
  ManagerStats Totals() {
    Accumulate();
    ManagerStats t = totals_;
    totals_ = {};
    return t;
  }
  int restores() const { return restores_; }
  int kills() const { return kills_; }

 private:
  static constexpr double kTimeout = 4;
  struct Held {
    proto::PromptGroup group;
    int64_t version = 0;
    std::set<int32_t> sent;
  };
  struct Fake {
    std::string id;
    int64_t version = 0;
    bool alive = true;
    double zombie_until = 0;  // a dead rollout's in-flight sends still arrive until then
    std::vector<Held> held;
  };

  void Accumulate() {
    const ManagerStats st = s_->stats();
    totals_.num_moved += st.num_moved;
    totals_.num_reissued += st.num_reissued;
    totals_.num_rollouts_dead += st.num_rollouts_dead;
    for (int r = 0; r < kNumDropReasons; ++r) totals_.dropped[r] += st.dropped[r];
  }

  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  void Spawn() {
    Fake f;
    f.id = "r" + std::to_string(next_id_++);
    f.version = actor_version_;
    fakes_.push_back(std::move(f));
  }

  void Act(Fake& f, bool chaos) {
    if (!f.alive) {
      if (now_ < f.zombie_until && !f.held.empty()) SendOne(f, f.held[Pick(f.held.size())]);
      return;
    }
    if (chaos && Chance(0.1)) return;  // a slow tick
    Status hb = s_->OnHeartbeat(Beat(f.id, f.version), now_);
    ASSERT_TRUE(hb.ok()) << hb;
    if (f.held.empty()) f.version = actor_version_;  // pulls the newest weights when idle
    if (f.held.size() < 3) {
      for (auto& g : Assign(*s_, f.id, 2, f.version, now_)) f.held.push_back({g, f.version, {}});
    }
    if (chaos) {
      for (int k = 0; k < 2 && !f.held.empty(); ++k) {
        Held& h = f.held[Pick(f.held.size())];
        SendOne(f, h);
        if (Chance(0.05)) SendPartial(f, h);
      }
    } else {
      for (Held& h : f.held) {
        for (int32_t i = 0; i < h.group.num_samples(); ++i) {
          s_->OnTrajectory(Traj(h.group, i, f.id, h.version), now_).IgnoreError();
          h.sent.insert(i);
        }
      }
    }
    std::erase_if(f.held, [&](const Held& h) {
      return static_cast<int32_t>(h.sent.size()) == h.group.num_samples();
    });
  }

  void SendOne(Fake& f, Held& h) {
    const int32_t n = h.group.num_samples();
    int32_t i = static_cast<int32_t>(Pick(n));
    // Mostly new samples; sometimes a duplicate. Whether the manager takes a sample depends on
    // its current hand-out (a restored manager may have handed the group to this rollout again),
    // so the consumed model, not this sender, judges exactly-once.
    if (h.sent.count(i) > 0 && !Chance(0.2)) return;
    s_->OnTrajectory(Traj(h.group, i, f.id, h.version), now_).IgnoreError();
    h.sent.insert(i);
  }

  void SendPartial(const Fake& f, const Held& h) {
    proto::PartialResponse p;
    p.set_prompt_id(h.group.prompt_id());
    p.set_sample_index(static_cast<int32_t>(Pick(h.group.num_samples())));
    p.set_version(h.version);
    p.set_rollout_id(f.id);
    p.add_response_ids(1);
    p.add_logprobs(-1);
    s_->OnPartial(p, now_).IgnoreError();
  }

  // A live rollout dies; a new one (a new id: a restarted process is a new rollout) replaces it.
  void Kill() {
    std::vector<size_t> live;
    for (size_t i = 0; i < fakes_.size(); ++i) {
      if (fakes_[i].alive) live.push_back(i);
    }
    if (live.size() < 2) return;
    Fake& f = fakes_[live[Pick(live.size())]];
    f.alive = false;
    f.zombie_until = now_ + 2 * kTimeout * std::uniform_real_distribution<double>(0, 1)(rng_);
    ++kills_;
    Spawn();
  }

  // Repack: a group moves between live rollouts of one version, with what it had not sent.
  void Move() {
    std::vector<Fake*> live;
    for (Fake& f : fakes_) {
      if (f.alive) live.push_back(&f);
    }
    Fake* from = live[Pick(live.size())];
    if (from->held.empty()) return;
    const size_t k = Pick(from->held.size());
    std::vector<Fake*> to;
    for (Fake* f : live) {
      if (f != from && f->version == from->held[k].version) to.push_back(f);
    }
    if (to.empty()) return;
    Fake* dest = to[Pick(to.size())];
    Held h = from->held[k];
    // A held group the manager no longer gives to `from` (restored manager) cannot move.
    if (!s_->MoveGroup(h.group.prompt_id(), from->id, dest->id).ok()) return;
    from->held.erase(from->held.begin() + static_cast<std::ptrdiff_t>(k));
    dest->held.push_back(std::move(h));
  }

  // The actor dies and resumes from its last checkpoint: the manager restarts from the snapshot
  // saved with it, consumption after it is undone. Rollouts keep what they hold (and keep
  // sending it; the restored manager drops it).
  void Restore() {
    if (snapshot_.json.is_null()) return;
    Accumulate();
    s_ = State(num_rows_, config_);
    Status st = s_->Restore(snapshot_.json);
    ASSERT_TRUE(st.ok()) << st;
    consumed_log_.resize(snapshot_.num_consumed);
    consumed_.clear();
    consumed_.insert(consumed_log_.begin(), consumed_log_.end());
    actor_version_ = snapshot_.actor_version;
    ++restores_;
  }

  void TakeBatches(int64_t b) {
    while (auto batch = s_->TakeBatch(b)) {
      for (const CompletedGroup& g : *batch) {
        ASSERT_EQ(static_cast<int32_t>(g.trajectories.size()), config_.num_samples);
        const uint64_t seed = GroupSeed(config_.sampling.seed(), g.row, g.epoch);
        for (int32_t i = 0; i < config_.num_samples; ++i) {
          const proto::Trajectory& t = g.trajectories[i];
          ASSERT_EQ(t.sample_index(), i);
          ASSERT_EQ(t.prompt_id(), g.prompt_id);
          // One hand-out of one version: the tokens say which.
          ASSERT_EQ(t.version(), g.version);
          ASSERT_EQ(t.response_ids(0), static_cast<int32_t>(seed % 1000));
          ASSERT_EQ(t.response_ids(2), static_cast<int32_t>(g.version));
          ASSERT_TRUE(consumed_.insert({g.prompt_id, i}).second)
              << g.prompt_id << " sample " << i << " consumed twice";
          consumed_log_.emplace_back(g.prompt_id, i);
        }
      }
      ++actor_version_;
    }
  }

  std::mt19937 rng_;
  ManagerConfig config_;
  int num_rows_;
  std::unique_ptr<ManagerState> s_;
  std::vector<Fake> fakes_;
  int next_id_ = 0;
  double now_ = 0;
  int64_t actor_version_ = 0;
  std::set<Consumed> consumed_;
  std::vector<Consumed> consumed_log_;
  std::set<std::string> expired_;
  struct Saved {
    nlohmann::json json;
    size_t num_consumed = 0;
    int64_t actor_version = 0;
  } snapshot_;
  int restores_ = 0;
  int kills_ = 0;
  ManagerStats totals_;
};

TEST(ManagerStateTest, RandomizedInterleavingConsumesEveryPromptExactlyOnce) {
  int restores = 0, kills = 0;
  ManagerStats totals;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    ManagerConfig c = Config(3, /*shuffle=*/true);
    c.num_epochs = 1;
    c.max_outstanding_groups = 12;
    Simulation sim(seed, c, 60);
    sim.Run(150);
    sim.Drain();
    if (::testing::Test::HasFatalFailure()) return;
    sim.CheckAllConsumedOnce();
    restores += sim.restores();
    kills += sim.kills();
    const ManagerStats t = sim.Totals();
    totals.num_moved += t.num_moved;
    totals.num_reissued += t.num_reissued;
    totals.num_rollouts_dead += t.num_rollouts_dead;
    for (int r = 0; r < kNumDropReasons; ++r) totals.dropped[r] += t.dropped[r];
  }
  // The runs did exercise the faults they are meant to survive.
  auto dropped = [&](DropReason r) { return totals.dropped[static_cast<int>(r)]; };
  EXPECT_GT(restores, 5);
  EXPECT_GT(kills, 20);
  EXPECT_GT(totals.num_rollouts_dead, 20);
  EXPECT_GT(totals.num_reissued, 20);
  EXPECT_GT(totals.num_moved, 20);
  EXPECT_GT(dropped(DropReason::kDuplicateSample), 20);
  EXPECT_GT(dropped(DropReason::kGroupComplete), 5);
  EXPECT_GT(dropped(DropReason::kNotAssigned), 5);
  EXPECT_GT(dropped(DropReason::kUnknownPrompt), 0);  // sent to a manager restored to before it
  std::string summary;
  for (int r = 0; r < kNumDropReasons; ++r) {
    summary += std::string(DropReasonName(static_cast<DropReason>(r))) + "=" +
               std::to_string(totals.dropped[r]) + " ";
  }
  RecordProperty("dropped", summary);
  RecordProperty("moved", static_cast<int>(totals.num_moved));
  RecordProperty("reissued", static_cast<int>(totals.num_reissued));
}

}  // namespace
}  // namespace laminar::manager
