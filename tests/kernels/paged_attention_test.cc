// Paged attention: the reference against contiguous ref::CausalAttention on the same data, the
// CPU version against the reference on every ISA path, and WriteKv's scatter through a table.
#include "kernels/cpu/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/paged_attention.h"
#include "kernels/tolerance.h"
#include "tests/test_util.h"

namespace laminar::kernels {
namespace {

using laminar::testing::RandomNormal;
// A sequence of S tokens stored contiguously ([S, Hkv, D]) and in a paged pool through a shuffled
// block table; every pool slot the table does not reach holds NaN, so reading one shows.
struct PagedSequence {
  int64_t s, hkv, d, block_size;
  std::vector<float> k, v;            // contiguous [S, Hkv, D]
  std::vector<int32_t> table;         // ceil(S / block_size) distinct ids, not in order
  std::vector<float> k_pool, v_pool;  // [num_blocks, block_size, Hkv, D]
};

PagedSequence MakeSequence(int64_t s, int64_t hkv, int64_t d, int64_t block_size, uint32_t seed) {
  PagedSequence seq{
      s,  hkv, d, block_size, RandomNormal(s * hkv * d, seed), RandomNormal(s * hkv * d, seed + 1),
      {}, {},  {}};
  const int64_t used = (s + block_size - 1) / block_size, num_blocks = used + 3;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed + 2);
  std::shuffle(ids.begin(), ids.end(), rng);
  if (used >= 2 && ids[0] < ids[1]) std::swap(ids[0], ids[1]);  // never in increasing order
  seq.table.assign(ids.begin(), ids.begin() + used);
  const size_t pool_floats = num_blocks * block_size * hkv * d;
  seq.k_pool.assign(pool_floats, std::numeric_limits<float>::quiet_NaN());
  seq.v_pool = seq.k_pool;
  std::vector<int32_t> all(s);
  std::iota(all.begin(), all.end(), 0);
  ref::WriteKv(seq.k, seq.v, seq.table, block_size, all, s, hkv, d, seq.k_pool, seq.v_pool);
  return seq;
}

struct Shape {
  int64_t t, h, hkv, d, s;
};

// Decode (T = 1), prime lengths (full and chunked prefill), sequences exactly filling blocks of
// 1, 3 and 16 (S = 48), GQA (H = 6, Hkv = 2) and H = Hkv.
const Shape kShapes[] = {{1, 6, 2, 16, 1},  {1, 6, 2, 16, 37}, {7, 6, 2, 16, 7},  {5, 6, 2, 16, 13},
                         {3, 6, 2, 16, 48}, {1, 4, 4, 8, 48},  {11, 4, 4, 8, 31}, {2, 4, 4, 8, 17}};
const int64_t kBlockSizes[] = {1, 3, 16};

std::vector<int32_t> LastPositions(const Shape& c) {
  std::vector<int32_t> pos(c.t);
  for (int64_t i = 0; i < c.t; ++i) pos[i] = static_cast<int32_t>(c.s - c.t + i);
  return pos;
}

std::string Describe(const Shape& c, int64_t block_size) {
  return "T=" + std::to_string(c.t) + " H=" + std::to_string(c.h) +
         " Hkv=" + std::to_string(c.hkv) + " S=" + std::to_string(c.s) +
         " block=" + std::to_string(block_size);
}

TEST(PagedAttentionTest, ReferenceEqualsContiguousReference) {
  for (const Shape& c : kShapes) {
    for (int64_t bs : kBlockSizes) {
      PagedSequence seq = MakeSequence(c.s, c.hkv, c.d, bs, 10);
      auto q = RandomNormal(c.t * c.h * c.d, 20);
      auto pos = LastPositions(c);
      std::vector<float> want(q.size()), got(q.size());
      ref::CausalAttention(q, seq.k, seq.v, pos, c.t, c.h, c.hkv, c.d, c.s, want);
      ref::PagedCausalAttention(q, seq.k_pool, seq.v_pool, seq.table, bs, pos, c.t, c.h, c.hkv, c.d,
                                got);
      // Same f64 sums in the same order: equal to the bit.
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << Describe(c, bs) << " at " << i;
      }
    }
  }
}

TEST(PagedAttentionTest, ReferenceAttendsOnlyUpToEachPosition) {
  // Positions not at the end of the cache: query 0 sees position 0 only, so it returns V[0].
  PagedSequence seq = MakeSequence(10, 2, 8, 3, 30);
  auto q = RandomNormal(2 * 6 * 8, 31);
  std::vector<int32_t> pos = {0, 4};
  std::vector<float> want(q.size()), got(q.size());
  ref::CausalAttention(q, seq.k, seq.v, pos, 2, 6, 2, 8, 10, want);
  ref::PagedCausalAttention(q, seq.k_pool, seq.v_pool, seq.table, 3, pos, 2, 6, 2, 8, got);
  EXPECT_EQ(got, want);
  for (int64_t head = 0; head < 6; ++head) {
    for (int64_t e = 0; e < 8; ++e) {
      EXPECT_FLOAT_EQ(got[head * 8 + e], seq.v[(head / 3) * 8 + e]) << head << " " << e;
    }
  }
}

std::vector<cpu::Isa> AvailableIsas() {
  std::vector<cpu::Isa> isas = {cpu::Isa::kScalar};
  if (cpu::GetCpuFeatures().avx2) isas.push_back(cpu::Isa::kAvx2);
  if (cpu::GetCpuFeatures().avx512) isas.push_back(cpu::Isa::kAvx512);
  return isas;
}

TEST(PagedAttentionTest, CpuEqualsReference) {
  ThreadPool pool(2);
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  // Large enough (T * H * S * D >= 2^16) that the pool really splits the work.
  shapes.push_back({5, 6, 2, 64, 300});
  shapes.push_back({1, 6, 2, 64, 300});
  for (cpu::Isa isa : AvailableIsas()) {
    for (const Shape& c : shapes) {
      for (int64_t bs : kBlockSizes) {
        PagedSequence seq = MakeSequence(c.s, c.hkv, c.d, bs, 40);
        auto q = RandomNormal(c.t * c.h * c.d, 41);
        auto pos = LastPositions(c);
        std::vector<float> want(q.size());
        ref::PagedCausalAttention(q, seq.k_pool, seq.v_pool, seq.table, bs, pos, c.t, c.h, c.hkv,
                                  c.d, want);
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          std::vector<float> got(q.size(), std::numeric_limits<float>::quiet_NaN());
          cpu::PagedCausalAttention(q, seq.k_pool, seq.v_pool, seq.table, bs, pos, c.t, c.h, c.hkv,
                                    c.d, got, p, isa);
          for (size_t i = 0; i < got.size(); ++i) {
            ASSERT_LE(std::abs(double(got[i]) - want[i]),
                      kAttentionF32.abs + kAttentionF32.rel * std::abs(want[i]))
                << cpu::IsaName(isa) << " " << Describe(c, bs) << (p ? " pool" : "") << " at " << i
                << ": got " << got[i] << " want " << want[i];
          }
        }
      }
    }
  }
}

TEST(PagedAttentionTest, WriteKvThenReadBackThroughTable) {
  const int64_t hkv = 2, d = 5, bs = 3, num_blocks = 6, row = hkv * d;
  const std::vector<int32_t> table = {4, 1, 5};  // positions 0..8
  std::vector<float> k_pool(num_blocks * bs * row, -1.f), v_pool(num_blocks * bs * row, -2.f);
  // A chunk of 5 new tokens starting mid-block (positions 2..6), written in two calls.
  const std::vector<int32_t> pos = {2, 3, 4, 5, 6};
  auto k = RandomNormal(5 * row, 50), v = RandomNormal(5 * row, 51);
  ref::WriteKv(std::span(k).first(2 * row), std::span(v).first(2 * row), table, bs,
               std::span(pos).first(2), 2, hkv, d, k_pool, v_pool);
  ref::WriteKv(std::span(k).subspan(2 * row), std::span(v).subspan(2 * row), table, bs,
               std::span(pos).subspan(2), 3, hkv, d, k_pool, v_pool);
  std::vector<bool> written(num_blocks * bs, false);
  for (size_t i = 0; i < pos.size(); ++i) {
    const int64_t slot = table[pos[i] / bs] * bs + pos[i] % bs;
    written[slot] = true;
    for (int64_t e = 0; e < row; ++e) {
      EXPECT_EQ(k_pool[slot * row + e], k[i * row + e]) << "k position " << pos[i];
      EXPECT_EQ(v_pool[slot * row + e], v[i * row + e]) << "v position " << pos[i];
    }
  }
  // Position 2 is slot 2 of block 4, position 6 slot 0 of block 5.
  EXPECT_TRUE(written[4 * bs + 2] && written[5 * bs + 0]);
  for (int64_t slot = 0; slot < num_blocks * bs; ++slot) {
    if (written[slot]) continue;
    for (int64_t e = 0; e < row; ++e) {
      ASSERT_EQ(k_pool[slot * row + e], -1.f) << "slot " << slot << " overwritten";
      ASSERT_EQ(v_pool[slot * row + e], -2.f) << "slot " << slot << " overwritten";
    }
  }
}

// Ancestor masks of a tree given by parents (parents[0] == -1).
std::vector<uint64_t> Ancestors(const std::vector<int32_t>& parents) {
  std::vector<uint64_t> a(parents.size());
  for (size_t j = 0; j < parents.size(); ++j)
    a[j] = (parents[j] < 0 ? 0 : a[parents[j]]) | (uint64_t{1} << j);
  return a;
}

TEST(PagedAttentionTest, TreeEqualsEachRootToLeafChain) {
  // A tree of 7 nodes after a prefix of 9 committed positions:
  //   0 -> 1 -> 3 -> 6,  0 -> 2 -> 4,  2 -> 5.
  const std::vector<int32_t> parents = {-1, 0, 0, 1, 2, 2, 3};
  const std::vector<std::vector<int32_t>> chains = {{0, 1, 3, 6}, {0, 2, 4}, {0, 2, 5}};
  const int64_t prefix = 9, n = 7, h = 6, hkv = 2, d = 16;
  ThreadPool pool(2);
  for (int64_t bs : kBlockSizes) {
    PagedSequence seq = MakeSequence(prefix + n, hkv, d, bs, 60);
    auto q = RandomNormal(n * h * d, 61);
    const auto anc = Ancestors(parents);
    std::vector<float> tree(q.size());
    ref::PagedTreeAttention(q, seq.k_pool, seq.v_pool, seq.table, bs, prefix, anc, n, h, hkv, d,
                            tree);
    for (const auto& chain : chains) {
      // The chain's nodes, moved to consecutive positions prefix.. in a fresh copy of the pool.
      PagedSequence c = seq;
      const int64_t row = hkv * d;
      auto slot = [&](int64_t p) { return (c.table[p / bs] * bs + p % bs) * row; };
      for (size_t i = 0; i < chain.size(); ++i) {
        std::copy_n(&seq.k_pool[slot(prefix + chain[i])], row, &c.k_pool[slot(prefix + i)]);
        std::copy_n(&seq.v_pool[slot(prefix + chain[i])], row, &c.v_pool[slot(prefix + i)]);
      }
      std::vector<float> cq;
      std::vector<int32_t> pos;
      for (size_t i = 0; i < chain.size(); ++i) {
        cq.insert(cq.end(), q.begin() + chain[i] * h * d, q.begin() + (chain[i] + 1) * h * d);
        pos.push_back(static_cast<int32_t>(prefix + i));
      }
      const int64_t t = std::ssize(chain);
      std::vector<float> want(cq.size());
      ref::PagedCausalAttention(cq, c.k_pool, c.v_pool, c.table, bs, pos, t, h, hkv, d, want);
      for (size_t i = 0; i < chain.size(); ++i) {
        for (int64_t e = 0; e < h * d; ++e) {
          ASSERT_EQ(tree[chain[i] * h * d + e], want[i * h * d + e])
              << "block " << bs << " node " << chain[i];
        }
      }
    }
    for (cpu::Isa isa : AvailableIsas()) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> got(q.size(), std::numeric_limits<float>::quiet_NaN());
        cpu::PagedTreeAttention(q, seq.k_pool, seq.v_pool, seq.table, bs, prefix, anc, n, h, hkv, d,
                                got, p, isa);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_LE(std::abs(double(got[i]) - tree[i]),
                    kAttentionF32.abs + kAttentionF32.rel * std::abs(tree[i]))
              << cpu::IsaName(isa) << " block " << bs << " at " << i;
        }
      }
    }
  }
}

TEST(PagedAttentionTest, ChainTreeEqualsCausalOnCpu) {
  const int64_t prefix = 40, n = 5, h = 4, hkv = 4, d = 8, bs = 16;
  PagedSequence seq = MakeSequence(prefix + n, hkv, d, bs, 70);
  auto q = RandomNormal(n * h * d, 71);
  const auto anc = Ancestors({-1, 0, 1, 2, 3});
  std::vector<int32_t> pos = {40, 41, 42, 43, 44};
  for (cpu::Isa isa : AvailableIsas()) {
    std::vector<float> tree(q.size()), causal(q.size());
    cpu::PagedTreeAttention(q, seq.k_pool, seq.v_pool, seq.table, bs, prefix, anc, n, h, hkv, d,
                            tree, nullptr, isa);
    cpu::PagedCausalAttention(q, seq.k_pool, seq.v_pool, seq.table, bs, pos, n, h, hkv, d, causal,
                              nullptr, isa);
    EXPECT_EQ(tree, causal) << cpu::IsaName(isa);
  }
}

TEST(PagedAttentionDeathTest, PositionPastTableOrBadBlockIdChecks) {
  std::vector<float> q(4), pool(2 * 2 * 4), out(4);
  const std::vector<int32_t> table = {1}, bad_table = {2}, pos = {2};
  EXPECT_DEATH(ref::PagedCausalAttention(q, pool, pool, table, 2, pos, 1, 1, 1, 4, out),
               "outside the block table");
  EXPECT_DEATH(cpu::PagedCausalAttention(q, pool, pool, table, 2, pos, 1, 1, 1, 4, out),
               "outside cache of 2");
  const std::vector<int32_t> pos0 = {0};
  EXPECT_DEATH(ref::PagedCausalAttention(q, pool, pool, bad_table, 2, pos0, 1, 1, 1, 4, out),
               "block id 2 outside the pool of 2");
  EXPECT_DEATH(cpu::PagedCausalAttention(q, pool, pool, bad_table, 2, pos0, 1, 1, 1, 4, out),
               "block id 2 outside the pool of 2");
  // A tree mask that lets a node see a later one.
  const std::vector<uint64_t> bad_mask = {0b11, 0b10};
  std::vector<float> q2(8), out2(8), pool2(4 * 4);
  EXPECT_DEATH(ref::PagedTreeAttention(q2, pool2, pool2, table, 2, 0, bad_mask, 2, 1, 1, 4, out2),
               "must see itself");
  EXPECT_DEATH(cpu::PagedTreeAttention(q2, pool2, pool2, table, 2, 0, bad_mask, 2, 1, 1, 4, out2),
               "must see itself");
}

}  // namespace
}  // namespace laminar::kernels
