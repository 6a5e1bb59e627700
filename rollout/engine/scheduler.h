// Step scheduler of the rollout engine: continuous batching with chunked prefill, admission control
// by free KV blocks, GRPO group prefix sharing by Fork, the version-keyed prefix cache across
// requests, and preemption by recompute. A pure planning component over KvBlockManager: it decides
// what each engine step computes and moves no KV itself. References: vLLM (Kwon et al., SOSP 2023,
// §4.5; automatic prefix caching), Sarathi-Serve (Agrawal et al., OSDI 2024, §4.2).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "rollout/engine/kv_block_manager.h"

namespace laminar::rollout {

using RequestId = SeqId;  // one sequence per request; the id is also its block manager SeqId

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // token budget of one step (decodes + prefill chunks)
  int64_t max_num_seqs = 256;             // running sequences at most
  // InvalidArgument naming the field unless both are > 0.
  Status Validate() const;
};

// One sequence's work in a step. The sequence's tokens are its prompt followed by its generated
// tokens; the engine feeds positions [start, start + num_tokens), writes their KV into the slots
// given by block_table (token i in slot i % block_size of block block_table[i / block_size]) and
// attends to positions [0, start + num_tokens).
struct ScheduledSeq {
  RequestId id = 0;
  int64_t start = 0;       // first position processed this step
  int64_t num_tokens = 0;  // >= 1
  // True when start + num_tokens is the sequence's full length (its last prefill chunk, or a
  // decode): the engine samples one new token for `id` from the logits of the last position.
  bool samples = false;
  // Speculative decoding (a decode only): the engine feeds the last sampled token followed by a
  // token tree of num_draft_tokens drafted tokens (num_tokens = 1 + num_draft_tokens), whose K/V
  // go to the slots of positions start + 1 .. start + num_draft_tokens (provisionally), and
  // appends 1 .. 1 + num_draft_tokens tokens (the accepted drafts and one sampled token).
  int64_t num_draft_tokens = 0;
  // Requests forked from `id` this step (GRPO group children). They share id's prompt blocks and
  // each samples its own first token from the same last-position logits. Non-empty only if samples.
  std::vector<RequestId> forked;
  std::vector<BlockId> block_table;  // covers at least start + num_tokens slots
};

struct Plan {
  std::vector<ScheduledSeq> seqs;  // decodes first, then prefill chunks; each id at most once
  // Copy-on-write KV copies to execute, in order, before writing this step's KV.
  std::vector<BlockCopy> copies;
  // Requests preempted this step (their KV is gone; they wait to be re-prefilled).
  std::vector<RequestId> preempted;
  int64_t num_batched_tokens = 0;  // sum of num_tokens, <= max_num_batched_tokens
  bool empty() const { return seqs.empty(); }
};

struct SchedulerStats {
  int64_t num_running = 0;  // admitted, holding KV blocks
  int64_t num_waiting = 0;  // not yet admitted, or preempted
  int32_t num_kv_blocks_used = 0;
  int32_t num_kv_blocks_total = 0;
  int64_t num_preemptions = 0;  // total since construction
  int64_t num_finished = 0;     // by Finish or by reaching max_tokens
  int64_t num_aborted = 0;
  int64_t num_migrated = 0;  // removed by Migrate (exported to another engine)
  // Prefix cache (totals since construction). Every admission (first or after a preemption) looks
  // its prompt up; forked GRPO children do not (they share their parent's blocks instead).
  // rollout/prefix_cache_hit_rate = num_prompt_tokens_reused / num_prompt_tokens_looked_up.
  int64_t num_prompt_tokens_looked_up = 0;  // prompt tokens of admitted requests
  int64_t num_prompt_tokens_reused = 0;     // of those, found in the cache and not prefilled
  int32_t num_kv_blocks_cached = 0;         // blocks registered in the cache now, used or evictable
};

// Plans engine steps. Step contract, one thread:
//   1. Schedule() returns a Plan. The KV slots it lists are already allocated: every position
//      processed this step has a slot, and the token sampled this step has none yet (it gets its
//      slot when it is fed, at the next step, as a decode).
//   2. The engine runs the plan (copies first) and calls OnTokens() with exactly the ids that
//      sampled a token (each `samples` entry's id and its `forked` ids), minus any finished or
//      aborted meanwhile. This must happen before the next Schedule(), even for an empty plan.
//   3. Between steps, Add(), Finish() and Abort() may be called at any time (also between 1 and 2).
// A request leaves by Finish/Abort or automatically when it has generated max_tokens tokens.
//
// Guarantees: decodes are scheduled before prefill chunks; waiting requests are admitted strictly
// in order (preempted ones first) when the block manager can hold their whole remaining prefill;
// the earliest admitted running request is never preempted, and every request fits the empty cache
// (checked at Add), so every request eventually finishes.
//
// Prefix cache: a request is admitted with KvBlockManager::AllocatePrompt on its prompt ids, so the
// longest run of full prompt blocks cached under the current weight version is reused and its
// first plan entry starts past them (always a multiple of block_size, and at least the last prompt
// token is computed, in a fresh block: a cached or shared block is never written). After each step
// (in OnTokens) the full blocks of the prompt positions computed so far are registered, so later
// requests, GRPO children prefilled on their own and preempted requests re-prefilling their prompt
// hit them. Only prompt positions are cached: generated tokens are not known here. Blocks of
// finished, aborted or preempted requests stay cached while evictable (reused before eviction);
// the engine's SetWeightVersion on mutable_blocks() drops every entry, so KV computed under old
// weights is never reused, and a sequence allocated under an older version is never registered.
//
// Owns the block manager. Not thread-safe.
class Scheduler {
 public:
  // config must be valid (CHECK; use Validate() on untrusted configs). block_size and num_blocks
  // as for KvBlockManager.
  Scheduler(SchedulerConfig config, int32_t block_size, int32_t num_blocks);

  // Queues a request with prompt token ids `prompt_ids` (>= 1 ids, copied; the engine adds BOS for
  // an empty text) that may generate up to `max_tokens` (>= 1) tokens. At admission the prompt is
  // looked up in the prefix cache and only its uncached positions are prefilled (class comment).
  // `group_parent`: another request of the same GRPO group with the same prompt. If it has not
  // finished its prompt when this request would be prefilled, this request is forked from it
  // instead: the prompt is prefilled once and its blocks are shared (copied on write). Otherwise
  // this request is prefilled on its own (reusing the parent's cached prompt blocks).
  // Errors (nothing queued): AlreadyExists for a known id; InvalidArgument for an empty prompt,
  // max_tokens < 1 or a parent whose prompt ids differ; NotFound for an unknown parent;
  // ResourceExhausted when the request could not fit an empty cache:
  // ceil((prompt_ids.size() + max_tokens - 1) / block_size) blocks > num_blocks (the last generated
  // token never needs a KV slot).
  Status Add(RequestId id, std::span<const int32_t> prompt_ids, int64_t max_tokens,
             std::optional<RequestId> group_parent = std::nullopt);

  // Removes a request (stop string or EOS seen) and frees its blocks. NotFound for an unknown id.
  Status Finish(RequestId id);
  // Same, counted as aborted. NotFound for an unknown id.
  Status Abort(RequestId id);
  // Same, counted as migrated: the request continues in another engine. NotFound for an unknown
  // id.
  Status Migrate(RequestId id);

  // Draft tokens the engine would verify for a decoding request this step (0: none).
  using DraftWanted = std::function<int64_t(RequestId)>;

  // Plans one step (see the class comment). FailedPrecondition if the previous plan's OnTokens()
  // has not been called. Order: (1) running decodes, in admission order, each taking one token of
  // budget; a decode that cannot get a block preempts the most recently admitted running request
  // (possibly itself) until it can; (2) chunks of running prefills; (3) waiting requests in order,
  // while the budget, max_num_seqs and free blocks allow; (4) when `draft_wanted` is given, draft
  // tokens for the decodes of (1), in order, from what is left of the budget and the free blocks:
  // each gets min(draft_wanted(id), max_tokens - generated - 1) or as many as fit, never
  // preempting or delaying anything. Their slots are held until OnTokens.
  StatusOr<Plan> Schedule(const DraftWanted& draft_wanted = nullptr);

  // Records the tokens sampled by the last plan: `sampled` must be exactly its sampling ids still
  // present (any order); otherwise InvalidArgument naming the first missing or unexpected id and
  // nothing changes. `num_appended` (empty: 1 each) gives how many tokens each of them appended,
  // in [1, 1 + its num_draft_tokens] (InvalidArgument otherwise): the accepted drafts, whose K/V
  // the engine has moved to the slots of their positions, and one sampled token. The slots of the
  // rejected drafts are released here. The last plan's KV must have been written: the full prompt
  // blocks it completed are registered in the prefix cache (for each plan entry that computed
  // prompt positions, through it or, if it is gone, one of its forked children still running).
  // Returns the ids that reached max_tokens: they are finished and freed (their blocks stay cached
  // while evictable). FailedPrecondition if no plan is outstanding.
  StatusOr<std::vector<RequestId>> OnTokens(std::span<const RequestId> sampled,
                                            std::span<const int64_t> num_appended = {});

  // ---- inspection ----
  SchedulerStats stats() const;
  bool HasRequest(RequestId id) const { return requests_.contains(id); }
  // Whether `id` runs and its next chunk is a decode (all its tokens but the last have their KV):
  // the sequences a step may draft for. False for an unknown id.
  bool IsDecoding(RequestId id) const {
    auto it = requests_.find(id);
    return it != requests_.end() && it->second.running &&
           it->second.length() - it->second.num_computed == 1;
  }
  bool idle() const { return requests_.empty(); }
  // Tokens generated so far by `id`; NotFound for an unknown id.
  StatusOr<int64_t> num_generated(RequestId id) const;
  const SchedulerConfig& config() const { return config_; }
  const KvBlockManager& blocks() const { return blocks_; }
  // For the engine's weight swaps (SetWeightVersion) between steps: the prefix cache is emptied and
  // sequences allocated before are never registered. Sequences must not be touched.
  KvBlockManager& mutable_blocks() { return blocks_; }
  // LAMINAR_CHECKs the scheduler's and the block manager's invariants. For tests.
  void CheckInvariants() const;

 private:
  struct Request {
    std::vector<int32_t> prompt_ids;
    int64_t max_tokens = 0;
    int64_t num_generated = 0;
    int64_t num_computed = 0;  // positions whose KV is in the cache (0 while waiting)
    bool running = false;
    std::optional<RequestId> fork_parent;  // set while waiting to be forked from it
    int64_t num_prompt_tokens() const { return std::ssize(prompt_ids); }
    int64_t length() const { return num_prompt_tokens() + num_generated; }
  };

  Status Remove(RequestId id);
  // Frees `id`'s blocks and puts it at the front of the waiting queue.
  void Preempt(RequestId id, Plan& plan);
  // Adds `id`'s next chunk of `n` tokens to the plan; forks waiting group children on the last
  // chunk of a prompt.
  void ScheduleChunk(RequestId id, int64_t n, Plan& plan);
  // Children waiting to fork from `parent` lose it and will be prefilled on their own.
  void DetachChildren(RequestId parent);
  // Admits waiting_[index] if max_num_seqs and the free blocks allow: allocates its prompt through
  // the prefix cache plus slots for its generated tokens. Returns whether it was admitted.
  bool TryAdmit(size_t index);
  // Registers the full prompt blocks computed by the last plan (see OnTokens).
  void RegisterComputedPrompts();

  SchedulerConfig config_;
  KvBlockManager blocks_;
  std::unordered_map<RequestId, Request> requests_;
  std::deque<RequestId> waiting_;   // admission order; preempted requests at the front
  std::vector<RequestId> running_;  // admission order
  bool step_in_flight_ = false;
  std::unordered_set<RequestId> expected_samples_;
  std::unordered_map<RequestId, int64_t>
      draft_slots_;  // draft tokens granted in the step in flight
  // Plan entries of the step in flight that computed prompt positions: the entry's id followed by
  // its forked children (any of them holds the same prompt blocks).
  std::vector<std::vector<RequestId>> prompt_writers_;
  int64_t num_preemptions_ = 0;
  int64_t num_finished_ = 0;
  int64_t num_aborted_ = 0;
  int64_t num_migrated_ = 0;
  int64_t num_prompt_tokens_looked_up_ = 0;
  int64_t num_prompt_tokens_reused_ = 0;
};

}  // namespace laminar::rollout
