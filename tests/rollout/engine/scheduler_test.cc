// Scheduler: hand cases (chunked prefill, decodes first, admission by free blocks, GRPO forks, the
// prefix cache: reuse, partial matches, weight swaps, eviction), preemption by recompute run to
// completion, a too-large request, contract errors, and randomized simulations driven by a fake
// engine that stamps every KV slot it writes with its tokens and weight version and checks that
// each step reads exactly the KV of its own tokens.
// Kept in one file over ~600 lines: the hand cases and the simulations share the fake engine that
// stamps and checks every KV slot.
#include "rollout/engine/scheduler.h"

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

// A fake engine: KV slots hold stamps (hash of the token ids at positions [0, p], weight version
// the KV was computed under). Reads check that every position a sequence attends to holds the KV of
// its own tokens under the version it was computed under; positions reused from the prefix cache
// must have been computed under the current version. Writes check that a block written this step
// is held only by the writer (and the children it forks this step).
class FakeEngine {
 public:
  FakeEngine(SchedulerConfig config, int32_t block_size, int32_t num_blocks)
      : s(config, block_size, num_blocks),
        block_size_(block_size),
        slots_(static_cast<size_t>(block_size) * static_cast<size_t>(num_blocks)) {}

  // A prompt of `prompt` ids no other request shares (a group child: its parent's prompt).
  Status Add(RequestId id, int64_t prompt, int64_t max_tokens,
             std::optional<RequestId> parent = std::nullopt) {
    std::vector<int32_t> ids;
    if (parent.has_value() && info_.contains(*parent)) {
      const Info& p = info_.at(*parent);
      ids.assign(p.tokens.begin(), p.tokens.begin() + p.prompt);
      ids.resize(static_cast<size_t>(std::max<int64_t>(prompt, 0)));  // a mismatch is an error
    } else {
      for (int64_t i = 0; i < prompt; ++i)
        ids.push_back(static_cast<int32_t>(1000000 + id * 1009 + i));
    }
    return Add(id, std::move(ids), max_tokens, parent);
  }

  Status Add(RequestId id, std::vector<int32_t> prompt_ids, int64_t max_tokens,
             std::optional<RequestId> parent = std::nullopt) {
    Status st = s.Add(id, prompt_ids, max_tokens, parent);
    if (st.ok()) {
      Info in;
      in.prompt = std::ssize(prompt_ids);
      in.max_tokens = max_tokens;
      in.tokens = std::move(prompt_ids);
      info_[id] = std::move(in);
    }
    return st;
  }

  // Between steps, like the engine's weight swap.
  void SetWeightVersion(int64_t version) {
    version_ = version;
    s.mutable_blocks().SetWeightVersion(version);
  }

  // Speculative decoding: every decode asks for 0..max_draft draft tokens and accepts a random
  // number of them (their KV moved into place, the rejected slots scribbled on and released).
  void EnableDrafts(uint32_t seed, int64_t max_draft) {
    draft_rng_.seed(seed);
    max_draft_ = max_draft;
  }

  // Runs one step: schedules, checks the plan, writes and reads KV, reports the sampled tokens.
  // Kept whole: schedule, plan checks, KV writes and reads and token reports are one step of the
  // simulated engine, in the order the real engine runs them.
  Plan Step() {
    auto uni = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(draft_rng_);
    };
    Scheduler::DraftWanted wanted;
    if (max_draft_ > 0) wanted = [&](RequestId) { return uni(0, max_draft_); };
    StatusOr<Plan> plan = s.Schedule(wanted);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) return {};
    for (RequestId id : plan->preempted) {
      info_.at(id).computed = 0;
      info_.at(id).versions.clear();
    }
    int64_t total = 0;
    std::set<RequestId> ids;
    for (const BlockCopy& c : plan->copies) {
      std::copy_n(slots_.begin() + Slot0(c.src), block_size_, slots_.begin() + Slot0(c.dst));
    }
    for (const ScheduledSeq& e : plan->seqs) {
      EXPECT_TRUE(ids.insert(e.id).second) << "request " << e.id << " twice in a plan";
      EXPECT_GE(e.num_tokens, 1);
      total += e.num_tokens;
      Info& in = info_.at(e.id);
      EXPECT_EQ(e.samples, e.start + e.num_tokens - e.num_draft_tokens == in.prompt + in.generated)
          << e.id;
      if (e.num_draft_tokens > 0) {
        ++num_drafted_steps;
        EXPECT_TRUE(e.samples && e.forked.empty() && in.generated > 0) << e.id;
        EXPECT_LT(in.generated + e.num_draft_tokens, in.max_tokens) << e.id;
      }
      EXPECT_GE(std::ssize(e.block_table) * block_size_, e.start + e.num_tokens);
      if (in.computed == 0 && in.generated > 0) ++num_reprefills;
      if (e.start != in.computed) {
        // Only an admission skips positions: those of full prompt blocks found in the cache.
        EXPECT_EQ(in.computed, 0) << e.id;
        EXPECT_EQ(e.start % block_size_, 0) << e.id;
        EXPECT_LT(e.start, in.prompt) << e.id;
        in.versions.assign(static_cast<size_t>(e.start), version_);
        num_reused_tokens += e.start;
        if (in.generated > 0) ++num_reprefill_hits;
      }
      uint64_t h = 0;
      for (int64_t p = 0; p < e.start + e.num_tokens - e.num_draft_tokens; ++p) {
        h = Mix(h, in.tokens.at(static_cast<size_t>(p)));
        if (p < e.start) continue;
        const BlockId b = e.block_table.at(static_cast<size_t>(p / block_size_));
        EXPECT_EQ(s.blocks().ref_count(b), 1 + std::ssize(e.forked))
            << "request " << e.id << " writes position " << p << " into shared block " << b;
        slots_[SlotOf(e.block_table, p)] = {h, version_};
        in.versions.push_back(version_);
      }
      // Draft slots: only this sequence's, written with scribbles the engine would overwrite.
      for (int64_t p = e.start + e.num_tokens - e.num_draft_tokens; p < e.start + e.num_tokens;
           ++p) {
        const BlockId b = e.block_table.at(static_cast<size_t>(p / block_size_));
        EXPECT_EQ(s.blocks().ref_count(b), 1) << "draft slot " << p << " in shared block " << b;
        slots_[SlotOf(e.block_table, p)] = {0xdead, -1};
      }
      in.computed = e.start + e.num_tokens - e.num_draft_tokens;
      for (RequestId c : e.forked) {
        Info& child = info_.at(c);
        EXPECT_TRUE(std::equal(child.tokens.begin(), child.tokens.end(), in.tokens.begin()));
        child.computed = in.computed;
        child.versions = in.versions;
      }
    }
    EXPECT_EQ(total, plan->num_batched_tokens);
    EXPECT_LE(total, s.config().max_num_batched_tokens);
    std::vector<RequestId> sampled;
    for (const ScheduledSeq& e : plan->seqs) {
      const Info& in = info_.at(e.id);
      uint64_t h = 0;
      const int64_t end = e.start + e.num_tokens - e.num_draft_tokens;
      for (int64_t p = 0; p < end; ++p) {  // attention reads [0, end)
        h = Mix(h, in.tokens.at(static_cast<size_t>(p)));
        const Stamp want = {h, in.versions.at(static_cast<size_t>(p))};
        if (slots_[SlotOf(e.block_table, p)] != want) {
          ADD_FAILURE() << "request " << e.id << " reads wrong KV at position " << p;
          break;
        }
      }
      if (e.samples) sampled.push_back(e.id);
      for (RequestId c : e.forked) {
        ++num_forks;
        sampled.push_back(c);
      }
    }
    // Accepted drafts: their K/V moves to the slots of their positions (the table is the same).
    std::vector<int64_t> appended(sampled.size(), 1);
    for (size_t i = 0; i < sampled.size(); ++i) {
      const RequestId id = sampled[i];
      auto e = std::ranges::find(plan->seqs, id, &ScheduledSeq::id);
      if (e == plan->seqs.end() || e->num_draft_tokens == 0) continue;
      Info& in = info_.at(id);
      const int64_t accepted = uni(0, e->num_draft_tokens);
      uint64_t h = 0;
      for (int64_t p = 0; p <= e->start; ++p) h = Mix(h, in.tokens.at(static_cast<size_t>(p)));
      for (int64_t a = 0; a < accepted; ++a) {
        const auto token = static_cast<int32_t>(3000000 + uni(0, 999));
        in.tokens.push_back(token);
        ++in.generated;
        h = Mix(h, token);
        slots_[SlotOf(e->block_table, e->start + 1 + a)] = {h, version_};
        in.versions.push_back(version_);
        ++in.computed;
      }
      appended[i] = accepted + 1;
      num_accepted_drafts += accepted;
    }
    StatusOr<std::vector<RequestId>> done = s.OnTokens(sampled, appended);
    EXPECT_TRUE(done.ok()) << done.status();
    for (RequestId id : sampled) {
      Info& in = info_.at(id);
      in.tokens.push_back(static_cast<int32_t>(2000000 + (id * 31 + in.generated) % 1000));
      ++in.generated;
    }
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
  const std::vector<int32_t>& prompt(RequestId id) const { return info_.at(id).tokens; }

  Scheduler s;
  std::vector<RequestId> finished_by_length;
  int64_t num_reprefills = 0;       // prefills of a preempted request (prompt + generated tokens)
  int64_t num_reprefill_hits = 0;   // of those, ones that reused cached prompt blocks
  int64_t num_forks = 0;            // group children forked from their parent's prompt
  int64_t num_reused_tokens = 0;    // positions skipped at admission (prefix cache hits)
  int64_t num_drafted_steps = 0;    // decodes that verified draft tokens
  int64_t num_accepted_drafts = 0;  // draft tokens accepted

 private:
  using Stamp = std::pair<uint64_t, int64_t>;  // (hash of the ids at [0, p], weight version)
  struct Info {
    int64_t prompt = 0, max_tokens = 0, generated = 0;
    std::vector<int32_t> tokens;    // prompt, then generated
    int64_t computed = 0;           // positions whose KV the sequence holds
    std::vector<int64_t> versions;  // [computed]: the weight version of each position's KV
  };
  static uint64_t Mix(uint64_t h, int32_t token) {  // SplitMix64 step over (h, token)
    uint64_t z = h + 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(token);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::ptrdiff_t Slot0(BlockId b) const { return std::ptrdiff_t{b} * block_size_; }
  size_t SlotOf(const std::vector<BlockId>& table, int64_t p) const {
    return static_cast<size_t>(Slot0(table.at(static_cast<size_t>(p / block_size_))) +
                               p % block_size_);
  }

  int32_t block_size_;
  int64_t version_ = 0;
  std::vector<Stamp> slots_;
  std::map<RequestId, Info> info_;
  std::mt19937 draft_rng_;
  int64_t max_draft_ = 0;
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
  // A child added after the prompt was computed is prefilled on its own, past the two full prompt
  // blocks the parent registered in the prefix cache.
  ASSERT_TRUE(e.Add(15, 10, 2, RequestId{11}).ok());
  p = e.Step();
  ASSERT_EQ(p.seqs.back().id, 15);
  EXPECT_EQ(p.seqs.back().start, 8);
  EXPECT_EQ(p.seqs.back().num_tokens, 2);
  EXPECT_TRUE(p.seqs.back().samples);
  EXPECT_EQ(e.s.stats().num_prompt_tokens_reused, 8);
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
  const std::vector<int32_t> prompt = {5, 6, 7, 8};
  ASSERT_TRUE(s.Add(1, prompt, 2).ok());
  EXPECT_EQ(s.Add(1, prompt, 2).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.Add(2, {}, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(2, prompt, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.Add(2, prompt, 2, RequestId{99}).code(), StatusCode::kNotFound);
  // A group child must have its parent's prompt ids, not just as many.
  const std::vector<int32_t> other = {5, 6, 7, 9};
  const Status differs = s.Add(2, other, 2, RequestId{1});
  EXPECT_EQ(differs.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(differs.message().find("group parent request 1"), std::string::npos) << differs;
  EXPECT_FALSE(s.HasRequest(2));
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

std::vector<int32_t> Iota(int32_t first, int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = first++;
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(SchedulerTest, SamePromptPrefixReusesCachedBlocks) {
  FakeEngine e({.max_num_batched_tokens = 64, .max_num_seqs = 8}, /*block_size=*/4, 64);
  const std::vector<int32_t> a = Iota(100, 13);  // 3 full blocks + 1 token
  ASSERT_TRUE(e.Add(1, a, 4).ok());
  Plan p = e.Step();
  ASSERT_EQ(Ids(p), std::vector<RequestId>{1});
  EXPECT_EQ(p.seqs[0].start, 0);
  const std::vector<BlockId> a_table = p.seqs[0].block_table;
  ASSERT_EQ(a_table.size(), 4u);
  EXPECT_EQ(e.s.stats().num_kv_blocks_cached, 3);  // registered after the step; the partial not
  // Same first 12 tokens, another tail: the 3 full blocks are reused, 3 positions are prefilled.
  const std::vector<int32_t> b = Concat({a.begin(), a.begin() + 12}, {7, 8, 9});
  ASSERT_TRUE(e.Add(2, b, 4).ok());
  p = e.Step();
  ASSERT_EQ(Ids(p), (std::vector<RequestId>{1, 2}));
  const ScheduledSeq& q = p.seqs[1];
  EXPECT_EQ(q.start, 12);
  EXPECT_EQ(q.num_tokens, 3);
  EXPECT_TRUE(q.samples);
  ASSERT_EQ(q.block_table.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(q.block_table[i], a_table[i]);
    EXPECT_EQ(e.s.blocks().ref_count(a_table[i]), 2);
  }
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 5);  // 8 without sharing
  SchedulerStats st = e.s.stats();
  EXPECT_EQ(st.num_prompt_tokens_looked_up, 13 + 15);
  EXPECT_EQ(st.num_prompt_tokens_reused, 12);
  EXPECT_EQ(st.num_kv_blocks_cached, 3);
  while (!e.s.idle()) e.Step();
  // Finished requests leave their cached blocks evictable: free, yet reusable.
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 0);
  EXPECT_EQ(e.s.blocks().num_evictable_blocks(), 3);
  ASSERT_TRUE(e.Add(3, a, 2).ok());
  p = e.Step();
  ASSERT_EQ(Ids(p), std::vector<RequestId>{3});
  EXPECT_EQ(p.seqs[0].start, 12);
  EXPECT_EQ(std::vector<BlockId>(p.seqs[0].block_table.begin(), p.seqs[0].block_table.end() - 1),
            std::vector<BlockId>(a_table.begin(), a_table.end() - 1));
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 4);
  EXPECT_EQ(e.s.blocks().num_evictable_blocks(), 0);
  // A prompt of exactly 3 full blocks reuses 2: its last token is computed, in a fresh block.
  ASSERT_TRUE(e.Add(4, {a.begin(), a.begin() + 12}, 2).ok());
  p = e.Step();
  ASSERT_EQ(Ids(p), (std::vector<RequestId>{3, 4}));
  EXPECT_EQ(p.seqs[1].start, 8);
  EXPECT_EQ(p.seqs[1].num_tokens, 4);
  EXPECT_NE(p.seqs[1].block_table[2], a_table[2]);
  EXPECT_EQ(e.s.stats().num_prompt_tokens_reused, 12 + 12 + 8);
}

TEST(SchedulerTest, DifferentPromptReusesOnlyTheCommonFullBlocks) {
  FakeEngine e({.max_num_batched_tokens = 64, .max_num_seqs = 8}, /*block_size=*/4, 64);
  const std::vector<int32_t> a = Iota(100, 13);
  ASSERT_TRUE(e.Add(1, a, 1).ok());
  e.Step();  // prefilled, registered, finished
  std::vector<int32_t> first_differs = a;
  first_differs[0] = 7;
  std::vector<int32_t> sixth_differs = a;
  sixth_differs[5] = 7;
  ASSERT_TRUE(e.Add(2, first_differs, 1).ok());
  ASSERT_TRUE(e.Add(3, sixth_differs, 1).ok());
  const Plan p = e.Step();
  ASSERT_EQ(Ids(p), (std::vector<RequestId>{2, 3}));
  EXPECT_EQ(p.seqs[0].start, 0);
  EXPECT_EQ(p.seqs[1].start, 4);  // block 0 only: a block's key includes every token before it
  EXPECT_EQ(e.s.stats().num_prompt_tokens_reused, 4);
}

TEST(SchedulerTest, WeightSwapDropsTheCache) {
  FakeEngine e({.max_num_batched_tokens = 8, .max_num_seqs = 8}, /*block_size=*/4, 64);
  const std::vector<int32_t> a = Iota(100, 13);
  ASSERT_TRUE(e.Add(1, a, 2).ok());
  while (!e.s.idle()) e.Step();
  EXPECT_EQ(e.s.stats().num_kv_blocks_cached, 3);
  e.SetWeightVersion(1);  // idle, as the engine swaps
  EXPECT_EQ(e.s.stats().num_kv_blocks_cached, 0);
  EXPECT_EQ(e.s.blocks().num_evictable_blocks(), 0);
  ASSERT_TRUE(e.Add(2, a, 2).ok());
  Plan p = e.Step();
  ASSERT_EQ(Ids(p), std::vector<RequestId>{2});
  EXPECT_EQ(p.seqs[0].start, 0);                   // nothing computed under version 0 is reused
  EXPECT_EQ(e.s.stats().num_kv_blocks_cached, 2);  // positions [0, 8) under version 1
  while (!e.s.idle()) e.Step();
  ASSERT_TRUE(e.Add(3, a, 2).ok());
  p = e.Step();
  EXPECT_EQ(p.seqs[0].start, 12);  // version 1 entries are
  while (!e.s.idle()) e.Step();
  // A swap while a sequence is prefilling: its KV mixes two versions and is never registered.
  e.SetWeightVersion(2);
  const std::vector<int32_t> c = Iota(300, 13);
  ASSERT_TRUE(e.Add(4, c, 2).ok());
  e.Step();  // [0, 8) under version 2
  EXPECT_EQ(e.s.stats().num_kv_blocks_cached, 2);
  e.SetWeightVersion(3);
  e.Step();  // [8, 13) under version 3
  EXPECT_EQ(e.s.stats().num_kv_blocks_cached, 0);
  ASSERT_TRUE(e.Add(5, c, 2).ok());
  p = e.Step();
  ASSERT_EQ(Ids(p), (std::vector<RequestId>{4, 5}));
  EXPECT_EQ(p.seqs[1].start, 0);
  EXPECT_EQ(e.s.stats().num_prompt_tokens_reused, 12);
}

TEST(SchedulerTest, CachedBlocksAreEvictedWhenTheCacheNeedsRoom) {
  FakeEngine e({.max_num_batched_tokens = 64, .max_num_seqs = 8}, /*block_size=*/4, 8);
  ASSERT_TRUE(e.Add(1, 16, 1).ok());
  e.Step();  // prefilled, registered, finished: 4 evictable blocks, 4 plain free ones
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 0);
  EXPECT_EQ(e.s.blocks().num_evictable_blocks(), 4);
  // 29 + 4 - 1 = 32 slots: every block of the pool, the cached ones included.
  ASSERT_TRUE(e.Add(2, 29, 4).ok());
  const Plan p = e.Step();
  ASSERT_EQ(Ids(p), std::vector<RequestId>{2});
  EXPECT_EQ(p.seqs[0].num_tokens, 29);
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 8);
  EXPECT_EQ(e.s.stats().num_kv_blocks_cached, 7);  // request 2's full prompt blocks only
  while (!e.s.idle()) e.Step();
  ASSERT_TRUE(
      e.Add(3, std::vector<int32_t>(e.prompt(1).begin(), e.prompt(1).begin() + 16), 1).ok());
  EXPECT_EQ(e.Step().seqs.at(0).start, 0);  // request 1's blocks were evicted
  EXPECT_EQ(e.s.stats().num_prompt_tokens_reused, 0);
}

struct SimTotals {
  int64_t reused_tokens = 0;
  int64_t reprefill_hits = 0;
};

// Requests arrive, stop and abort at random for thousands of steps, in groups or alone. With
// `share_prefixes`, prompts start with random lengths of a few base prompts and the weights are
// swapped at random between steps (also while sequences run).
// Kept whole: one random event loop (arrivals, stops, aborts, weight swaps) over shared state.
void Simulate(uint32_t seed, bool share_prefixes, SimTotals* totals, int64_t max_draft = 0) {
  std::mt19937 rng(seed);
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const auto block_size = static_cast<int32_t>(uni(1, 8));
  const auto num_blocks = static_cast<int32_t>(uni(4, 40));
  FakeEngine e({.max_num_batched_tokens = uni(1, 48), .max_num_seqs = uni(1, 12)}, block_size,
               num_blocks);
  if (max_draft > 0) e.EnableDrafts(seed, max_draft);
  const int64_t capacity = int64_t{block_size} * num_blocks;
  std::vector<std::vector<int32_t>> bases(3);
  for (auto& b : bases) {
    for (int64_t i = 0; i < capacity; ++i) b.push_back(static_cast<int32_t>(uni(0, 3)));
  }
  std::map<RequestId, int> arrival_step;
  RequestId next_id = 0;
  int64_t rejected = 0;
  int64_t version = 0;
  for (int step = 0; step < 3000 || !e.s.idle(); ++step) {
    ASSERT_LT(step, 200000) << "seed " << seed << ": requests starved";
    if (step < 3000 && uni(0, 3) == 0) {
      const int64_t prompt = uni(1, capacity / 2 + 4);
      std::vector<int32_t> ids;
      if (share_prefixes) {
        const auto& base = bases[static_cast<size_t>(uni(0, 2))];
        ids.assign(base.begin(), base.begin() + uni(0, prompt));
        while (std::ssize(ids) < prompt) ids.push_back(static_cast<int32_t>(uni(4, 7)));
      }
      const int64_t group = uni(1, 4);
      const RequestId root = next_id;
      for (int64_t g = 0; g < group; ++g) {
        const RequestId id = next_id++;
        const int64_t max_tokens = uni(1, capacity / 2 + 2);
        const std::optional<RequestId> parent =
            g == 0 ? std::nullopt : std::optional<RequestId>(root);
        const Status st = share_prefixes ? e.Add(id, ids, max_tokens, parent)
                                         : e.Add(id, prompt, max_tokens, parent);
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
    if (share_prefixes && uni(0, 300) == 0) e.SetWeightVersion(++version);
    e.s.CheckInvariants();
  }
  const SchedulerStats st = e.s.stats();
  EXPECT_EQ(st.num_running + st.num_waiting, 0);
  EXPECT_EQ(st.num_finished + st.num_aborted, std::ssize(arrival_step)) << "seed " << seed;
  EXPECT_EQ(e.s.blocks().num_used_blocks(), 0);
  EXPECT_EQ(e.s.blocks().num_sequences(), 0);
  for (RequestId id : e.finished_by_length) EXPECT_EQ(e.generated(id), e.max_tokens(id));
  EXPECT_GT(e.num_forks, 0) << "seed " << seed;
  EXPECT_EQ(st.num_prompt_tokens_reused, e.num_reused_tokens) << "seed " << seed;
  EXPECT_LE(st.num_prompt_tokens_reused, st.num_prompt_tokens_looked_up) << "seed " << seed;
  if (share_prefixes) {
    EXPECT_GT(e.num_reused_tokens, 0) << "seed " << seed;
  }
  if (max_draft > 0) {
    EXPECT_GT(e.num_accepted_drafts, 0) << "seed " << seed;
  }
  totals->reused_tokens += e.num_reused_tokens;
  totals->reprefill_hits += e.num_reprefill_hits;
  std::printf(
      "seed %u: %zu requests, %lld rejected, %lld preemptions, %lld re-prefills (%lld reusing "
      "cached blocks), %lld forks, %lld of %lld prompt tokens reused, %lld weight swaps\n",
      seed, arrival_step.size(), static_cast<long long>(rejected),
      static_cast<long long>(st.num_preemptions), static_cast<long long>(e.num_reprefills),
      static_cast<long long>(e.num_reprefill_hits), static_cast<long long>(e.num_forks),
      static_cast<long long>(st.num_prompt_tokens_reused),
      static_cast<long long>(st.num_prompt_tokens_looked_up), static_cast<long long>(version));
}

TEST(SchedulerTest, RandomizedSimulation) {
  SimTotals totals;
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    Simulate(seed, /*share_prefixes=*/false, &totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Group children prefilled on their own and preempted requests still hit the cache.
  EXPECT_GT(totals.reused_tokens, 0);
}

TEST(SchedulerTest, RandomizedSimulationWithSharedPrefixesAndWeightSwaps) {
  SimTotals totals;
  for (uint32_t seed = 11; seed <= 15; ++seed) {
    Simulate(seed, /*share_prefixes=*/true, &totals);
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(totals.reprefill_hits, 0);  // preempted requests reused their own prompt blocks
}

// Speculative decoding's many random accept/reject patterns: every step reads exactly its own KV,
// no block leaks (all free at the end), drafts never preempt.
TEST(SchedulerTest, RandomizedSimulationWithDraftTokens) {
  SimTotals totals;
  for (uint32_t seed : {21u, 22u, 23u, 25u, 26u, 28u}) {
    Simulate(seed, /*share_prefixes=*/seed % 2 == 0, &totals, /*max_draft=*/6);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(SchedulerTest, DraftTokensUseTheLeftoverBudgetAndAreReleased) {
  FakeEngine e({.max_num_batched_tokens = 6, .max_num_seqs = 4}, /*block_size=*/4, 64);
  ASSERT_TRUE(e.Add(1, 3, 20).ok());
  ASSERT_TRUE(e.Add(2, 3, 20).ok());
  e.Step();  // both prefills
  const auto want4 = [](RequestId) { return int64_t{4}; };
  StatusOr<Plan> p = e.s.Schedule(want4);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->seqs.size(), 2u);
  // Two decodes take 2 of 6; request 1 gets the 4 left, request 2 none.
  EXPECT_EQ(p->seqs[0].num_draft_tokens, 4);
  EXPECT_EQ(p->seqs[0].num_tokens, 5);
  EXPECT_EQ(p->seqs[1].num_draft_tokens, 0);
  EXPECT_EQ(p->num_batched_tokens, 6);
  EXPECT_EQ(*e.s.blocks().num_tokens(1), 3 + 1 + 4);
  const std::vector<RequestId> ids = {1, 2};
  // Too many tokens for request 1 (at most 5) or 2 (at most 1): refused, nothing changes.
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{6, 1}, {2, 2}, {0, 1}}) {
    EXPECT_EQ(e.s.OnTokens(ids, bad).status().code(), StatusCode::kInvalidArgument);
  }
  const std::vector<int64_t> appended = {3, 1};  // 2 drafts accepted + 1 sampled
  ASSERT_TRUE(e.s.OnTokens(ids, appended).ok());
  EXPECT_EQ(*e.s.num_generated(1), 1 + 3);
  EXPECT_EQ(*e.s.blocks().num_tokens(1), 3 + 1 + 2);  // the 2 rejected slots given back
  EXPECT_EQ(*e.s.blocks().num_blocks(1), 2);
  e.s.CheckInvariants();
  // Drafts stop one short of max_tokens: 20 - 4 - 1 = 15 at most.
  const auto want99 = [](RequestId) { return int64_t{99}; };
  p = e.s.Schedule(want99);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->seqs[0].num_draft_tokens, 4);  // the budget still binds
}

}  // namespace
}  // namespace laminar::rollout
