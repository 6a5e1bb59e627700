// Repack placement (Laminar's Algorithm 1, docs/architecture.md) as a pure function over plain
// data: which rollouts are sources, and into which destination each source's in-flight requests
// move so the source is freed to pull the newest version. The migration itself
// (RolloutEngine::Export/Import) and the schedule (every repack.interval_s, after each new version)
// belong to the manager.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace laminar::rollout {

// The `repack.*` keys the placement reads.
struct RepackConfig {
  bool enabled = true;  // repack.enabled: false plans no moves
  // repack.max_batch: running sequences per rollout beyond which decode stops getting faster
  // (>= 1). A rollout with fewer is a candidate source; no destination ends above it. The default
  // is a placeholder; measure it per model and GPU (decode tokens/s against batch size).
  int32_t max_batch = 64;
  // InvalidArgument naming "repack.max_batch" when it is < 1.
  Status Validate() const;
};

// One running sequence of a rollout's decode batch (one sample; a GRPO group of n in-flight
// samples is n entries). `id` is whatever the manager addresses it by in a RepackCommand.
struct RepackRequest {
  std::string id;  // non-empty, unique within its rollout
  // KV token slots the sequence needs on a destination after re-prefill: prompt + generated
  // tokens, rounded up to whole KV blocks (num_blocks(seq) * block_size). In [0, capacity].
  int64_t kv_tokens = 0;
};

// One rollout as the manager last saw it. Token counts come from Heartbeat block counts times the
// rollout's block size: kv_used_tokens = kv_blocks_used * block_size, and likewise for capacity
// and previous. running.size() is the heartbeat's `running`, num_waiting its `waiting`.
// TODO: Heartbeat carries counts only; the per-sequence ids and KV sizes need a field there
// (or the manager's own ledger of what it dispatched).
struct RepackRollout {
  std::string id;           // non-empty, unique among the rollouts of one call
  int64_t version = 0;      // weight version its requests are generated under (>= 0)
  int64_t num_waiting = 0;  // requests queued and not admitted (>= 0)
  std::vector<RepackRequest> running;
  int64_t kv_capacity_tokens = 0;  // KV pool size, in [1, kMaxRepackKvTokens]
  // KV slots in use now and at the previous check, in [0, capacity]. Shared GRPO prompt blocks
  // count once here, so the sum of running[i].kv_tokens may exceed kv_used_tokens.
  int64_t kv_used_tokens = 0;
  int64_t kv_used_previous_tokens = 0;
  // Whether a version newer than `version` exists (the actor announced one). Only such a rollout
  // is worth freeing: a freed source pulls the newest version, and one that already holds it
  // would only take fresh prompts it can take anyway.
  bool newer_version_exists = true;
};

// Larger capacities are rejected as a unit mistake (bytes for tokens); it also keeps the density
// comparisons exact in int64.
inline constexpr int64_t kMaxRepackKvTokens = int64_t{1} << 31;

// One request to migrate: Export from `source`, Import on `destination` (docs/architecture.md).
struct RepackMove {
  std::string request_id;
  std::string source;
  std::string destination;
  int64_t version = 0;    // of source and destination alike
  int64_t kv_tokens = 0;  // the request's RepackRequest::kv_tokens
  bool operator==(const RepackMove&) const = default;
};

// The outcome of one repack round. The counts feed the metrics repack/requests_moved,
// repack/kv_tokens_moved and repack/sources_freed (repack/rounds and repack/overhead_s are the
// manager's).
struct RepackPlan {
  // Grouped by source, a source's requests in id order, all to one destination. Sources appear in
  // placement order: version ascending, then KV footprint ascending, then id.
  std::vector<RepackMove> moves;
  // Every source with a move: after the moves it runs nothing and pulls the newest version.
  std::vector<std::string> freed_sources;
  int64_t requests_moved = 0;   // moves.size()
  int64_t kv_tokens_moved = 0;  // sum of moves[i].kv_tokens
  int64_t sources_freed = 0;    // freed_sources.size()
  bool operator==(const RepackPlan&) const = default;
};

// Whether `rollout` is a repack source (docs/architecture.md): nothing waiting, KV usage falling
// (kv_used_tokens < kv_used_previous_tokens), 1 <= running.size() < config.max_batch, and a newer
// version exists for it to pull once freed. It is winding down its long tail, so its batch decodes
// below the throughput it could reach.
bool IsRepackSource(const RepackRollout& rollout, const RepackConfig& config);

// Plans one repack round (Laminar's Algorithm 1 as docs/architecture.md states it). Within each
// version group, sources are taken in ascending KV footprint (the sum of their requests' kv_tokens;
// ties by id), smallest first because they are the cheapest to move and the likeliest to fit. Each
// source moves whole into the one destination that ends most densely packed, (kv_used + moved) /
// capacity, ties by the smaller id, among the rollouts of its version that
//   - are not the source, were not freed this round, and have nothing waiting (a queue means
//     they already have more work than they admit) and at least one running sequence (moving a
//     tail onto an idle rollout frees nothing);
//   - stay within KV capacity: kv_used_tokens + everything moved in <= kv_capacity_tokens. This
//     is current KV, as the heartbeats report it, not prompt + max_tokens: a long-tail request's
//     max_tokens bound is what makes it long, and reserving it would forbid nearly every move;
//     growth past capacity is absorbed by the destination's preemption (recompute), which is
//     correct, only slower;
//   - stay within the batch: running.size() + sequences moved in <= config.max_batch.
// A source that fits nowhere is left untouched (and may still receive later sources). A rollout
// that received is a destination for the rest of the round, never a source; a freed source never
// receives. Sources are never split across destinations: one RepackCommand per source, and a
// source is either freed completely or not touched.
//
// Deterministic: the plan depends only on the set of rollouts and of their requests, not on their
// order in the input. `config.enabled == false` returns an empty plan (after validation).
// Errors: config.Validate()'s; InvalidArgument naming the rollout (and request) for an empty or
// duplicate rollout id, a negative version or waiting count, a capacity outside
// [1, kMaxRepackKvTokens], KV usage outside [0, capacity], an empty or duplicate request id, or a
// request's kv_tokens outside [0, capacity].
StatusOr<RepackPlan> PlanRepack(std::span<const RepackRollout> rollouts,
                                const RepackConfig& config);

}  // namespace laminar::rollout
