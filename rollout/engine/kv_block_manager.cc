// KvBlockManager: block pool, reference counts, copy-on-write and the version-keyed prefix cache.
#include "rollout/engine/kv_block_manager.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"

namespace laminar::rollout {
namespace {

std::string SeqName(SeqId seq) { return "sequence " + std::to_string(seq); }

Status UnknownSequence(SeqId seq) {
  return NotFoundError("KV block manager: unknown " + SeqName(seq));
}

}  // namespace

KvBlockManager::KvBlockManager(int32_t block_size, int32_t num_blocks, int64_t weight_version)
    : block_size_(block_size), weight_version_(weight_version) {
  LAMINAR_CHECK_GT(block_size, 0) << "KV block size";
  LAMINAR_CHECK_GE(num_blocks, 0) << "KV block count";
  blocks_.resize(static_cast<size_t>(num_blocks));
  free_.reserve(blocks_.size());
  // A stack: block 0 is handed out first, which keeps hand-written tests readable.
  for (BlockId b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int64_t KvBlockManager::BlocksFor(int64_t num_tokens) const {
  return (num_tokens + block_size_ - 1) / block_size_;
}

KvBlockManager::Sequence* KvBlockManager::Find(SeqId seq) {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second;
}

const KvBlockManager::Sequence* KvBlockManager::Find(SeqId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second;
}

StatusOr<int64_t> KvBlockManager::num_tokens(SeqId seq) const {
  const Sequence* s = Find(seq);
  if (s == nullptr) return UnknownSequence(seq);
  return s->num_tokens;
}

StatusOr<int32_t> KvBlockManager::num_blocks(SeqId seq) const {
  const Sequence* s = Find(seq);
  if (s == nullptr) return UnknownSequence(seq);
  return static_cast<int32_t>(s->table.size());
}

StatusOr<std::span<const BlockId>> KvBlockManager::block_table(SeqId seq) const {
  const Sequence* s = Find(seq);
  if (s == nullptr) return UnknownSequence(seq);
  return std::span<const BlockId>(s->table);
}

StatusOr<int64_t> KvBlockManager::sequence_version(SeqId seq) const {
  const Sequence* s = Find(seq);
  if (s == nullptr) return UnknownSequence(seq);
  return s->version;
}

int32_t KvBlockManager::ref_count(BlockId block) const {
  LAMINAR_CHECK(block >= 0 && block < num_total_blocks()) << "block " << block;
  return blocks_[static_cast<size_t>(block)].ref_count;
}

int64_t KvBlockManager::BlocksToAllocate(int64_t num_tokens) const {
  return num_tokens <= 0 ? 0 : BlocksFor(num_tokens);
}

std::vector<BlockId> KvBlockManager::LookupPrompt(std::span<const int32_t> prompt) const {
  std::vector<BlockId> hits;
  if (prompt.empty()) return hits;
  // Leave at least the last prompt token to compute: its logits start the decode.
  const size_t max_hits = (prompt.size() - 1) / static_cast<size_t>(block_size_);
  const size_t bs = static_cast<size_t>(block_size_);
  CacheKey key{.version = weight_version_, .parent_entry = 0, .tokens = {}};
  for (size_t i = 0; i < max_hits; ++i) {
    key.tokens.assign(prompt.begin() + static_cast<ptrdiff_t>(i * bs),
                      prompt.begin() + static_cast<ptrdiff_t>((i + 1) * bs));
    auto it = cache_.find(key);
    if (it == cache_.end()) break;
    hits.push_back(it->second.block);
    key.parent_entry = it->second.id;
  }
  return hits;
}

int64_t KvBlockManager::BlocksToAllocatePrompt(std::span<const int32_t> prompt) const {
  std::vector<BlockId> hits = LookupPrompt(prompt);
  int64_t needed =
      BlocksFor(static_cast<int64_t>(prompt.size())) - static_cast<int64_t>(hits.size());
  for (BlockId b : hits) {
    if (blocks_[static_cast<size_t>(b)].ref_count == 0) ++needed;  // evictable: leaves the free set
  }
  return needed;
}

StatusOr<int64_t> KvBlockManager::BlocksToAppend(SeqId seq, int64_t num_tokens) const {
  const Sequence* s = Find(seq);
  if (s == nullptr) return UnknownSequence(seq);
  if (num_tokens < 0) {
    return InvalidArgumentError("KV block manager: append of " + std::to_string(num_tokens) +
                                " tokens to " + SeqName(seq));
  }
  if (num_tokens == 0) return int64_t{0};
  const bool partial_last = s->num_tokens % block_size_ != 0;
  const bool cow = partial_last && blocks_[static_cast<size_t>(s->table.back())].ref_count > 1;
  return BlocksFor(s->num_tokens + num_tokens) - static_cast<int64_t>(s->table.size()) +
         (cow ? 1 : 0);
}

bool KvBlockManager::CanAppend(SeqId seq, int64_t num_tokens) const {
  StatusOr<int64_t> needed = BlocksToAppend(seq, num_tokens);
  return needed.ok() && *needed <= num_free_blocks();
}

BlockId KvBlockManager::TakeFreeBlock() {
  BlockId b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    LAMINAR_CHECK(!evictable_.empty()) << "KV block manager: no free block (capacity check missed)";
    b = evictable_.begin()->second;
    evictable_.erase(evictable_.begin());
    Uncache(b);
  }
  Block& blk = blocks_[static_cast<size_t>(b)];
  LAMINAR_CHECK_EQ(blk.ref_count, 0) << "block " << b << " handed out twice";
  LAMINAR_CHECK(!blk.cache_key.has_value()) << "free block " << b << " still cached";
  blk.ref_count = 1;
  return b;
}

void KvBlockManager::AddRef(BlockId block) {
  Block& blk = blocks_[static_cast<size_t>(block)];
  if (blk.ref_count == 0) {
    LAMINAR_CHECK(blk.cache_key.has_value()) << "reviving uncached free block " << block;
    size_t erased = evictable_.erase({blk.freed_tick, block});
    LAMINAR_CHECK_EQ(erased, size_t{1}) << "block " << block << " not in the evictable set";
  }
  ++blk.ref_count;
}

void KvBlockManager::DropRef(BlockId block) {
  Block& blk = blocks_[static_cast<size_t>(block)];
  LAMINAR_CHECK_GT(blk.ref_count, 0) << "double free of block " << block;
  if (--blk.ref_count > 0) return;
  if (blk.cache_key.has_value()) {
    blk.freed_tick = ++tick_;
    evictable_.insert({blk.freed_tick, block});
  } else {
    free_.push_back(block);
  }
}

void KvBlockManager::Uncache(BlockId block) {
  Block& blk = blocks_[static_cast<size_t>(block)];
  LAMINAR_CHECK(blk.cache_key.has_value()) << "block " << block << " is not cached";
  size_t erased = cache_.erase(*blk.cache_key);
  LAMINAR_CHECK_EQ(erased, size_t{1}) << "cache entry of block " << block << " missing";
  blk.cache_key.reset();
}

Status KvBlockManager::Allocate(SeqId seq, int64_t num_tokens) {
  if (seqs_.contains(seq)) {
    return InvalidArgumentError("KV block manager: Allocate of existing " + SeqName(seq));
  }
  if (num_tokens < 0) {
    return InvalidArgumentError("KV block manager: Allocate of " + std::to_string(num_tokens) +
                                " tokens for " + SeqName(seq));
  }
  const int64_t needed = BlocksToAllocate(num_tokens);
  if (needed > num_free_blocks()) {
    return ResourceExhaustedError(
        "KV block manager: " + SeqName(seq) + " needs " + std::to_string(needed) + " blocks for " +
        std::to_string(num_tokens) + " tokens, " + std::to_string(num_free_blocks()) + " free");
  }
  Sequence s{.table = {}, .num_tokens = num_tokens, .version = weight_version_};
  s.table.reserve(static_cast<size_t>(needed));
  for (int64_t i = 0; i < needed; ++i) s.table.push_back(TakeFreeBlock());
  seqs_.emplace(seq, std::move(s));
  return OkStatus();
}

StatusOr<int64_t> KvBlockManager::AllocatePrompt(SeqId seq, std::span<const int32_t> prompt) {
  if (seqs_.contains(seq)) {
    return InvalidArgumentError("KV block manager: AllocatePrompt of existing " + SeqName(seq));
  }
  const std::vector<BlockId> hits = LookupPrompt(prompt);
  const int64_t needed = BlocksToAllocatePrompt(prompt);
  if (needed > num_free_blocks()) {
    return ResourceExhaustedError(
        "KV block manager: " + SeqName(seq) + " needs " + std::to_string(needed) +
        " blocks for a prompt of " + std::to_string(prompt.size()) + " tokens (" +
        std::to_string(hits.size()) + " cached), " + std::to_string(num_free_blocks()) + " free");
  }
  const auto num_prompt_tokens = static_cast<int64_t>(prompt.size());
  Sequence s{.table = {}, .num_tokens = num_prompt_tokens, .version = weight_version_};
  // Pin the hits first so that taking fresh blocks cannot evict them.
  for (BlockId b : hits) {
    AddRef(b);
    s.table.push_back(b);
  }
  while (static_cast<int64_t>(s.table.size()) < BlocksFor(num_prompt_tokens)) {
    s.table.push_back(TakeFreeBlock());
  }
  seqs_.emplace(seq, std::move(s));
  return static_cast<int64_t>(hits.size()) * block_size_;
}

StatusOr<std::vector<BlockCopy>> KvBlockManager::Append(SeqId seq, int64_t num_tokens) {
  LAMINAR_ASSIGN_OR_RETURN(const int64_t needed, BlocksToAppend(seq, num_tokens));
  if (needed > num_free_blocks()) {
    return ResourceExhaustedError("KV block manager: appending " + std::to_string(num_tokens) +
                                  " tokens to " + SeqName(seq) + " needs " +
                                  std::to_string(needed) + " blocks, " +
                                  std::to_string(num_free_blocks()) + " free");
  }
  Sequence& s = seqs_.at(seq);
  std::vector<BlockCopy> copies;
  if (num_tokens == 0) return copies;
  if (s.num_tokens % block_size_ != 0) {
    const BlockId last = s.table.back();
    const Block& blk = blocks_[static_cast<size_t>(last)];
    LAMINAR_CHECK(!blk.cache_key.has_value()) << "partial block " << last << " is cached";
    if (blk.ref_count > 1) {
      const BlockId fresh = TakeFreeBlock();
      copies.push_back({.src = last, .dst = fresh});
      DropRef(last);  // stays > 0: the other holders keep it
      s.table.back() = fresh;
    }
  }
  s.num_tokens += num_tokens;
  while (static_cast<int64_t>(s.table.size()) < BlocksFor(s.num_tokens)) {
    s.table.push_back(TakeFreeBlock());
  }
  return copies;
}

Status KvBlockManager::Fork(SeqId parent, SeqId child) {
  const Sequence* p = Find(parent);
  if (p == nullptr) return UnknownSequence(parent);
  if (seqs_.contains(child)) {
    return InvalidArgumentError("KV block manager: Fork of " + SeqName(parent) + " into existing " +
                                SeqName(child));
  }
  Sequence copy = *p;
  for (BlockId b : copy.table) AddRef(b);
  seqs_.emplace(child, std::move(copy));
  return OkStatus();
}

Status KvBlockManager::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return UnknownSequence(seq);
  // Tail first, so a cached prompt's last blocks are evicted before its first ones (which more
  // prompts share).
  const std::vector<BlockId>& table = it->second.table;
  for (auto b = table.rbegin(); b != table.rend(); ++b) DropRef(*b);
  seqs_.erase(it);
  return OkStatus();
}

Status KvBlockManager::Truncate(SeqId seq, int64_t num_tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return UnknownSequence(seq);
  Sequence& s = it->second;
  if (num_tokens < 0 || num_tokens > s.num_tokens) {
    return InvalidArgumentError("KV block manager: truncating " + SeqName(seq) + " of " +
                                std::to_string(s.num_tokens) + " tokens to " +
                                std::to_string(num_tokens));
  }
  const auto keep = static_cast<size_t>(BlocksToAllocate(num_tokens));
  while (s.table.size() > keep) {
    DropRef(s.table.back());
    s.table.pop_back();
  }
  s.num_tokens = num_tokens;
  return OkStatus();
}

StatusOr<int32_t> KvBlockManager::RegisterPrefix(SeqId seq, std::span<const int32_t> tokens) {
  const Sequence* s = Find(seq);
  if (s == nullptr) return UnknownSequence(seq);
  if (static_cast<int64_t>(tokens.size()) > s->num_tokens) {
    return InvalidArgumentError("KV block manager: RegisterPrefix of " +
                                std::to_string(tokens.size()) + " tokens for " + SeqName(seq) +
                                ", which holds " + std::to_string(s->num_tokens));
  }
  if (s->version != weight_version_) {
    return FailedPreconditionError(
        "KV block manager: " + SeqName(seq) + " was computed under weight version " +
        std::to_string(s->version) + ", the cache is keyed by " + std::to_string(weight_version_));
  }
  const size_t bs = static_cast<size_t>(block_size_);
  const size_t num_full = tokens.size() / bs;
  int32_t registered = 0;
  CacheKey key{.version = weight_version_, .parent_entry = 0, .tokens = {}};
  for (size_t i = 0; i < num_full; ++i) {
    key.tokens.assign(tokens.begin() + static_cast<ptrdiff_t>(i * bs),
                      tokens.begin() + static_cast<ptrdiff_t>((i + 1) * bs));
    const BlockId b = s->table[i];
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (blk.cache_key.has_value()) {
      if (*blk.cache_key == key) {
        key.parent_entry = cache_.at(key).id;
        continue;
      }
      if (blk.cache_key->tokens != key.tokens) {
        return InvalidArgumentError("KV block manager: block " + std::to_string(b) + " of " +
                                    SeqName(seq) + " (tokens " + std::to_string(i * bs) + ".." +
                                    std::to_string((i + 1) * bs - 1) +
                                    ") was registered with other token ids");
      }
      // Same tokens under an evicted parent entry (this block was registered after a duplicate
      // of the blocks before it): the old entry is unreachable; register the block afresh.
      Uncache(b);
    }
    auto it = cache_.find(key);
    if (it != cache_.end()) {  // the same prefix is cached in another block: keep that one
      key.parent_entry = it->second.id;
      continue;
    }
    const uint64_t id = next_entry_id_++;
    cache_.emplace(key, CacheEntry{.block = b, .id = id});
    blk.cache_key = key;
    key.parent_entry = id;
    ++registered;
  }
  return registered;
}

void KvBlockManager::SetWeightVersion(int64_t version) {
  if (version == weight_version_) return;
  for (auto& [key, entry] : cache_) {
    Block& blk = blocks_[static_cast<size_t>(entry.block)];
    blk.cache_key.reset();
    if (blk.ref_count == 0) {
      evictable_.erase({blk.freed_tick, entry.block});
      free_.push_back(entry.block);
    }
  }
  LAMINAR_CHECK(evictable_.empty()) << "evictable blocks outside the prefix cache";
  cache_.clear();
  weight_version_ = version;
}

void KvBlockManager::CheckInvariants() const {
  const size_t n = blocks_.size();
  std::vector<int32_t> refs(n, 0);
  for (const auto& [id, s] : seqs_) {
    LAMINAR_CHECK_GE(s.num_tokens, 0) << SeqName(id);
    LAMINAR_CHECK_EQ(static_cast<int64_t>(s.table.size()), BlocksFor(s.num_tokens)) << SeqName(id);
    std::vector<BlockId> sorted = s.table;
    std::sort(sorted.begin(), sorted.end());
    LAMINAR_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end())
        << SeqName(id) << " holds a block twice";
    for (BlockId b : s.table) {
      LAMINAR_CHECK(b >= 0 && static_cast<size_t>(b) < n) << SeqName(id) << " block " << b;
      ++refs[static_cast<size_t>(b)];
    }
    if (s.num_tokens % block_size_ != 0) {  // only full blocks may be cached
      LAMINAR_CHECK(!blocks_[static_cast<size_t>(s.table.back())].cache_key.has_value())
          << "partial last block of " << SeqName(id) << " is cached";
    }
  }
  std::vector<int> in_free(n, 0);
  for (BlockId b : free_) ++in_free[static_cast<size_t>(b)];
  std::vector<int> in_evictable(n, 0);
  for (const auto& [tick, b] : evictable_) {
    ++in_evictable[static_cast<size_t>(b)];
    LAMINAR_CHECK_EQ(tick, blocks_[static_cast<size_t>(b)].freed_tick) << "block " << b;
  }
  size_t num_marked = 0;
  for (size_t b = 0; b < n; ++b) {
    const Block& blk = blocks_[b];
    LAMINAR_CHECK_EQ(blk.ref_count, refs[b]) << "reference count of block " << b;
    const int states = (blk.ref_count > 0 ? 1 : 0) + in_free[b] + in_evictable[b];
    LAMINAR_CHECK_EQ(states, 1) << "block " << b << " is in " << states << " states";
    LAMINAR_CHECK_EQ(in_evictable[b] == 1, blk.ref_count == 0 && blk.cache_key.has_value())
        << "block " << b;
    if (blk.cache_key.has_value()) {
      ++num_marked;
      auto it = cache_.find(*blk.cache_key);
      LAMINAR_CHECK(it != cache_.end()) << "block " << b << " marked but not in the cache";
      LAMINAR_CHECK_EQ(it->second.block, static_cast<BlockId>(b)) << "cache entry of block " << b;
      LAMINAR_CHECK_EQ(blk.cache_key->version, weight_version_) << "stale entry, block " << b;
    }
  }
  LAMINAR_CHECK_EQ(num_marked, cache_.size()) << "cache entries without a marked block";
}

}  // namespace laminar::rollout
