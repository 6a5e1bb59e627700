// The rollout manager's state machine (docs/architecture.md): the prompt pool, the
// partial-response pool, the experience buffer, rollout health and fault recovery, with the
// exactly-once rule and snapshots for the actor's checkpoint. Pure and socket-free: the
// manager process wraps it in a ZeroMQ server and passes the clock in.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "proto/control.pb.h"
#include "proto/trajectory.pb.h"
#include "rollout/manager/data_order.h"
#include "rollout/manager/prompt_dataset.h"

namespace laminar::manager {

struct ManagerConfig {
  int32_t num_samples = 8;  // n: samples per prompt group (GRPO group size), in [1, 65536]
  // Sampling parameters of every group; `seed` is the run's seed: it orders the data and each
  // group's sampling seed is GroupSeed(seed, row, epoch) (the field in PromptGroup).
  proto::SamplingParams sampling;
  bool shuffle = true;     // shuffle each epoch (EpochOrder); false: file order
  int64_t num_epochs = 0;  // passes over the dataset; 0: unlimited
  // New groups are handed out only while groups in flight + groups in the buffer are fewer than
  // this (the bound on how far generation runs ahead of training); 0: no bound.
  int64_t max_outstanding_groups = 0;
  // InvalidArgument naming the field (num_samples, sampling.temperature/top_p/min_p/top_k/
  // max_tokens, num_epochs, max_outstanding_groups).
  Status Validate() const;
};

// Why a trajectory or partial response was dropped. A drop is never fatal: the caller logs the
// returned Status and goes on.
enum class DropReason : int {
  kInvalid,          // fails proto::Validate, no rollout_id, sample_index >= n, other prompt_ids
  kUnknownPrompt,    // never handed out in this run (an id the data order has not reached)
  kGroupComplete,    // its group already completed (in the buffer or taken): a late duplicate
  kNotAssigned,      // the group is assigned to another rollout (re-issued or moved) or waits to be
                     // re-issued: the sender lost it
  kVersionMismatch,  // the version differs from the one the group was handed out with
  kDuplicateSample,  // this sample already arrived for the group (or, for a partial: it finished,
                     // or the partial holds no new token)
  kPartialGap,       // a partial that starts after the tokens held, or disagrees with them
  kCount,
};
inline constexpr int kNumDropReasons = static_cast<int>(DropReason::kCount);
// "invalid", "unknown_prompt", "group_complete", "not_assigned", "version_mismatch",
// "duplicate_sample", "partial_gap": the suffix of the metric manager/dropped/<name>.
std::string_view DropReasonName(DropReason reason);

// A finished group in the experience buffer: all n samples, scored, from one version.
struct CompletedGroup {
  std::string prompt_id;
  int64_t row = 0;  // index into PromptDataset::rows
  int64_t epoch = 0;
  int64_t version = 0;  // the policy version that generated every sample
  // [n], trajectories[i].sample_index() == i; prompt_ids filled from the dataset.
  std::vector<proto::Trajectory> trajectories;
  double completed_s = 0;  // caller's clock when the last sample arrived
};

// What one rollout last reported (docs/architecture.md's repack inputs) and what the manager gave
// it.
struct RolloutHealth {
  std::string id;
  int64_t version = -1;  // -1 until a heartbeat or a work request tells it
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_capacity = 0;
  int64_t kv_blocks_used_previous = 0;
  double last_seen_s = 0;       // caller's clock: last heartbeat, work request or accepted message
  int64_t num_groups = 0;       // groups in flight on it
  int64_t num_tokens_held = 0;  // response tokens of its in-flight samples known from partials
};

struct ManagerStats {
  DataCursor cursor;
  int64_t num_rows = 0;
  int64_t num_prompts_left = 0;    // new groups still to hand out (-1: unlimited epochs)
  int64_t num_reissue_queued = 0;  // groups waiting to be handed out again
  int64_t num_in_flight = 0;       // groups held by a rollout
  int64_t num_buffered = 0;        // complete groups not yet taken
  int64_t num_issued = 0;          // new groups handed out (first hand-outs)
  int64_t num_reissued = 0;        // groups returned to the pool (rollout dead, restore)
  int64_t num_moved = 0;           // MoveGroup calls that succeeded
  int64_t num_completed = 0;
  int64_t num_taken = 0;  // groups returned by TakeBatch
  int64_t num_trajectories_accepted = 0;
  int64_t num_partials_accepted = 0;
  int64_t num_rollouts_dead = 0;                   // declared dead (ExpireDead or DeclareDead)
  std::array<int64_t, kNumDropReasons> dropped{};  // by DropReason
};

// The rollout manager's state: which prompt goes out next, which rollout holds which group, which
// samples have arrived, which groups are complete. Every method runs in O(work it does) without
// I/O, so a server thread can call it between messages.
//
// Exactly once (docs/architecture.md): each (row, epoch) becomes one group with prompt id
// MakePromptId(row id, epoch), created once as the data cursor passes it; a group accepts sample i
// once, only from the rollout it is assigned to and only with the version it was handed out with;
// when all n samples are in, it leaves the pool for the buffer and accepts nothing more. A group
// whose rollout dies goes back to the pool whole: the samples that arrived are discarded, so every
// group in the buffer has one version and comes from one assignment (docs/architecture.md would
// resume the partial responses on a rollout of the same version; a PartialResponse carries tokens
// but not the sampler's RNG and stop state, so the group restarts, with the same seed, instead).
//
// Owns its state; shares the dataset read-only. Not thread-safe: one thread calls everything.
class ManagerState {
 public:
  // Errors: the config's Validate error; InvalidArgument for a null or empty dataset.
  static StatusOr<std::unique_ptr<ManagerState>> Create(
      std::shared_ptr<const PromptDataset> dataset, ManagerConfig config);

  // ---- prompt pool (docs/architecture.md GetWork) ----

  // Hands up to `max_groups` groups to rollout `rollout_id` holding policy `version`: groups
  // waiting to be re-issued first (oldest first), then new ones in data order while the dataset
  // and max_outstanding_groups allow. Each has n = num_samples, the config's sampling parameters
  // and seed GroupSeed(seed, row, epoch), so a re-issued group is the same request. Registers the
  // rollout (a work request means it is alive at now_s). May return fewer groups, or none.
  // Errors (nothing changes): InvalidArgument for an empty rollout_id, max_groups < 0 or
  // version < 0.
  StatusOr<std::vector<proto::PromptGroup>> Assign(std::string_view rollout_id, int32_t max_groups,
                                                   int64_t version, double now_s);

  // ---- partial responses and trajectories (exactly once) ----

  // Records a streamed partial response of an in-flight sample. Tokens [offset, offset + k) are
  // joined to the ones held: offset must be at most the number held and the overlap must agree,
  // so both deltas and whole prefixes (offset 0) work. Dropped (the Status says why and the
  // reason is counted): kInvalid, kUnknownPrompt, kGroupComplete, kNotAssigned, kVersionMismatch,
  // kDuplicateSample (finished sample, or nothing new), kPartialGap. The partials of a group are
  // discarded when it is re-issued. Errors: InvalidArgument for kInvalid, FailedPrecondition for
  // the others, AlreadyExists for kDuplicateSample.
  Status OnPartial(const proto::PartialResponse& partial, double now_s);

  // Accepts a finished, scored sample (t.rollout_id names the rollout that generated it). Its
  // prompt_ids may be empty (the dataset's are filled in) or must equal the group's. When it is
  // the group's last sample the group moves to the buffer. Dropped, counted by reason, with a
  // Status the caller logs: InvalidArgument (kInvalid), NotFound (kUnknownPrompt),
  // AlreadyExists (kGroupComplete, kDuplicateSample), FailedPrecondition (kNotAssigned,
  // kVersionMismatch).
  Status OnTrajectory(const proto::Trajectory& t, double now_s);

  // ---- experience buffer (docs/architecture.md TakeBatch) ----

  // The `batch_groups` (>= 1) oldest complete groups, in completion order, removed from the
  // buffer; nullopt (nothing removed) while fewer are complete.
  std::optional<std::vector<CompletedGroup>> TakeBatch(int64_t batch_groups);

  // ---- health and faults (docs/architecture.md) ----

  // Records a rollout's heartbeat (role "rollout"); registers an unknown rollout. Errors:
  // proto::Validate's, InvalidArgument for another role.
  Status OnHeartbeat(const proto::Heartbeat& heartbeat, double now_s);

  // Declares dead every rollout not seen for more than `timeout_s` seconds before `now_s`: its
  // groups go back to the pool (re-issued first, in the order they were handed out) and it is
  // forgotten, so its late messages are dropped as kNotAssigned; if it comes back it is a new
  // rollout. Returns the ids declared dead, sorted. `next_check_s`, when given, gets the earliest
  // time any rollout can be declared dead, given none is seen with an earlier time than now_s: no
  // call before it finds one (the deadline of a rollout left alive, or of one first seen later).
  std::vector<std::string> ExpireDead(double now_s, double timeout_s,
                                      double* next_check_s = nullptr);

  // Forgets `rollout_id` now (its peer disconnected) as ExpireDead would; returns the number of
  // groups it held that went back to the pool, or NotFound for an unknown rollout.
  StatusOr<int64_t> DeclareDead(std::string_view rollout_id);

  // A rollout gives group `prompt_id` back (it could not start or continue it: a prompt its
  // engine refuses, a migrated sample it cannot import): the group goes back to the pool whole,
  // as if its rollout had died. Errors (nothing changes): NotFound for a group not in flight;
  // FailedPrecondition when it is not assigned to `rollout_id`.
  Status ReturnGroup(std::string_view prompt_id, std::string_view rollout_id);

  // Repack bookkeeping (docs/architecture.md): group `prompt_id` now runs on rollout `to`, with the
  // samples already received kept; from then on only `to` may send its samples. Call it once the
  // source has exported the group's requests: whatever the source sent before exporting must have
  // been delivered (one ordered stream per rollout), or it is dropped as kNotAssigned. Errors
  // (nothing changes): NotFound for a group not in flight or an unknown `to`;
  // FailedPrecondition when the group is not on `from`, or when `to` last reported another
  // version than the group's (a trajectory is generated by one version, docs/architecture.md).
  Status MoveGroup(std::string_view prompt_id, std::string_view from, std::string_view to);

  // ---- checkpoint (docs/architecture.md: actor dies) ----

  // Everything a resumed run needs to go on with no prompt skipped or handed out twice: the data
  // cursor, the complete groups not yet taken (with their trajectories, prompt_ids omitted), and
  // the groups handed out but not complete (re-issue queue first, then by hand-out order). Samples
  // of incomplete groups, partials and rollouts are not saved: a restored state re-issues those
  // groups whole. The set of groups already taken is the cursor's past minus the buffer and the
  // in-flight groups, so it needs no list. Counters restart from zero.
  nlohmann::json Snapshot() const;

  // Restores a Snapshot into this state, which must be fresh (Create'd, nothing handed out, no
  // rollout known; FailedPrecondition otherwise). All in-flight groups of the snapshot go to the
  // re-issue queue in the snapshot's order. Errors (the state is unchanged): InvalidArgument
  // naming the JSON field ("snapshot.buffer[2].trajectories[0].version: ...") for a missing,
  // mistyped or inconsistent field; FailedPrecondition when the snapshot was taken with another
  // dataset (fingerprint, number of rows), seed, shuffle or num_samples.
  Status Restore(const nlohmann::json& snapshot);

  // ---- views ----

  ManagerStats stats() const;
  // How many finished samples count toward the next `batch_groups` groups: num_samples for each
  // buffered group (at most batch_groups of them), then the finished samples of the in-flight
  // groups nearest completion for the rest; at most batch_groups * num_samples. O(groups in
  // flight).
  int64_t SamplesTowardBatch(int64_t batch_groups) const;
  // Gauges and counters for the metrics sink: manager/{prompts_left, reissue_queued, in_flight,
  // buffered, issued, reissued, moved, completed, taken, trajectories_accepted,
  // partials_accepted, rollouts_alive, rollouts_dead, epoch}, manager/dropped/<reason>.
  std::map<std::string, double> Metrics() const;
  // Every known rollout, sorted by id.
  std::vector<RolloutHealth> Rollouts() const;
  // One rollout, or nullopt when unknown.
  std::optional<RolloutHealth> Rollout(std::string_view rollout_id) const;
  // Where the in-flight group `prompt_id` is: its rollout ("" while it waits to be re-issued), or
  // nullopt when it is not in flight.
  std::optional<std::string> GroupRollout(std::string_view prompt_id) const;
  // True when every epoch has been handed out (never with num_epochs = 0).
  bool exhausted() const;
  const ManagerConfig& config() const { return config_; }
  const PromptDataset& dataset() const { return *dataset_; }

 private:
  struct Sample {
    bool finished = false;
    proto::Trajectory trajectory;         // when finished
    std::vector<int32_t> partial_ids;     // when not: the tokens known from partials
    std::vector<float> partial_logprobs;  // [partial_ids.size()]
  };
  struct Group {
    std::string prompt_id;
    int64_t row = 0;
    int64_t epoch = 0;
    std::string rollout_id;       // "" while waiting in the re-issue queue
    int64_t version = -1;         // of the current hand-out; -1 while waiting
    int64_t handout_seq = 0;      // order of the current hand-out (or of queueing, while waiting)
    std::vector<Sample> samples;  // [n]
    int32_t num_finished = 0;
  };
  struct RolloutRecord {
    RolloutHealth health;
    std::map<int64_t, std::string> groups;  // handout_seq -> prompt id, groups it holds
  };

  ManagerState(std::shared_ptr<const PromptDataset> dataset, ManagerConfig config);

  // The next new group from the cursor (advancing it), or nullopt when exhausted or bounded.
  std::optional<std::string> NextNewGroup();
  void SetEpochOrder(int64_t epoch);
  proto::PromptGroup MakeGroupMessage(const Group& g) const;
  RolloutRecord& Touch(std::string_view rollout_id, double now_s);
  // Sends `g` back to the re-issue queue, discarding what it received.
  void Requeue(Group& g);
  Status Drop(DropReason reason, const std::string& what);
  // The in-flight group that `prompt_id` names and that accepts a message from `rollout_id` with
  // `version` and `sample_index`, or the drop Status (counted).
  StatusOr<Group*> AcceptingGroup(const std::string& kind, const std::string& prompt_id,
                                  const std::string& rollout_id, int64_t version,
                                  int32_t sample_index);
  // kGroupComplete when `prompt_id` names a (row, epoch) the cursor has passed, else
  // kUnknownPrompt.
  DropReason ClassifyNotInFlight(const std::string& prompt_id) const;
  void Complete(Group& g, double now_s);
  // Index of the row with id `id`, or -1.
  int64_t RowOf(std::string_view id) const;

  std::shared_ptr<const PromptDataset> dataset_;
  ManagerConfig config_;
  std::unordered_map<std::string, int64_t> row_by_id_;
  DataCursor cursor_;
  std::vector<int64_t> order_;     // EpochOrder of cursor_.epoch
  std::vector<int64_t> position_;  // position_[row]: index of row in order_
  int64_t next_handout_seq_ = 0;
  std::unordered_map<std::string, Group> in_flight_;  // by prompt id; includes the queued
  std::deque<std::string> reissue_queue_;
  std::deque<CompletedGroup> buffer_;
  std::map<std::string, RolloutRecord, std::less<>> rollouts_;
  ManagerStats counters_;  // the counter fields only; stats() fills the gauges
};

}  // namespace laminar::manager
