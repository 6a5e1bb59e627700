// Scheduler: hand cases (chunked prefill, decodes first, admission by free blocks, GRPO forks),
// preemption by recompute run to completion, a too-large request, contract errors, and randomized
// simulations driven by a fake engine that stamps every KV slot it writes and checks that each
// step reads exactly the KV of its own tokens.
#include "rollout/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace laminar::rollout {
namespace {

// A fake engine: KV slots hold (owner, position) stamps. Prompt tokens of a GRPO group are the
// same tokens, so their owner is the group's root; generated tokens belong to their request.
class FakeEngine {
 public:
  FakeEngine(SchedulerConfig config, int32_t block_size, int32_t num_blocks)
      : s(config, block_size, num_blocks),
        block_size_(block_size),
        slots_(static_cast<size_t>(block_size) * static_cast<size_t>(num_blocks), {-1, -1}) {}

  Status Add(RequestId id, int64_t prompt, int64_t max_tokens,
             std::optional<RequestId> parent = std::nullopt) {
    Status st = s.Add(id, prompt, max_tokens, parent);
    if (st.ok()) {
      info_[id] = {
          .prompt = prompt, .max_tokens = max_tokens, .owner = parent ? owner(*parent) : id};
    }
    return st;
  }

  // Runs one step: schedules, checks the plan, writes and reads KV, reports the sampled tokens.
  Plan Step() {
    StatusOr<Plan> plan = s.Schedule();
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return {};
    int64_t total = 0;
    std::set<RequestId> ids;
    for (const BlockCopy& c : plan->copies) {
      std::copy_n(slots_.begin() + Slot0(c.src), block_size_, slots_.begin() + Slot0(c.dst));
    }
    for (const ScheduledSeq& e : plan->seqs) {
      EXPECT_TRUE(ids.insert(e.id).second) << "request " << e.id << " twice in a plan";
      EXPECT_GE(e.num_tokens, 1);
      total += e.num_tokens;
      const Info& in = info_.at(e.id);
      EXPECT_EQ(e.samples, e.start + e.num_tokens == in.prompt + in.generated) << e.id;
      if (e.start == 0 && in.generated > 0) ++num_reprefills;
      EXPECT_GE(std::ssize(e.block_table) * block_size_, e.start + e.num_tokens);
      for (int64_t p = e.start; p < e.start + e.num_tokens; ++p) {
        slots_[SlotOf(e.block_table, p)] = Stamp(e.id, p);
      }
    }
    EXPECT_EQ(total, plan->num_batched_tokens);
    EXPECT_LE(total, s.config().max_num_batched_tokens);
    std::vector<RequestId> sampled;
    for (const ScheduledSeq& e : plan->seqs) {
      for (int64_t p = 0; p < e.start + e.num_tokens; ++p) {  // attention reads [0, end)
        if (slots_[SlotOf(e.block_table, p)] != Stamp(e.id, p)) {
          ADD_FAILURE() << "request " << e.id << " reads wrong KV at position " << p;
          break;
        }
      }
      if (e.samples) sampled.push_back(e.id);
      for (RequestId c : e.forked) {
        ++num_forks;
        EXPECT_EQ(info_.at(c).owner, info_.at(e.id).owner);
        sampled.push_back(c);
      }
    }
    StatusOr<std::vector<RequestId>> done = s.OnTokens(sampled);
    EXPECT_TRUE(done.ok()) << done.status();
    for (RequestId id : sampled) ++info_.at(id).generated;
    if (done.ok()) {
      for (RequestId id : *done) {
        EXPECT_EQ(info_.at(id).generated, info_.at(id).max_tokens);
        finished_by_length.push_back(id);
      }
    }
    s.CheckInvariants();
    return *std::move(plan);
  }

  int64_t generated(RequestId id) const { return info_.at(id).generated; }
  int64_t max_tokens(RequestId id) const { return info_.at(id).max_tokens; }

  Scheduler s;
  std::vector<RequestId> finished_by_length;
  int64_t num_reprefills = 0;  // prefills from position 0 of a request that had generated tokens
  int64_t num_forks = 0;       // group children forked from their parent's prompt

 private:
  struct Info {
    int64_t prompt = 0, max_tokens = 0, generated = 0;
    RequestId owner = 0;
  };
  RequestId owner(RequestId id) const { return info_.at(id).owner; }
  std::pair<int64_t, int64_t> Stamp(RequestId id, int64_t p) const {
    const Info& in = info_.at(id);
    return {p < in.prompt ? in.owner : id, p};
  }
  std::ptrdiff_t Slot0(BlockId b) const { return std::ptrdiff_t{b} * block_size_; }
  size_t SlotOf(const std::vector<BlockId>& table, int64_t p) const {
    return static_cast<size_t>(Slot0(table.at(static_cast<size_t>(p / block_size_))) +
                               p % block_size_);
  }

  int32_t block_size_;
  std::vector<std::pair<int64_t, int64_t>> slots_;
  std::map<RequestId, Info> info_;
};

std::vector<RequestId> Ids(const Plan& p) {
  std::vector<RequestId> ids;
  for (const ScheduledSeq& e : p.seqs) ids.push_back(e.id);
  return ids;
}

TEST(SchedulerTest, BudgetSplitsALongPromptIntoChunks) {
  FakeEngine e({.max_num_batched_tokens = 8, .max_num_seqs = 4}, /*block_size=*/4, 64);
  ASSERT_TRUE(e.Add(1, 20, 3).ok());
  std::vector<std::tuple<int64_t, int64_t, bool>> got;
  while (!e.s.idle()) {
    Plan p = e.Step();
    ASSERT_EQ(p.seqs.size(), 1u);
    got.emplace_back(p.seqs[0].start, p.seqs[0].num_tokens, p.seqs[0].samples);
  }
  const std::vector<std::tuple<int64_t, int64_t, bool>> want = {
      {0, 8, false}, {8, 8, false}, {16, 4, true}, {20, 1, true}, {21, 1, true}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(e.finished_by_length, std::vector<RequestId>{1});
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 0);
}

TEST(SchedulerTest, DecodesComeBeforePrefillChunks) {
  FakeEngine e({.max_num_batched_tokens = 10, .max_num_seqs = 8}, 4, 64);
  ASSERT_TRUE(e.Add(1, 4, 10).ok());
  ASSERT_TRUE(e.Add(2, 3, 10).ok());
  Plan p = e.Step();
  EXPECT_EQ(Ids(p), (std::vector<RequestId>{1, 2}));
  ASSERT_TRUE(e.Add(3, 30, 5).ok());
  p = e.Step();
  ASSERT_EQ(Ids(p), (std::vector<RequestId>{1, 2, 3}));
  EXPECT_EQ(p.seqs[0].start, 4);
  EXPECT_EQ(p.seqs[1].start, 3);
  EXPECT_EQ(p.seqs[2].num_tokens, 8);  // the budget left after two decodes
  EXPECT_FALSE(p.seqs[2].samples);
  p = e.Step();
  ASSERT_EQ(Ids(p), (std::vector<RequestId>{1, 2, 3}));
  EXPECT_EQ(p.seqs[2].start, 8);
  EXPECT_EQ(p.num_batched_tokens, 10);
}

TEST(SchedulerTest, AdmissionStopsWhenBlocksRunOutWithoutOvertaking) {
  FakeEngine e({.max_num_batched_tokens = 100, .max_num_seqs = 8}, 4, /*num_blocks=*/10);
  ASSERT_TRUE(e.Add(1, 16, 8).ok());
  ASSERT_TRUE(e.Add(2, 16, 8).ok());
  ASSERT_TRUE(e.Add(3, 16, 8).ok());  // 4 blocks; only 2 left
  ASSERT_TRUE(e.Add(4, 4, 8).ok());   // would fit, but must not overtake 3
  Plan p = e.Step();
  EXPECT_EQ(Ids(p), (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(e.s.stats().num_waiting, 2);
  EXPECT_EQ(e.s.stats().num_kv_blocks_used, 8);
  ASSERT_TRUE(e.s.Abort(1).ok());
  p = e.Step();  // 2 decodes (1 new block), 3 takes 4, 4 takes the last one
  EXPECT_EQ(Ids(p), (std::vector<RequestId>{2, 3, 4}));
  EXPECT_EQ(e.s.stats().num_kv_blocks_used, 10);
  EXPECT_EQ(e.s.stats().num_running, 3);
  EXPECT_EQ(e.s.stats().num_aborted, 1);
}

TEST(SchedulerTest, MaxNumSeqsLimitsRunning) {
  FakeEngine e({.max_num_batched_tokens = 100, .max_num_seqs = 2}, 4, 64);
  for (RequestId id = 1; id <= 3; ++id) ASSERT_TRUE(e.Add(id, 4, 2).ok());
  EXPECT_EQ(Ids(e.Step()), (std::vector<RequestId>{1, 2}));
  EXPECT_EQ(Ids(e.Step()), (std::vector<RequestId>{1, 2}));  // both finish here
  EXPECT_EQ(Ids(e.Step()), (std::vector<RequestId>{3}));
}

TEST(SchedulerTest, GrpoChildrenForkFromTheParentAndShareItsPromptBlocks) {
  FakeEngine e({.max_num_batched_tokens = 6, .max_num_seqs = 8}, /*block_size=*/4, 64);
  ASSERT_TRUE(e.Add(10, 10, 5).ok());
  for (RequestId c = 11; c <= 13; ++c) ASSERT_TRUE(e.Add(c, 10, 5, RequestId{10}).ok());
  EXPECT_FALSE(e.Add(14, 9, 5, RequestId{10}).ok());  // another prompt length
  Plan p = e.Step();                                  // chunk [0, 6) of the parent only
  EXPECT_EQ(Ids(p), std::vector<RequestId>{10});
  EXPECT_TRUE(p.seqs[0].forked.empty());
  p = e.Step();  // last chunk [6, 10): the children fork and sample too
  ASSERT_EQ(Ids(p), std::vector<RequestId>{10});
  EXPECT_EQ(p.seqs[0].forked, (std::vector<RequestId>{11, 12, 13}));
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 3);  // the prompt's KV is stored once
  for (BlockId b : p.seqs[0].block_table) EXPECT_EQ(e.s.blocks().ref_count(b), 4);
  EXPECT_EQ(e.s.stats().num_running, 4);
  for (RequestId c = 11; c <= 13; ++c) EXPECT_EQ(e.generated(c), 1);
  // First decodes: the shared, half-full last block is copied for three of the four sequences.
  p = e.Step();
  EXPECT_EQ(Ids(p), (std::vector<RequestId>{10, 11, 12, 13}));
  EXPECT_EQ(p.copies.size(), 3u);
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 6);
  EXPECT_EQ(e.s.blocks().ref_count(p.seqs[0].block_table[0]), 4);
  EXPECT_EQ(e.s.blocks().ref_count(p.seqs[0].block_table[1]), 4);
  // A child added after the prompt was computed is prefilled on its own.
  ASSERT_TRUE(e.Add(15, 10, 2, RequestId{11}).ok());
  p = e.Step();
  ASSERT_EQ(p.seqs.back().id, 15);
  EXPECT_EQ(p.seqs.back().start, 0);
  while (!e.s.idle()) e.Step();
  for (RequestId c = 10; c <= 13; ++c) EXPECT_EQ(e.generated(c), 5);
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 0);
  e.s.CheckInvariants();
}

TEST(SchedulerTest, ChildrenBeyondMaxNumSeqsArePrefilledAlone) {
  FakeEngine e({.max_num_batched_tokens = 64, .max_num_seqs = 2}, 4, 64);
  ASSERT_TRUE(e.Add(1, 8, 3).ok());
  ASSERT_TRUE(e.Add(2, 8, 3, RequestId{1}).ok());
  ASSERT_TRUE(e.Add(3, 8, 3, RequestId{2}).ok());  // hangs off the root, 1
  Plan p = e.Step();
  ASSERT_EQ(Ids(p), std::vector<RequestId>{1});
  EXPECT_EQ(p.seqs[0].forked, std::vector<RequestId>{2});
  while (!e.s.idle()) e.Step();
  EXPECT_EQ(e.generated(3), 3);
}

TEST(SchedulerTest, AbortedParentReleasesItsWaitingChildren) {
  FakeEngine e({.max_num_batched_tokens = 4, .max_num_seqs = 8}, 4, 64);
  ASSERT_TRUE(e.Add(1, 12, 3).ok());
  ASSERT_TRUE(e.Add(2, 12, 3, RequestId{1}).ok());
  EXPECT_EQ(Ids(e.Step()), std::vector<RequestId>{1});
  ASSERT_TRUE(e.s.Abort(1).ok());
  while (!e.s.idle()) e.Step();
  EXPECT_EQ(e.generated(2), 3);
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 0);
}

TEST(SchedulerTest, PreemptionByRecomputeFinishesEveryRequest) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    // 8 blocks of 4 = 32 slots: each request fits alone, all of them together do not.
    FakeEngine e({.max_num_batched_tokens = 16, .max_num_seqs = 8}, 4, 8);
    const int n = 6;
    for (RequestId id = 0; id < n; ++id) {
      const auto prompt = std::uniform_int_distribution<int64_t>(1, 10)(rng);
      const auto max_tokens = std::uniform_int_distribution<int64_t>(5, 33 - prompt)(rng);
      ASSERT_TRUE(e.Add(id, prompt, max_tokens).ok());
    }
    int steps = 0;
    while (!e.s.idle() && steps < 10000) {
      e.Step();
      ++steps;
    }
    ASSERT_TRUE(e.s.idle());
    std::vector<RequestId> done = e.finished_by_length;
    std::sort(done.begin(), done.end());
    EXPECT_EQ(done, (std::vector<RequestId>{0, 1, 2, 3, 4, 5}));
    for (RequestId id = 0; id < n; ++id) EXPECT_EQ(e.generated(id), e.max_tokens(id));
    EXPECT_GT(e.s.stats().num_preemptions, 0);
    EXPECT_GT(e.num_reprefills, 0);  // prompt + generated tokens prefilled again
    EXPECT_EQ(e.s.blocks().num_used_blocks(), 0);
  }
}

TEST(SchedulerTest, RequestLargerThanTheCacheIsRejected) {
  FakeEngine e({.max_num_batched_tokens = 16, .max_num_seqs = 8}, 4, 8);
  ASSERT_TRUE(e.Add(1, 5, 4).ok());
  const Status st = e.Add(2, 30, 4);  // 33 slots: 9 blocks > 8
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(st.message().find("request 2"), std::string::npos) << st;
  EXPECT_NE(st.message().find("9 KV blocks"), std::string::npos) << st;
  EXPECT_NE(st.message().find("8 blocks"), std::string::npos) << st;
  EXPECT_FALSE(e.s.HasRequest(2));
  ASSERT_TRUE(e.Add(3, 30, 3).ok());  // 32 slots: exactly the cache
  while (!e.s.idle()) e.Step();
  EXPECT_EQ(e.generated(1), 4);
  EXPECT_EQ(e.generated(3), 3);
}

TEST(SchedulerTest, ContractErrors) {
  Scheduler s({.max_num_batched_tokens = 16, .max_num_seqs = 8}, 4, 8);
  EXPECT_FALSE((SchedulerConfig{.max_num_batched_tokens = 0, .max_num_seqs = 1}).Validate().ok());
  ASSERT_TRUE(s.Add(1, 4, 2).ok());
  EXPECT_EQ(s.Add(1, 4, 2).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.Add(2, 0, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(2, 4, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(2, 4, 2, RequestId{99}).code(), StatusCode::kNotFound);
  EXPECT_EQ(s.Finish(99).code(), StatusCode::kNotFound);
  EXPECT_EQ(s.OnTokens({}).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.Schedule().ok());
  EXPECT_EQ(s.Schedule().status().code(), StatusCode::kFailedPrecondition);
  const std::vector<RequestId> wrong = {7};
  EXPECT_EQ(s.OnTokens(wrong).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.OnTokens({}).status().code(), StatusCode::kInvalidArgument);  // 1 is missing
  const std::vector<RequestId> right = {1};
  ASSERT_TRUE(s.OnTokens(right).ok());
  EXPECT_EQ(*s.num_generated(1), 1);
  // A request finished between Schedule() and OnTokens() is not reported.
  ASSERT_TRUE(s.Schedule().ok());
  ASSERT_TRUE(s.Finish(1).ok());
  ASSERT_TRUE(s.OnTokens({}).ok());
  EXPECT_TRUE(s.idle());
  s.CheckInvariants();
}

// Requests arrive, stop and abort at random for thousands of steps, in groups or alone.
TEST(SchedulerTest, RandomizedSimulation) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::mt19937 rng(seed);
    auto uni = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    const auto block_size = static_cast<int32_t>(uni(1, 8));
    const auto num_blocks = static_cast<int32_t>(uni(4, 40));
    FakeEngine e({.max_num_batched_tokens = uni(1, 48), .max_num_seqs = uni(1, 12)}, block_size,
                 num_blocks);
    const int64_t capacity = int64_t{block_size} * num_blocks;
    std::map<RequestId, int> arrival_step;
    RequestId next_id = 0;
    int64_t rejected = 0;
    for (int step = 0; step < 3000 || !e.s.idle(); ++step) {
      ASSERT_LT(step, 200000) << "seed " << seed << ": requests starved";
      if (step < 3000 && uni(0, 3) == 0) {
        const int64_t prompt = uni(1, capacity / 2 + 4);
        const int64_t group = uni(1, 4);
        const RequestId root = next_id;
        for (int64_t g = 0; g < group; ++g) {
          const RequestId id = next_id++;
          const Status st = e.Add(id, prompt, uni(1, capacity / 2 + 2),
                                  g == 0 ? std::nullopt : std::optional<RequestId>(root));
          if (st.code() == StatusCode::kResourceExhausted) {
            ++rejected;
            if (g == 0) break;  // the children would have no parent
            continue;
          }
          ASSERT_TRUE(st.ok()) << st;
          arrival_step[id] = step;
        }
      }
      const bool had_requests = !e.s.idle();
      const Plan p = e.Step();
      if (had_requests) {
        ASSERT_FALSE(p.empty()) << "no progress at step " << step;
      }
      // The engine saw a stop string or an abort.
      for (const ScheduledSeq& q : p.seqs) {
        if (q.samples && e.s.HasRequest(q.id) && uni(0, 30) == 0) {
          ASSERT_TRUE(e.s.Finish(q.id).ok());
        }
      }
      if (!arrival_step.empty() && uni(0, 50) == 0) {
        auto it = arrival_step.begin();
        std::advance(it, uni(0, std::ssize(arrival_step) - 1));
        if (e.s.HasRequest(it->first)) {
          ASSERT_TRUE(e.s.Abort(it->first).ok());
        }
      }
      e.s.CheckInvariants();
    }
    const SchedulerStats st = e.s.stats();
    EXPECT_EQ(st.num_running + st.num_waiting, 0);
    EXPECT_EQ(st.num_finished + st.num_aborted, std::ssize(arrival_step)) << "seed " << seed;
    EXPECT_EQ(e.s.blocks().num_used_blocks(), 0);
    EXPECT_EQ(e.s.blocks().num_sequences(), 0);
    for (RequestId id : e.finished_by_length) EXPECT_EQ(e.generated(id), e.max_tokens(id));
    EXPECT_GT(e.num_forks, 0) << "seed " << seed;
    std::printf(
        "seed %u: %zu requests, %lld rejected, %lld preemptions, %lld re-prefills, %lld forks\n",
        seed, arrival_step.size(), static_cast<long long>(rejected),
        static_cast<long long>(st.num_preemptions), static_cast<long long>(e.num_reprefills),
        static_cast<long long>(e.num_forks));
  }
}

}  // namespace
}  // namespace laminar::rollout
