// KvBlockManager: hand examples (block boundaries, fork and copy-on-write, free), GRPO group
// prefix sharing, the version-keyed prefix cache, running out of blocks, and a randomized test
// against a std::map model that tracks which logical KV each physical slot holds.
// Kept in one file over ~600 lines: the hand examples and the randomized test share the std::map
// model of which logical KV each slot holds.
#include "rollout/engine/kv_block_manager.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <vector>

namespace laminar::rollout {
namespace {

std::vector<BlockId> Table(const KvBlockManager& m, SeqId seq) {
  auto t = m.block_table(seq);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return {};
  return {t->begin(), t->end()};
}

std::vector<int32_t> Iota(int32_t n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Everything observable about the manager for a set of sequence ids, to assert "nothing changed".
struct Observed {
  int32_t free = 0, evictable = 0, cached = 0;
  std::vector<int32_t> refs;
  std::map<SeqId, std::pair<std::vector<BlockId>, int64_t>> seqs;
  bool operator==(const Observed&) const = default;
};

Observed Observe(const KvBlockManager& m, const std::vector<SeqId>& ids) {
  Observed o{.free = m.num_free_blocks(),
             .evictable = m.num_evictable_blocks(),
             .cached = m.num_cached_blocks(),
             .refs = {},
             .seqs = {}};
  for (BlockId b = 0; b < m.num_total_blocks(); ++b) o.refs.push_back(m.ref_count(b));
  for (SeqId s : ids) {
    if (m.HasSequence(s)) o.seqs[s] = {Table(m, s), *m.num_tokens(s)};
  }
  return o;
}

TEST(KvBlockManagerTest, AllocationAcrossBlockBoundaries) {
  KvBlockManager m(/*block_size=*/4, /*num_blocks=*/8);
  EXPECT_EQ(m.token_capacity(), 32);
  ASSERT_TRUE(m.Allocate(1, 5).ok());
  EXPECT_EQ(Table(m, 1), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(*m.num_blocks(1), 2);
  EXPECT_EQ(*m.num_tokens(1), 5);
  EXPECT_EQ(m.num_used_blocks(), 2);
  EXPECT_EQ(m.num_free_blocks(), 6);
  EXPECT_EQ(m.free_token_capacity(), 24);

  EXPECT_EQ(*m.BlocksToAppend(1, 3), 0);  // fills block 1 exactly
  auto copies = m.Append(1, 3);
  ASSERT_TRUE(copies.ok()) << copies.status();
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(Table(m, 1), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(*m.BlocksToAppend(1, 1), 1);  // the next token opens block 2
  ASSERT_TRUE(m.Append(1, 1).ok());
  EXPECT_EQ(Table(m, 1), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(*m.num_tokens(1), 9);

  ASSERT_TRUE(m.Allocate(2, 0).ok());  // an empty prompt holds no block
  EXPECT_EQ(*m.num_blocks(2), 0);
  EXPECT_EQ(*m.BlocksToAppend(2, 9), 3);
  ASSERT_TRUE(m.Append(2, 4).ok());
  EXPECT_EQ(Table(m, 2), (std::vector<BlockId>{3}));
  EXPECT_EQ(m.num_used_blocks(), 4);
  m.CheckInvariants();

  ASSERT_TRUE(m.Free(1).ok());
  EXPECT_FALSE(m.HasSequence(1));
  EXPECT_EQ(m.num_used_blocks(), 1);
  EXPECT_EQ(m.num_free_blocks(), 7);
  for (BlockId b : {0, 1, 2}) EXPECT_EQ(m.ref_count(b), 0);
  ASSERT_TRUE(m.Allocate(3, 4).ok());  // freed blocks are handed out again
  EXPECT_EQ(Table(m, 3), (std::vector<BlockId>{0}));
  m.CheckInvariants();
}

TEST(KvBlockManagerTest, ForkSharesBlocksAndCopiesAPartialLastBlockOnWrite) {
  KvBlockManager m(4, 8);
  ASSERT_TRUE(m.Allocate(1, 6).ok());  // blocks 0 (full) and 1 (2 of 4 slots)
  ASSERT_TRUE(m.Fork(1, 2).ok());
  EXPECT_EQ(Table(m, 2), (std::vector<BlockId>{0, 1}));
  EXPECT_EQ(*m.num_tokens(2), 6);
  EXPECT_EQ(m.ref_count(0), 2);
  EXPECT_EQ(m.ref_count(1), 2);
  EXPECT_EQ(m.num_used_blocks(), 2);

  EXPECT_EQ(*m.BlocksToAppend(2, 1), 1);  // the copy
  auto copies = m.Append(2, 1);
  ASSERT_TRUE(copies.ok()) << copies.status();
  EXPECT_EQ(*copies, (std::vector<BlockCopy>{{.src = 1, .dst = 2}}));
  EXPECT_EQ(Table(m, 2), (std::vector<BlockId>{0, 2}));
  EXPECT_EQ(m.ref_count(0), 2);  // full: stays shared
  EXPECT_EQ(m.ref_count(1), 1);
  EXPECT_EQ(m.ref_count(2), 1);

  // The parent is now the only holder of block 1 and writes in place.
  EXPECT_EQ(*m.BlocksToAppend(1, 1), 0);
  copies = m.Append(1, 3);  // 9 tokens: fills block 1, opens a new one
  ASSERT_TRUE(copies.ok());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(Table(m, 1), (std::vector<BlockId>{0, 1, 3}));

  ASSERT_TRUE(m.Fork(1, 3).ok());
  copies = m.Append(3, 3);
  ASSERT_TRUE(copies.ok());
  EXPECT_EQ(*copies, (std::vector<BlockCopy>{{.src = 3, .dst = 4}}));
  EXPECT_EQ(Table(m, 3), (std::vector<BlockId>{0, 1, 4}));
  EXPECT_EQ(m.ref_count(0), 3);
  EXPECT_EQ(m.ref_count(1), 2);

  // A fork at a block boundary shares only full blocks: appending never copies.
  ASSERT_TRUE(m.Allocate(10, 4).ok());  // block 5
  ASSERT_TRUE(m.Fork(10, 11).ok());
  copies = m.Append(11, 1);
  ASSERT_TRUE(copies.ok());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(Table(m, 11), (std::vector<BlockId>{5, 6}));
  EXPECT_EQ(m.ref_count(5), 2);
  // Appending zero tokens is a no-op, even on a shared partial block.
  ASSERT_TRUE(m.Fork(11, 12).ok());
  copies = m.Append(12, 0);
  ASSERT_TRUE(copies.ok());
  EXPECT_TRUE(copies->empty());
  EXPECT_EQ(m.ref_count(6), 2);
  m.CheckInvariants();

  // Freeing drops references; a block returns to the free list when its last holder goes.
  EXPECT_EQ(m.num_used_blocks(), 7);
  ASSERT_TRUE(m.Free(1).ok());
  EXPECT_EQ(m.num_used_blocks(), 6);  // block 3 was only sequence 1's
  EXPECT_EQ(m.ref_count(3), 0);
  EXPECT_EQ(m.ref_count(0), 2);
  EXPECT_EQ(m.ref_count(1), 1);
  ASSERT_TRUE(m.Free(2).ok());
  ASSERT_TRUE(m.Free(3).ok());
  ASSERT_TRUE(m.Free(10).ok());
  ASSERT_TRUE(m.Free(11).ok());
  ASSERT_TRUE(m.Free(12).ok());
  EXPECT_EQ(m.num_free_blocks(), 8);
  EXPECT_EQ(m.num_used_blocks(), 0);
  EXPECT_EQ(m.num_sequences(), 0);
  m.CheckInvariants();
}

TEST(KvBlockManagerTest, ErrorsNameTheSequenceAndChangeNothing) {
  KvBlockManager m(4, 8);
  ASSERT_TRUE(m.Allocate(1, 6).ok());
  ASSERT_TRUE(m.Allocate(2, 3).ok());
  const Observed before = Observe(m, {1, 2, 7, 99, 100});

  Status st = m.Fork(1, 2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sequence 2"), std::string::npos) << st;
  st = m.Fork(99, 100);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("sequence 99"), std::string::npos) << st;
  EXPECT_EQ(m.Allocate(1, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Allocate(7, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.AllocatePrompt(2, Iota(3)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Append(99, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.Append(1, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Free(99).code(), StatusCode::kNotFound);
  EXPECT_EQ(m.RegisterPrefix(99, {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.RegisterPrefix(1, Iota(7)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.num_tokens(99).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.num_blocks(99).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.block_table(99).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(m.CanAppend(99, 1));
  EXPECT_FALSE(m.CanAppend(1, -1));
  EXPECT_FALSE(m.CanAllocate(-1));
  EXPECT_EQ(Observe(m, {1, 2, 7, 99, 100}), before);
  m.CheckInvariants();
  // A freed id is unknown afterwards: no double free.
  ASSERT_TRUE(m.Free(2).ok());
  EXPECT_EQ(m.Free(2).code(), StatusCode::kNotFound);
  m.CheckInvariants();
}

TEST(KvBlockManagerTest, RunningOutOfBlocksIsResourceExhaustedAndChangesNothing) {
  KvBlockManager m(4, 3);
  EXPECT_TRUE(m.CanAllocate(12));
  EXPECT_FALSE(m.CanAllocate(13));
  Status st = m.Allocate(1, 13);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
  EXPECT_NE(st.message().find("sequence 1"), std::string::npos) << st;
  EXPECT_FALSE(m.HasSequence(1));
  EXPECT_EQ(m.num_free_blocks(), 3);

  ASSERT_TRUE(m.Allocate(1, 6).ok());  // blocks 0, 1
  ASSERT_TRUE(m.Allocate(3, 4).ok());  // block 2: the pool is full
  ASSERT_TRUE(m.Fork(1, 2).ok());      // forking takes no block
  EXPECT_EQ(m.num_free_blocks(), 0);
  const std::vector<SeqId> ids = {1, 2, 3, 4};
  const Observed before = Observe(m, ids);

  // Copy-on-write needs a block too.
  EXPECT_EQ(*m.BlocksToAppend(2, 1), 1);
  EXPECT_FALSE(m.CanAppend(2, 1));
  auto copies = m.Append(2, 1);
  EXPECT_EQ(copies.status().code(), StatusCode::kResourceExhausted) << copies.status();
  EXPECT_EQ(m.Append(3, 1).status().code(), StatusCode::kResourceExhausted);
  EXPECT_FALSE(m.CanAllocate(1));
  EXPECT_TRUE(m.CanAllocate(0));
  EXPECT_EQ(m.Allocate(4, 1).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.AllocatePrompt(4, Iota(2)).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Observe(m, ids), before);
  m.CheckInvariants();

  // Once a holder goes, the survivor owns the partial block and writes in place.
  ASSERT_TRUE(m.Free(1).ok());
  EXPECT_TRUE(m.CanAppend(2, 2));
  copies = m.Append(2, 2);
  ASSERT_TRUE(copies.ok()) << copies.status();
  EXPECT_TRUE(copies->empty());
  m.CheckInvariants();
}

TEST(KvBlockManagerTest, GrpoGroupStoresThePromptOnce) {
  constexpr int32_t kBlock = 16, kPrompt = 100, kSamples = 8;
  KvBlockManager m(kBlock, 64);
  const std::vector<int32_t> prompt = Iota(kPrompt, 1000);
  auto cached = m.AllocatePrompt(/*seq=*/100, prompt);
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(*cached, 0);
  const std::vector<BlockId> prompt_table = Table(m, 100);
  ASSERT_EQ(prompt_table.size(), 7u);  // 6 full blocks and 4 tokens in the 7th
  for (SeqId s = 0; s < kSamples; ++s) ASSERT_TRUE(m.Fork(100, s).ok());
  ASSERT_TRUE(m.Free(100).ok());
  EXPECT_EQ(m.num_used_blocks(), 7);  // n samples, one copy of the prompt
  for (BlockId b : prompt_table) EXPECT_EQ(m.ref_count(b), kSamples);

  // First decode token: each sample but the last copies the shared partial block; the last is then
  // its only holder and writes in place.
  const BlockId partial = prompt_table.back();
  std::set<BlockId> partial_blocks;
  for (SeqId s = 0; s < kSamples; ++s) {
    auto copies = m.Append(s, 1);
    ASSERT_TRUE(copies.ok()) << copies.status();
    const std::vector<BlockId> t = Table(m, s);
    ASSERT_EQ(t.size(), 7u);
    EXPECT_TRUE(std::equal(t.begin(), t.begin() + 6, prompt_table.begin()));  // full: shared
    if (s < kSamples - 1) {
      ASSERT_EQ(copies->size(), 1u) << "sample " << s;
      EXPECT_EQ((*copies)[0].src, partial);
      EXPECT_EQ((*copies)[0].dst, t.back());
      EXPECT_NE(t.back(), partial);
    } else {
      EXPECT_TRUE(copies->empty());
      EXPECT_EQ(t.back(), partial);
    }
    partial_blocks.insert(t.back());
  }
  EXPECT_EQ(partial_blocks.size(), static_cast<size_t>(kSamples));
  EXPECT_EQ(m.num_used_blocks(), 6 + kSamples);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(m.ref_count(prompt_table[i]), kSamples);

  // Later tokens never copy: 11 more fill each sample's own block, the next opens one more each.
  for (SeqId s = 0; s < kSamples; ++s) {
    auto copies = m.Append(s, 11);
    ASSERT_TRUE(copies.ok());
    EXPECT_TRUE(copies->empty());
  }
  EXPECT_EQ(m.num_used_blocks(), 6 + kSamples);
  for (SeqId s = 0; s < kSamples; ++s) ASSERT_TRUE(m.Append(s, 1).ok());
  EXPECT_EQ(m.num_used_blocks(), 6 + 2 * kSamples);  // without sharing: 8 * 8 = 64
  m.CheckInvariants();
}

TEST(KvBlockManagerTest, PrefixCacheReusesBlocksOnlyUnderTheSameVersion) {
  KvBlockManager m(4, 16, /*weight_version=*/7);
  const std::vector<int32_t> prompt = Iota(10, 50);  // 2 full blocks + 2 tokens
  ASSERT_EQ(*m.AllocatePrompt(1, prompt), 0);
  EXPECT_EQ(*m.sequence_version(1), 7);
  EXPECT_EQ(*m.RegisterPrefix(1, prompt), 2);
  EXPECT_EQ(*m.RegisterPrefix(1, prompt), 0);  // idempotent
  EXPECT_EQ(m.num_cached_blocks(), 2);
  EXPECT_EQ(m.RegisterPrefix(1, Iota(10, 51)).status().code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(m.BlocksToAllocatePrompt(prompt), 1);
  ASSERT_EQ(*m.AllocatePrompt(2, prompt), 8);
  const std::vector<BlockId> t1 = Table(m, 1), t2 = Table(m, 2);
  EXPECT_EQ(t2[0], t1[0]);
  EXPECT_EQ(t2[1], t1[1]);
  EXPECT_NE(t2[2], t1[2]);
  EXPECT_EQ(m.ref_count(t1[0]), 2);
  EXPECT_EQ(m.num_used_blocks(), 4);

  // A prompt sharing only the first block reuses only it; another first block reuses nothing.
  std::vector<int32_t> other = prompt;
  other[5] = -1;
  ASSERT_EQ(*m.AllocatePrompt(3, other), 4);
  EXPECT_EQ(Table(m, 3)[0], t1[0]);
  other[0] = -1;
  ASSERT_EQ(*m.AllocatePrompt(4, other), 0);
  // A fully cached prompt leaves its last block to compute (its logits start the decode).
  ASSERT_EQ(*m.AllocatePrompt(5, std::vector<int32_t>(prompt.begin(), prompt.begin() + 8)), 4);
  ASSERT_EQ(*m.AllocatePrompt(6, std::vector<int32_t>(prompt.begin(), prompt.begin() + 9)), 8);
  m.CheckInvariants();

  // Freed cached blocks stay cached (evictable) and are reused, counted as free meanwhile.
  for (SeqId s = 1; s <= 6; ++s) ASSERT_TRUE(m.Free(s).ok());
  EXPECT_EQ(m.num_free_blocks(), 16);
  EXPECT_EQ(m.num_evictable_blocks(), 2);
  EXPECT_EQ(m.BlocksToAllocatePrompt(prompt), 3);  // the two hits leave the free set too
  ASSERT_EQ(*m.AllocatePrompt(7, prompt), 8);
  EXPECT_EQ(Table(m, 7)[0], t1[0]);
  EXPECT_EQ(m.num_evictable_blocks(), 0);
  ASSERT_TRUE(m.Free(7).ok());
  m.CheckInvariants();

  // A new weight version: nothing computed under version 7 is returned any more.
  m.SetWeightVersion(8);
  EXPECT_EQ(m.num_cached_blocks(), 0);
  EXPECT_EQ(m.num_evictable_blocks(), 0);
  EXPECT_EQ(m.num_free_blocks(), 16);
  ASSERT_EQ(*m.AllocatePrompt(8, prompt), 0);
  m.CheckInvariants();

  // A sequence computed under version 8 cannot register under version 9, and what it registered
  // under 8 is gone after the switch, even when switching back to 8.
  EXPECT_EQ(*m.RegisterPrefix(8, prompt), 2);
  m.SetWeightVersion(9);
  Status st = m.RegisterPrefix(8, prompt).status();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st;
  ASSERT_EQ(*m.AllocatePrompt(9, prompt), 0);
  m.SetWeightVersion(8);
  ASSERT_EQ(*m.AllocatePrompt(10, prompt), 0);
  EXPECT_EQ(*m.RegisterPrefix(8, prompt), 2);  // same version again: allowed
  ASSERT_EQ(*m.AllocatePrompt(11, prompt), 8);
  m.CheckInvariants();
}

TEST(KvBlockManagerTest, EvictionTakesPlainFreeBlocksFirstThenTheLeastRecentTail) {
  KvBlockManager m(4, 4);
  const std::vector<int32_t> prompt = Iota(9);
  ASSERT_EQ(*m.AllocatePrompt(1, prompt), 0);
  const std::vector<BlockId> t = Table(m, 1);
  ASSERT_EQ(*m.RegisterPrefix(1, prompt), 2);
  ASSERT_TRUE(m.Free(1).ok());
  EXPECT_EQ(m.num_evictable_blocks(), 2);

  // 3 blocks: the 2 plain free ones, then the cached tail block t[1]; t[0] stays cached.
  ASSERT_TRUE(m.Allocate(2, 12).ok());
  std::vector<BlockId> t2 = Table(m, 2);
  EXPECT_EQ(std::count(t2.begin(), t2.end(), t[1]), 1);
  EXPECT_EQ(std::count(t2.begin(), t2.end(), t[0]), 0);
  EXPECT_EQ(m.num_cached_blocks(), 1);
  EXPECT_EQ(m.BlocksToAllocatePrompt(prompt), 3);  // 1 hit (evictable) + 2 new
  EXPECT_EQ(m.AllocatePrompt(3, prompt).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(m.num_cached_blocks(), 1);
  ASSERT_TRUE(m.Free(2).ok());
  ASSERT_EQ(*m.AllocatePrompt(3, prompt), 4);
  EXPECT_EQ(Table(m, 3)[0], t[0]);
  m.CheckInvariants();
}

TEST(KvBlockManagerTest, AllocatePromptPinsItsHitsBeforeTakingFreshBlocks) {
  KvBlockManager m(4, 3);
  const std::vector<int32_t> p = Iota(5, 10), q = Iota(4, 20);
  ASSERT_EQ(*m.AllocatePrompt(1, p), 0);  // blocks 0, 1
  ASSERT_EQ(*m.RegisterPrefix(1, p), 1);
  ASSERT_EQ(*m.AllocatePrompt(2, q), 0);  // block 2
  ASSERT_EQ(*m.RegisterPrefix(2, q), 1);
  ASSERT_TRUE(m.Free(1).ok());         // block 0 evictable (oldest), block 1 plain free
  ASSERT_TRUE(m.Free(2).ok());         // block 2 evictable
  ASSERT_TRUE(m.Allocate(3, 4).ok());  // takes block 1: only evictable blocks are left
  // The hit (block 0) is the least recently freed block, yet it must not be evicted for the
  // fresh block of the same prompt: block 2 is.
  ASSERT_EQ(m.BlocksToAllocatePrompt(p), 2);
  ASSERT_EQ(*m.AllocatePrompt(4, p), 4);
  EXPECT_EQ(Table(m, 4), (std::vector<BlockId>{0, 2}));
  EXPECT_EQ(m.num_cached_blocks(), 1);
  m.CheckInvariants();
}

TEST(KvBlockManagerTest, ReRegisteringAfterTheParentEntryWasEvictedRekeysTheBlock) {
  KvBlockManager m(4, 6);
  const std::vector<int32_t> tokens = Iota(8, 30);
  ASSERT_TRUE(m.Allocate(1, 8).ok());  // blocks 0, 1
  ASSERT_EQ(*m.RegisterPrefix(1, std::span(tokens).first(4)), 1);
  ASSERT_TRUE(m.Allocate(2, 8).ok());  // blocks 2, 3: same tokens, computed again
  // Block 2 duplicates block 0 (not registered twice); block 3 is registered under block 0's entry.
  ASSERT_EQ(*m.RegisterPrefix(2, tokens), 1);
  ASSERT_TRUE(m.Free(1).ok());
  ASSERT_TRUE(m.Allocate(3, 16).ok());  // evicts block 0, orphaning block 3's entry
  EXPECT_EQ(m.num_cached_blocks(), 1);
  ASSERT_EQ(*m.RegisterPrefix(2, tokens), 2);
  ASSERT_TRUE(m.Free(3).ok());
  std::vector<int32_t> prompt = tokens;
  prompt.push_back(0);
  ASSERT_EQ(*m.AllocatePrompt(4, prompt), 8);
  EXPECT_EQ(Table(m, 4), (std::vector<BlockId>{2, 3, Table(m, 4)[2]}));
  m.CheckInvariants();
}

// ---- randomized test against a model ----

// The model: per sequence its token ids, version and expected block table; per physical slot the
// logical KV it holds. The logical KV at position i of a sequence is an interned id of
// (version, tokens[0..i]), so equal ids mean equal KV, and a cache hit is right only if the
// slot holds exactly the id the sequence expects.
class Model {
 public:
  Model(int32_t block_size, int32_t num_blocks)
      : bs_(block_size),
        slots_(static_cast<size_t>(num_blocks),
               std::vector<int64_t>(static_cast<size_t>(bs_), -1)) {}

  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int64_t> kv;  // expected logical KV per position
    std::vector<BlockId> table;
    int64_t version = 0;
  };
  std::map<SeqId, Seq> seqs;

  int64_t Intern(int64_t version, int64_t parent, int32_t token) {
    auto [it, inserted] =
        ids_.try_emplace({version, parent, token}, static_cast<int64_t>(ids_.size()));
    return it->second;
  }
  // Number of model tables holding `b`.
  int32_t Holders(BlockId b) const {
    int32_t n = 0;
    for (const auto& [id, s] : seqs)
      n += static_cast<int32_t>(std::count(s.table.begin(), s.table.end(), b));
    return n;
  }
  // Extends `s` by `tokens`, expecting `s.table` to be current; writes positions >= `from` into
  // the physical slots, checking that nobody else holds the written block.
  void Extend(const KvBlockManager& m, Seq& s, const std::vector<int32_t>& tokens, size_t from) {
    for (int32_t t : tokens) {
      s.kv.push_back(Intern(s.version, s.kv.empty() ? -1 : s.kv.back(), t));
      s.tokens.push_back(t);
    }
    for (size_t i = from; i < s.tokens.size(); ++i) {
      const BlockId b = s.table[i / static_cast<size_t>(bs_)];
      ASSERT_EQ(m.ref_count(b), 1) << "write into shared block " << b;
      ASSERT_EQ(Holders(b), 1) << "write into shared block " << b;
      slots_[static_cast<size_t>(b)][i % static_cast<size_t>(bs_)] = s.kv[i];
    }
  }
  void Copy(BlockCopy c) {
    slots_[static_cast<size_t>(c.dst)] = slots_[static_cast<size_t>(c.src)];
  }
  int64_t Slot(BlockId b, size_t i) const {
    return slots_[static_cast<size_t>(b)][i % static_cast<size_t>(bs_)];
  }

  // Everything the model knows against the manager.
  void Check(const KvBlockManager& m) const {
    m.CheckInvariants();
    ASSERT_EQ(m.num_free_blocks() + m.num_used_blocks(), m.num_total_blocks());
    ASSERT_EQ(m.num_sequences(), static_cast<int64_t>(seqs.size()));
    std::map<BlockId, int32_t> refs;
    for (const auto& [id, s] : seqs) {
      ASSERT_EQ(Table(m, id), s.table) << "sequence " << id;
      ASSERT_EQ(*m.num_tokens(id), static_cast<int64_t>(s.tokens.size()));
      ASSERT_EQ(*m.sequence_version(id), s.version);
      for (BlockId b : s.table) ++refs[b];
      for (size_t i = 0; i < s.kv.size(); ++i) {
        ASSERT_EQ(Slot(s.table[i / static_cast<size_t>(bs_)], i), s.kv[i])
            << "sequence " << id << " position " << i;
      }
    }
    ASSERT_EQ(m.num_used_blocks(), static_cast<int32_t>(refs.size()));
    for (BlockId b = 0; b < m.num_total_blocks(); ++b) {
      auto it = refs.find(b);
      ASSERT_EQ(m.ref_count(b), it == refs.end() ? 0 : it->second) << "block " << b;
    }
  }

 private:
  int32_t bs_;
  std::vector<std::vector<int64_t>> slots_;
  std::map<std::tuple<int64_t, int64_t, int32_t>, int64_t> ids_;
};

// Kept whole: one random operation stream checked against the model after every step; split,
// the cases would share the generator and the model through arguments.
void RunRandomOps(uint64_t seed, int num_ops) {
  constexpr int32_t kBlock = 4, kBlocks = 64;
  KvBlockManager m(kBlock, kBlocks);
  Model model(kBlock, kBlocks);
  std::mt19937_64 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  auto tokens_of = [&](int64_t n) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(uniform(0, 2)));
    return t;
  };
  // A few shared prompt stems so that prefix-cache hits are common.
  std::vector<std::vector<int32_t>> stems = {tokens_of(20), tokens_of(20), tokens_of(20)};
  auto random_seq = [&]() -> SeqId {
    auto it = model.seqs.begin();
    std::advance(it, uniform(0, static_cast<int64_t>(model.seqs.size()) - 1));
    return it->first;
  };
  SeqId next_id = 0;
  int64_t version = 0;
  int num_exhausted = 0, num_copies = 0, num_hits = 0;
  for (int op = 0; op < num_ops; ++op) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << " op " << op);
    int64_t kind = model.seqs.empty() ? 0 : uniform(0, 99);
    // Keep the pool near full, but not always full: finish a sequence half the time it is.
    if (!model.seqs.empty() && m.num_free_blocks() < 6 && uniform(0, 1) == 0) kind = 80;
    const std::vector<SeqId> all = [&] {
      std::vector<SeqId> v;
      for (SeqId s = 0; s <= next_id; ++s) v.push_back(s);
      return v;
    }();
    const Observed before = Observe(m, all);
    if (kind < 15) {  // a prompt, maybe with a cached prefix
      std::vector<int32_t> prompt(stems[static_cast<size_t>(uniform(0, 2))]);
      prompt.resize(static_cast<size_t>(uniform(0, 20)));
      for (int32_t t : tokens_of(uniform(0, 3))) prompt.push_back(t);
      const SeqId id = next_id++;
      const int64_t needed = m.BlocksToAllocatePrompt(prompt);
      auto cached = m.AllocatePrompt(id, prompt);
      if (!cached.ok()) {
        ASSERT_EQ(cached.status().code(), StatusCode::kResourceExhausted) << cached.status();
        ASSERT_GT(needed, before.free);
        ASSERT_EQ(Observe(m, all), before);
        ++num_exhausted;
      } else {
        ASSERT_EQ(before.free - m.num_free_blocks(), needed);
        ASSERT_EQ(*cached % kBlock, 0);
        ASSERT_LE(*cached, std::max<int64_t>(0, static_cast<int64_t>(prompt.size()) - 1));
        num_hits += *cached > 0;
        Model::Seq& s = model.seqs[id];
        s.version = version;
        s.table = Table(m, id);
        for (size_t i = static_cast<size_t>(*cached / kBlock); i < s.table.size(); ++i) {
          ASSERT_EQ(before.refs[static_cast<size_t>(s.table[i])], 0) << "took a used block";
        }
        model.Extend(m, s, prompt, static_cast<size_t>(*cached));
        if (::testing::Test::HasFatalFailure()) return;
      }
    } else if (kind < 22) {  // a plain allocation
      const int64_t n = uniform(0, 12);
      const SeqId id = next_id++;
      const bool can = m.CanAllocate(n);
      Status st = m.Allocate(id, n);
      ASSERT_EQ(st.ok(), can) << st;
      if (!st.ok()) {
        ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st;
        ASSERT_EQ(Observe(m, all), before);
        ++num_exhausted;
      } else {
        Model::Seq& s = model.seqs[id];
        s.version = version;
        s.table = Table(m, id);
        for (BlockId b : s.table) ASSERT_EQ(before.refs[static_cast<size_t>(b)], 0);
        model.Extend(m, s, tokens_of(n), 0);
        if (::testing::Test::HasFatalFailure()) return;
      }
    } else if (kind < 57) {  // decode / chunked prefill
      const SeqId id = random_seq();
      Model::Seq& s = model.seqs[id];
      if (s.tokens.size() > 48) continue;
      const int64_t n = uniform(0, 6);
      const bool can = m.CanAppend(id, n);
      const int64_t needed = *m.BlocksToAppend(id, n);
      auto copies = m.Append(id, n);
      ASSERT_EQ(copies.ok(), can) << copies.status();
      if (!copies.ok()) {
        ASSERT_EQ(copies.status().code(), StatusCode::kResourceExhausted) << copies.status();
        ASSERT_EQ(Observe(m, all), before);
        ++num_exhausted;
        continue;
      }
      ASSERT_EQ(before.free - m.num_free_blocks(), needed);
      ASSERT_LE(copies->size(), 1u);
      std::vector<BlockId> expected = s.table;
      for (const BlockCopy& c : *copies) {
        ASSERT_EQ(c.src, expected.back());
        ASSERT_GT(before.refs[static_cast<size_t>(c.src)], 1) << "copy of an unshared block";
        ASSERT_EQ(before.refs[static_cast<size_t>(c.dst)], 0) << "copy into a used block";
        expected.back() = c.dst;
        model.Copy(c);
        ++num_copies;
      }
      const std::vector<BlockId> now = Table(m, id);
      ASSERT_GE(now.size(), expected.size());
      ASSERT_TRUE(std::equal(expected.begin(), expected.end(), now.begin()));
      for (size_t i = expected.size(); i < now.size(); ++i) {
        ASSERT_EQ(before.refs[static_cast<size_t>(now[i])], 0) << "took a used block";
      }
      s.table = now;
      const size_t from = s.tokens.size();
      model.Extend(m, s, tokens_of(n), from);
      if (::testing::Test::HasFatalFailure()) return;
    } else if (kind < 67) {  // a GRPO sample forked from a running sequence
      const SeqId parent = random_seq();
      const SeqId child = next_id++;
      ASSERT_TRUE(m.Fork(parent, child).ok());
      ASSERT_EQ(m.Fork(parent, child).code(), StatusCode::kInvalidArgument);
      ASSERT_EQ(m.num_free_blocks(), before.free);
      model.seqs[child] = model.seqs[parent];
    } else if (kind < 89) {  // finish
      const SeqId id = random_seq();
      ASSERT_TRUE(m.Free(id).ok());
      model.seqs.erase(id);
      ASSERT_EQ(m.Free(id).code(), StatusCode::kNotFound);  // no double free
    } else if (kind < 99) {                                 // register computed full blocks
      const SeqId id = random_seq();
      const Model::Seq& s = model.seqs[id];
      const auto len = static_cast<size_t>(uniform(0, static_cast<int64_t>(s.tokens.size())));
      auto registered = m.RegisterPrefix(id, std::span(s.tokens).first(len));
      if (s.version == version) {
        ASSERT_TRUE(registered.ok()) << registered.status();
        ASSERT_EQ(m.num_free_blocks(), before.free);
      } else {
        ASSERT_EQ(registered.status().code(), StatusCode::kFailedPrecondition);
        ASSERT_EQ(Observe(m, all), before);
      }
    } else {  // new weights
      m.SetWeightVersion(++version);
      ASSERT_EQ(m.num_cached_blocks(), 0);
    }
    model.Check(m);
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::printf("seed %llu: %d exhausted, %d copies, %d hits, %lld sequences\n",
              static_cast<unsigned long long>(seed), num_exhausted, num_copies, num_hits,
              static_cast<long long>(next_id));
  // The run exercised what it is meant to.
  EXPECT_GT(num_exhausted, 0);
  EXPECT_GT(num_copies, 0);
  EXPECT_GT(num_hits, 0);
}

TEST(KvBlockManagerTest, RandomOpsMatchTheModel) {
  for (uint64_t seed : {1, 2, 3}) {
    RunRandomOps(seed, 3000);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace laminar::rollout
