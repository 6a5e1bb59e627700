// Bookkeeping of a paged KV cache: fixed-size blocks, a block table per sequence, reference counts
// with copy-on-write for GRPO group prefix sharing, and a prefix cache keyed by weight version.
// It moves no KV bytes itself; it tells the engine which blocks to use and which to copy.
// Reference: PagedAttention / vLLM block manager (Kwon et al., SOSP 2023, §4.2-4.4).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace laminar::rollout {

using BlockId = int32_t;  // index into the engine's KV block pool, in [0, num_total_blocks())
using SeqId = int64_t;    // a sequence (one sample of a request), chosen by the scheduler

// A KV copy the engine must perform before it writes this step's KV: every slot of block `src`
// (all layers, K and V) into block `dst`. Only the first `num_tokens % block_size` slots matter.
struct BlockCopy {
  BlockId src = 0;
  BlockId dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

// The block pool of one engine. Token i of a sequence lives in slot i % block_size of block
// table[i / block_size].
//
// Block states: used (reference count > 0, in at least one block table), free (count 0, holding
// nothing) or evictable (count 0, holding a cached full prefix block that a later prompt may
// reuse; taken for new data, least recently freed first, only when no plain free block is left).
// num_free_blocks() counts both free and evictable blocks: both can be handed out.
//
// Invariants: a block whose reference count is > 1 is never written (Append copies a shared,
// partially filled last block first); only full blocks are cached, and full blocks are never
// written again; the prefix cache only holds blocks computed under the current weight version.
//
// Ownership and thread-safety: owned by the engine's scheduler, which calls it from one thread.
// Not thread-safe; copyable (a snapshot of the bookkeeping, used by tests).
class KvBlockManager {
 public:
  // block_size: token slots per block (> 0, e.g. 16); num_blocks: blocks in the pool (>= 0).
  // Both come from a validated engine config; bad values are a bug (CHECK).
  // weight_version: the version the prefix cache starts keyed by.
  KvBlockManager(int32_t block_size, int32_t num_blocks, int64_t weight_version = 0);

  // ---- capacity (these numbers feed repack; docs/architecture.md) ----
  int32_t block_size() const { return block_size_; }
  int32_t num_total_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  // Blocks that can be handed out now: plain free plus evictable cached ones.
  int32_t num_free_blocks() const { return static_cast<int32_t>(free_.size() + evictable_.size()); }
  // Blocks held by at least one sequence. num_free_blocks() + num_used_blocks() == total.
  int32_t num_used_blocks() const { return num_total_blocks() - num_free_blocks(); }
  // Free blocks that still hold a cached prefix (a subset of num_free_blocks()).
  int32_t num_evictable_blocks() const { return static_cast<int32_t>(evictable_.size()); }
  // Blocks registered in the prefix cache, used or evictable.
  int32_t num_cached_blocks() const { return static_cast<int32_t>(cache_.size()); }
  // Token slots in the pool and in the free blocks (num_*_blocks * block_size).
  int64_t token_capacity() const { return int64_t{num_total_blocks()} * block_size_; }
  int64_t free_token_capacity() const { return int64_t{num_free_blocks()} * block_size_; }
  int64_t weight_version() const { return weight_version_; }

  // ---- per sequence; NotFound for an unknown id ----
  bool HasSequence(SeqId seq) const { return seqs_.contains(seq); }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  StatusOr<int64_t> num_tokens(SeqId seq) const;
  StatusOr<int32_t> num_blocks(SeqId seq) const;
  // The block table; the span is valid until the next non-const call.
  StatusOr<std::span<const BlockId>> block_table(SeqId seq) const;
  // The weight version the sequence's KV was (or will be) computed under: the manager's version
  // when it was allocated; a fork inherits its parent's.
  StatusOr<int64_t> sequence_version(SeqId seq) const;
  // Reference count of `block` (CHECKs that it is in range). For tests and debugging.
  int32_t ref_count(BlockId block) const;

  // ---- admission control: no side effects ----
  // Free blocks that Allocate(seq, num_tokens) would take: ceil(num_tokens / block_size).
  int64_t BlocksToAllocate(int64_t num_tokens) const;
  bool CanAllocate(int64_t num_tokens) const {
    return num_tokens >= 0 && BlocksToAllocate(num_tokens) <= num_free_blocks();
  }
  // Free blocks that AllocatePrompt(seq, prompt) would take: new blocks plus cache hits that are
  // currently evictable (reusing them takes them off the free count too).
  int64_t BlocksToAllocatePrompt(std::span<const int32_t> prompt) const;
  bool CanAllocatePrompt(std::span<const int32_t> prompt) const {
    return BlocksToAllocatePrompt(prompt) <= num_free_blocks();
  }
  // Free blocks that Append(seq, num_tokens) would take, including one for a copy-on-write of a
  // shared partial last block. NotFound for an unknown id, InvalidArgument for num_tokens < 0.
  StatusOr<int64_t> BlocksToAppend(SeqId seq, int64_t num_tokens) const;
  // False for an unknown id or a negative count.
  bool CanAppend(SeqId seq, int64_t num_tokens) const;

  // ---- mutation; on any error nothing has changed unless stated ----
  // Creates sequence `seq` holding `num_tokens` (>= 0) token slots in fresh blocks.
  // InvalidArgument if `seq` exists or num_tokens < 0; ResourceExhausted if fewer than
  // BlocksToAllocate(num_tokens) blocks are free.
  Status Allocate(SeqId seq, int64_t num_tokens);

  // Creates sequence `seq` for `prompt` (token ids), reusing the longest prefix of full blocks
  // registered under the current weight version (vLLM automatic prefix caching). At least one
  // prompt token is always left uncached, so the engine has a position to take logits from.
  // Returns the number of prompt tokens whose KV is already present (a multiple of block_size);
  // the engine prefills positions [returned, prompt.size()). Errors as Allocate.
  StatusOr<int64_t> AllocatePrompt(SeqId seq, std::span<const int32_t> prompt);

  // Adds `num_tokens` (>= 0) token slots at the end of `seq`, taking fresh blocks as needed. If the
  // last block is shared (reference count > 1) and partially filled, the sequence first moves to a
  // fresh copy of it (copy-on-write); the returned copies (at most one) must be executed before the
  // engine writes this step's KV and before any other call that frees blocks. NotFound for an
  // unknown id, InvalidArgument for num_tokens < 0, ResourceExhausted if fewer than
  // BlocksToAppend() blocks are free.
  StatusOr<std::vector<BlockCopy>> Append(SeqId seq, int64_t num_tokens);

  // Shrinks `seq` to its first `num_tokens` token slots: the blocks past them are released at once
  // (their reference dropped; unreferenced ones become free). Speculative decoding gives back the
  // slots of rejected draft tokens this way. Slots kept are not touched (nothing to copy).
  // NotFound for an unknown id; InvalidArgument unless 0 <= num_tokens <= num_tokens(seq).
  Status Truncate(SeqId seq, int64_t num_tokens);
  // Makes `child` share all of `parent`'s blocks (reference count + 1 each) and token count: the
  // n samples of a GRPO group store their prompt once. Takes no block. NotFound if `parent` is
  // unknown, InvalidArgument if `child` already exists.
  Status Fork(SeqId parent, SeqId child);

  // Drops `seq` and its references. Blocks left unreferenced become free, or evictable if they
  // hold a cached prefix (tail blocks are evicted before head blocks). NotFound for an unknown id.
  Status Free(SeqId seq);

  // Registers the full blocks of `seq` covered by `tokens` (the ids of its first tokens.size()
  // tokens, whose KV the engine has written) in the prefix cache, keyed by (weight version, token
  // ids from position 0 through the end of the block). A block whose key is already held by
  // another block is not registered twice. Returns the number of blocks newly registered.
  // NotFound for an unknown id; InvalidArgument if tokens.size() > num_tokens(seq) or a block was
  // registered before with other token ids (blocks before it may have been registered);
  // FailedPrecondition if the sequence was computed under another weight version.
  StatusOr<int32_t> RegisterPrefix(SeqId seq, std::span<const int32_t> tokens);

  // Switches the prefix cache to `version`: every cached entry is dropped (evictable blocks become
  // plain free), so no KV computed under an older version is ever returned by AllocatePrompt.
  // Sequences already allocated keep their blocks. No-op if `version` is the current one.
  void SetWeightVersion(int64_t version);

  // LAMINAR_CHECKs every internal invariant (reference counts equal table occurrences, each block
  // in exactly one state, cache map and block marks agree). O(blocks + table entries); for tests.
  void CheckInvariants() const;

 private:
  // Exact key of a cached full block: the version, the entry of the block before it (0 for the
  // first block) and the block's token ids. Entry ids are never reused, so a key names one prefix
  // even after the blocks of an older prefix are evicted and reused.
  struct CacheKey {
    int64_t version = 0;
    uint64_t parent_entry = 0;
    std::vector<int32_t> tokens;
    auto operator<=>(const CacheKey&) const = default;
  };
  struct CacheEntry {
    BlockId block = 0;
    uint64_t id = 0;
  };
  struct Block {
    int32_t ref_count = 0;
    std::optional<CacheKey> cache_key;  // set while registered in cache_
    uint64_t freed_tick = 0;            // LRU order while evictable
  };
  struct Sequence {
    std::vector<BlockId> table;
    int64_t num_tokens = 0;
    int64_t version = 0;
  };

  int64_t BlocksFor(int64_t num_tokens) const;
  Sequence* Find(SeqId seq);
  const Sequence* Find(SeqId seq) const;
  // Cache hits for `prompt` under the current version, in order (at most one token left over).
  std::vector<BlockId> LookupPrompt(std::span<const int32_t> prompt) const;
  // Takes a free block (plain free first, else the least recently freed evictable one, dropping
  // its cache entry) and sets its reference count to 1. CHECKs that one is available.
  BlockId TakeFreeBlock();
  // Adds a reference to `block`, taking it off the evictable set if it was there.
  void AddRef(BlockId block);
  // Drops a reference; at zero the block becomes evictable (if cached) or free.
  void DropRef(BlockId block);
  void Uncache(BlockId block);

  int32_t block_size_;
  int64_t weight_version_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_;                         // stack of plain free blocks
  std::set<std::pair<uint64_t, BlockId>> evictable_;  // (freed_tick, block), oldest first
  std::map<CacheKey, CacheEntry> cache_;              // registered full blocks
  std::unordered_map<SeqId, Sequence> seqs_;
  uint64_t next_entry_id_ = 1;
  uint64_t tick_ = 0;
};

}  // namespace laminar::rollout
