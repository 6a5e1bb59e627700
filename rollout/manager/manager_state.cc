// ManagerState: prompt pool, partial-response pool, experience buffer, health and re-issue.
// Snapshot and Restore live in manager_snapshot.cc.
#include "rollout/manager/manager_state.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "proto/codec.h"

namespace laminar::manager {
namespace {

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

StatusCode DropCode(DropReason reason) {
  switch (reason) {
    case DropReason::kInvalid:
      return StatusCode::kInvalidArgument;
    case DropReason::kUnknownPrompt:
      return StatusCode::kNotFound;
    case DropReason::kGroupComplete:
    case DropReason::kDuplicateSample:
      return StatusCode::kAlreadyExists;
    default:
      return StatusCode::kFailedPrecondition;
  }
}

}  // namespace

std::string_view DropReasonName(DropReason reason) {
  switch (reason) {
    case DropReason::kInvalid:
      return "invalid";
    case DropReason::kUnknownPrompt:
      return "unknown_prompt";
    case DropReason::kGroupComplete:
      return "group_complete";
    case DropReason::kNotAssigned:
      return "not_assigned";
    case DropReason::kVersionMismatch:
      return "version_mismatch";
    case DropReason::kDuplicateSample:
      return "duplicate_sample";
    case DropReason::kPartialGap:
      return "partial_gap";
    case DropReason::kCount:
      break;
  }
  return "?";
}

Status ManagerConfig::Validate() const {
  auto bad = [](const std::string& what) {
    return InvalidArgumentError("manager config: " + what);
  };
  if (num_samples < 1 || num_samples > 65536) {
    return bad("num_samples = " + std::to_string(num_samples) + " outside [1, 65536]");
  }
  if (!std::isfinite(sampling.temperature()) || sampling.temperature() < 0) {
    return bad("sampling.temperature = " + std::to_string(sampling.temperature()) + " is negative");
  }
  if (!(sampling.top_p() >= 0 && sampling.top_p() <= 1)) {
    return bad("sampling.top_p = " + std::to_string(sampling.top_p()) + " outside [0, 1]");
  }
  if (!(sampling.min_p() >= 0 && sampling.min_p() <= 1)) {
    return bad("sampling.min_p = " + std::to_string(sampling.min_p()) + " outside [0, 1]");
  }
  if (sampling.top_k() < 0) return bad("sampling.top_k = " + std::to_string(sampling.top_k()));
  if (sampling.max_tokens() < 1) {
    return bad("sampling.max_tokens = " + std::to_string(sampling.max_tokens()) + " is not >= 1");
  }
  if (num_epochs < 0) return bad("num_epochs = " + std::to_string(num_epochs) + " is negative");
  if (max_outstanding_groups < 0) {
    return bad("max_outstanding_groups = " + std::to_string(max_outstanding_groups) +
               " is negative");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<ManagerState>> ManagerState::Create(
    std::shared_ptr<const PromptDataset> dataset, ManagerConfig config) {
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  if (dataset == nullptr || dataset->rows.empty()) {
    return InvalidArgumentError("the rollout manager needs a prompt dataset with rows");
  }
  return std::unique_ptr<ManagerState>(new ManagerState(std::move(dataset), std::move(config)));
}

ManagerState::ManagerState(std::shared_ptr<const PromptDataset> dataset, ManagerConfig config)
    : dataset_(std::move(dataset)), config_(std::move(config)) {
  row_by_id_.reserve(dataset_->rows.size());
  for (size_t i = 0; i < dataset_->rows.size(); ++i) {
    row_by_id_.emplace(dataset_->rows[i].id, static_cast<int64_t>(i));
  }
  SetEpochOrder(0);
}

void ManagerState::SetEpochOrder(int64_t epoch) {
  const auto n = static_cast<int64_t>(dataset_->rows.size());
  order_ = EpochOrder(n, config_.sampling.seed(), epoch, config_.shuffle);
  position_.assign(order_.size(), 0);
  for (size_t i = 0; i < order_.size(); ++i) position_[order_[i]] = static_cast<int64_t>(i);
}

int64_t ManagerState::RowOf(std::string_view id) const {
  auto it = row_by_id_.find(std::string(id));
  return it == row_by_id_.end() ? -1 : it->second;
}

bool ManagerState::exhausted() const {
  return config_.num_epochs > 0 && cursor_.epoch >= config_.num_epochs;
}

// ---- prompt pool ----

std::optional<std::string> ManagerState::NextNewGroup() {
  if (exhausted()) return std::nullopt;
  if (config_.max_outstanding_groups > 0 &&
      static_cast<int64_t>(in_flight_.size() + buffer_.size()) >= config_.max_outstanding_groups) {
    return std::nullopt;
  }
  const int64_t row = order_[cursor_.index];
  Group g;
  g.row = row;
  g.epoch = cursor_.epoch;
  g.prompt_id = MakePromptId(dataset_->rows[row].id, cursor_.epoch);
  g.samples.resize(config_.num_samples);
  if (++cursor_.index == static_cast<int64_t>(order_.size())) {
    cursor_ = {cursor_.epoch + 1, 0};
    SetEpochOrder(cursor_.epoch);
  }
  ++counters_.num_issued;
  std::string id = g.prompt_id;
  auto [it, added] = in_flight_.emplace(id, std::move(g));
  LAMINAR_CHECK(added) << "prompt id " << id << " created twice";
  return id;
}

proto::PromptGroup ManagerState::MakeGroupMessage(const Group& g) const {
  const PromptRow& row = dataset_->rows[g.row];
  proto::PromptGroup m;
  m.set_prompt_id(g.prompt_id);
  m.mutable_prompt_ids()->Assign(row.prompt_ids.begin(), row.prompt_ids.end());
  m.set_num_samples(config_.num_samples);
  *m.mutable_sampling() = config_.sampling;
  m.mutable_sampling()->set_seed(GroupSeed(config_.sampling.seed(), g.row, g.epoch));
  if (row.max_tokens > 0) m.mutable_sampling()->set_max_tokens(row.max_tokens);
  m.set_data_source(row.data_source);
  m.set_ground_truth(row.ground_truth);
  m.set_extra_info_json(row.extra_info_json);
  return m;
}

ManagerState::RolloutRecord& ManagerState::Touch(std::string_view rollout_id, double now_s) {
  auto it = rollouts_.find(rollout_id);
  if (it == rollouts_.end()) {
    it = rollouts_.emplace(std::string(rollout_id), RolloutRecord{}).first;
    it->second.health.id = std::string(rollout_id);
  }
  it->second.health.last_seen_s = std::max(it->second.health.last_seen_s, now_s);
  return it->second;
}

StatusOr<std::vector<proto::PromptGroup>> ManagerState::Assign(std::string_view rollout_id,
                                                               int32_t max_groups, int64_t version,
                                                               double now_s) {
  if (rollout_id.empty()) return InvalidArgumentError("work request: rollout_id is empty");
  if (max_groups < 0 || version < 0) {
    return InvalidArgumentError("work request from " + Quote(rollout_id) +
                                ": max_groups = " + std::to_string(max_groups) +
                                ", version = " + std::to_string(version) + " (both must be >= 0)");
  }
  RolloutRecord& rec = Touch(rollout_id, now_s);
  rec.health.version = version;
  std::vector<proto::PromptGroup> out;
  while (static_cast<int32_t>(out.size()) < max_groups) {
    std::string id;
    if (!reissue_queue_.empty()) {
      id = std::move(reissue_queue_.front());
      reissue_queue_.pop_front();
    } else if (auto fresh = NextNewGroup()) {
      id = std::move(*fresh);
    } else {
      break;
    }
    Group& g = in_flight_.at(id);
    g.rollout_id = std::string(rollout_id);
    g.version = version;
    g.handout_seq = next_handout_seq_++;
    rec.groups.emplace(g.handout_seq, g.prompt_id);
    out.push_back(MakeGroupMessage(g));
  }
  return out;
}

// ---- partial responses and trajectories ----

Status ManagerState::Drop(DropReason reason, const std::string& what) {
  ++counters_.dropped[static_cast<int>(reason)];
  return Status(DropCode(reason), "dropped (" + std::string(DropReasonName(reason)) + ") " + what);
}

DropReason ManagerState::ClassifyNotInFlight(const std::string& prompt_id) const {
  const auto parsed = ParsePromptId(prompt_id);
  if (!parsed) return DropReason::kUnknownPrompt;
  const int64_t row = RowOf(parsed->row_id);
  if (row < 0) return DropReason::kUnknownPrompt;
  const bool passed = parsed->epoch < cursor_.epoch ||
                      (parsed->epoch == cursor_.epoch && position_[row] < cursor_.index);
  return passed ? DropReason::kGroupComplete : DropReason::kUnknownPrompt;
}

StatusOr<ManagerState::Group*> ManagerState::AcceptingGroup(const std::string& kind,
                                                            const std::string& prompt_id,
                                                            const std::string& rollout_id,
                                                            int64_t version, int32_t sample_index) {
  auto what = [&] {  // built on the drop paths only
    return kind + " of " + Quote(prompt_id) + " sample " + std::to_string(sample_index) +
           " from rollout " + Quote(rollout_id);
  };
  auto it = in_flight_.find(prompt_id);
  if (it == in_flight_.end()) {
    const DropReason reason = ClassifyNotInFlight(prompt_id);
    return Drop(reason, what() + (reason == DropReason::kGroupComplete
                                      ? ": the group is already complete"
                                      : ": no such prompt was handed out"));
  }
  Group& g = it->second;
  if (sample_index >= config_.num_samples) {
    return Drop(DropReason::kInvalid,
                what() + ": groups have " + std::to_string(config_.num_samples) + " samples");
  }
  if (g.rollout_id != rollout_id) {
    return Drop(
        DropReason::kNotAssigned,
        what() + (g.rollout_id.empty() ? ": the group waits to be re-issued"
                                       : ": the group is on rollout " + Quote(g.rollout_id)));
  }
  if (version != g.version) {
    return Drop(DropReason::kVersionMismatch, what() + ": version " + std::to_string(version) +
                                                  " but the group was handed out with version " +
                                                  std::to_string(g.version));
  }
  return &g;
}

Status ManagerState::OnPartial(const proto::PartialResponse& p, double now_s) {
  auto what = [&] {  // built on the drop paths only
    return "partial response of " + Quote(p.prompt_id()) + " sample " +
           std::to_string(p.sample_index()) + " from rollout " + Quote(p.rollout_id());
  };
  if (Status st = proto::Validate(p); !st.ok()) {
    return Drop(DropReason::kInvalid, what() + ": " + st.message());
  }
  if (p.rollout_id().empty()) return Drop(DropReason::kInvalid, what() + ": rollout_id is empty");
  LAMINAR_ASSIGN_OR_RETURN(
      Group * g, AcceptingGroup("partial response", p.prompt_id(), p.rollout_id(), p.version(),
                                p.sample_index()));
  Sample& s = g->samples[p.sample_index()];
  if (s.finished) return Drop(DropReason::kDuplicateSample, what() + ": the sample has finished");
  const auto held = static_cast<int64_t>(s.partial_ids.size());
  const int64_t begin = p.offset(), end = begin + p.response_ids_size();
  if (begin > held) {
    return Drop(DropReason::kPartialGap, what() + ": it starts at token " + std::to_string(begin) +
                                             " but " + std::to_string(held) + " are held");
  }
  for (int64_t i = begin; i < std::min(end, held); ++i) {
    if (s.partial_ids[i] != p.response_ids(static_cast<int>(i - begin))) {
      return Drop(DropReason::kPartialGap,
                  what() + ": token " + std::to_string(i) + " differs from the one held");
    }
  }
  if (end <= held) return Drop(DropReason::kDuplicateSample, what() + ": no new token");
  for (int64_t i = held; i < end; ++i) {
    s.partial_ids.push_back(p.response_ids(static_cast<int>(i - begin)));
    s.partial_logprobs.push_back(p.logprobs(static_cast<int>(i - begin)));
  }
  Touch(p.rollout_id(), now_s).health.num_tokens_held += end - held;
  ++counters_.num_partials_accepted;
  return OkStatus();
}

Status ManagerState::OnTrajectory(const proto::Trajectory& t, double now_s) {
  auto what = [&] {  // built on the drop paths only
    return "trajectory of " + Quote(t.prompt_id()) + " sample " + std::to_string(t.sample_index()) +
           " from rollout " + Quote(t.rollout_id());
  };
  if (Status st = proto::Validate(t); !st.ok()) {
    return Drop(DropReason::kInvalid, what() + ": " + st.message());
  }
  if (t.rollout_id().empty()) return Drop(DropReason::kInvalid, what() + ": rollout_id is empty");
  LAMINAR_ASSIGN_OR_RETURN(Group * g, AcceptingGroup("trajectory", t.prompt_id(), t.rollout_id(),
                                                     t.version(), t.sample_index()));
  Sample& s = g->samples[t.sample_index()];
  if (s.finished)
    return Drop(DropReason::kDuplicateSample, what() + ": the sample already arrived");
  const std::vector<int32_t>& prompt = dataset_->rows[g->row].prompt_ids;
  if (t.prompt_ids_size() != 0 &&
      !std::equal(t.prompt_ids().begin(), t.prompt_ids().end(), prompt.begin(), prompt.end())) {
    return Drop(DropReason::kInvalid, what() + ": its prompt_ids differ from the group's prompt");
  }
  RolloutRecord& rec = Touch(t.rollout_id(), now_s);
  rec.health.num_tokens_held -= static_cast<int64_t>(s.partial_ids.size());
  s = Sample{};
  s.finished = true;
  s.trajectory = t;
  if (t.prompt_ids_size() == 0) {
    s.trajectory.mutable_prompt_ids()->Assign(prompt.begin(), prompt.end());
  }
  ++g->num_finished;
  ++counters_.num_trajectories_accepted;
  if (g->num_finished == config_.num_samples) Complete(*g, now_s);
  return OkStatus();
}

void ManagerState::Complete(Group& g, double now_s) {
  CompletedGroup done;
  done.prompt_id = g.prompt_id;
  done.row = g.row;
  done.epoch = g.epoch;
  done.version = g.version;
  done.completed_s = now_s;
  done.trajectories.reserve(g.samples.size());
  for (Sample& s : g.samples) done.trajectories.push_back(std::move(s.trajectory));
  if (auto rec = rollouts_.find(g.rollout_id); rec != rollouts_.end()) {
    rec->second.groups.erase(g.handout_seq);
  }
  ++counters_.num_completed;
  buffer_.push_back(std::move(done));
  const std::string id = g.prompt_id;
  in_flight_.erase(id);  // g dies here
}

// ---- experience buffer ----

std::optional<std::vector<CompletedGroup>> ManagerState::TakeBatch(int64_t batch_groups) {
  LAMINAR_CHECK(batch_groups >= 1) << "TakeBatch of " << batch_groups << " groups";
  if (static_cast<int64_t>(buffer_.size()) < batch_groups) return std::nullopt;
  std::vector<CompletedGroup> out;
  out.reserve(batch_groups);
  for (int64_t i = 0; i < batch_groups; ++i) {
    out.push_back(std::move(buffer_.front()));
    buffer_.pop_front();
  }
  counters_.num_taken += batch_groups;
  return out;
}

// ---- health and faults ----

Status ManagerState::OnHeartbeat(const proto::Heartbeat& hb, double now_s) {
  LAMINAR_RETURN_IF_ERROR(proto::Validate(hb), "heartbeat");
  if (hb.role() != "rollout") {
    return InvalidArgumentError("heartbeat from " + Quote(hb.id()) + " has role " +
                                Quote(hb.role()) + "; the rollout manager tracks role 'rollout'");
  }
  RolloutHealth& h = Touch(hb.id(), now_s).health;
  h.version = hb.version();
  h.running = hb.running();
  h.waiting = hb.waiting();
  h.kv_blocks_used = hb.kv_blocks_used();
  h.kv_blocks_capacity = hb.kv_blocks_capacity();
  h.kv_blocks_used_previous = hb.kv_blocks_used_previous();
  return OkStatus();
}

void ManagerState::Requeue(Group& g) {
  if (auto rec = rollouts_.find(g.rollout_id); rec != rollouts_.end()) {
    rec->second.groups.erase(g.handout_seq);
    for (const Sample& s : g.samples) {
      rec->second.health.num_tokens_held -= static_cast<int64_t>(s.partial_ids.size());
    }
  }
  g.rollout_id.clear();
  g.version = -1;
  g.handout_seq = next_handout_seq_++;
  g.samples.assign(config_.num_samples, Sample{});
  g.num_finished = 0;
  reissue_queue_.push_back(g.prompt_id);
  ++counters_.num_reissued;
}

Status ManagerState::ReturnGroup(std::string_view prompt_id, std::string_view rollout_id) {
  auto it = in_flight_.find(std::string(prompt_id));
  if (it == in_flight_.end() || it->second.rollout_id.empty()) {
    return NotFoundError("group " + Quote(prompt_id) + " is not in flight");
  }
  if (it->second.rollout_id != rollout_id) {
    return FailedPreconditionError("group " + Quote(prompt_id) + " is on " +
                                   Quote(it->second.rollout_id) + ", not " + Quote(rollout_id));
  }
  Requeue(it->second);
  return OkStatus();
}

StatusOr<int64_t> ManagerState::DeclareDead(std::string_view rollout_id) {
  auto it = rollouts_.find(rollout_id);
  if (it == rollouts_.end()) return NotFoundError("no rollout " + Quote(rollout_id) + " is known");
  const std::map<int64_t, std::string> groups = std::move(it->second.groups);
  rollouts_.erase(it);
  for (const auto& [seq, prompt_id] : groups) Requeue(in_flight_.at(prompt_id));
  ++counters_.num_rollouts_dead;
  return static_cast<int64_t>(groups.size());
}

std::vector<std::string> ManagerState::ExpireDead(double now_s, double timeout_s,
                                                  double* next_check_s) {
  std::vector<std::string> dead;
  double next = now_s + timeout_s;  // the deadline of a rollout first seen after now
  for (const auto& [id, rec] : rollouts_) {
    if (now_s - rec.health.last_seen_s > timeout_s) {
      dead.push_back(id);
    } else {
      next = std::min(next, rec.health.last_seen_s + timeout_s);
    }
  }
  if (next_check_s) *next_check_s = next;
  for (const std::string& id : dead) {
    LAMINAR_CHECK(DeclareDead(id).ok()) << "rollout " << id << " vanished";
  }
  return dead;
}

Status ManagerState::MoveGroup(std::string_view prompt_id, std::string_view from,
                               std::string_view to) {
  const std::string what =
      "move of " + Quote(prompt_id) + " from " + Quote(from) + " to " + Quote(to);
  auto it = in_flight_.find(std::string(prompt_id));
  if (it == in_flight_.end()) return NotFoundError(what + ": the group is not in flight");
  Group& g = it->second;
  if (from.empty() || g.rollout_id != from) {
    return FailedPreconditionError(what + ": the group is on " +
                                   (g.rollout_id.empty() ? "no rollout" : Quote(g.rollout_id)));
  }
  auto dest = rollouts_.find(to);
  if (dest == rollouts_.end())
    return NotFoundError(what + ": no rollout " + Quote(to) + " is known");
  if (from == to) return InvalidArgumentError(what + ": source and destination are the same");
  if (dest->second.health.version != g.version) {
    return FailedPreconditionError(
        what + ": the destination holds version " + std::to_string(dest->second.health.version) +
        " and the group was handed out with version " + std::to_string(g.version));
  }
  int64_t tokens = 0;
  for (const Sample& s : g.samples) tokens += static_cast<int64_t>(s.partial_ids.size());
  RolloutRecord& src = rollouts_.find(from)->second;
  src.groups.erase(g.handout_seq);
  src.health.num_tokens_held -= tokens;
  dest->second.groups.emplace(g.handout_seq, g.prompt_id);
  dest->second.health.num_tokens_held += tokens;
  g.rollout_id = std::string(to);
  ++counters_.num_moved;
  return OkStatus();
}

// ---- views ----

ManagerStats ManagerState::stats() const {
  ManagerStats s = counters_;
  s.cursor = cursor_;
  s.num_rows = static_cast<int64_t>(dataset_->rows.size());
  s.num_prompts_left =
      config_.num_epochs == 0
          ? -1
          : std::max<int64_t>(0, (config_.num_epochs - cursor_.epoch) * s.num_rows - cursor_.index);
  s.num_reissue_queued = static_cast<int64_t>(reissue_queue_.size());
  s.num_in_flight = static_cast<int64_t>(in_flight_.size()) - s.num_reissue_queued;
  s.num_buffered = static_cast<int64_t>(buffer_.size());
  return s;
}

int64_t ManagerState::SamplesTowardBatch(int64_t batch_groups) const {
  if (batch_groups <= 0) return 0;
  const int64_t n = config_.num_samples;
  const int64_t buffered = std::min<int64_t>(static_cast<int64_t>(buffer_.size()), batch_groups);
  std::vector<int32_t> finished;
  finished.reserve(in_flight_.size());
  for (const auto& [id, g] : in_flight_) {
    if (g.num_finished > 0) finished.push_back(g.num_finished);
  }
  const size_t rest = static_cast<size_t>(batch_groups - buffered);
  if (finished.size() > rest) {
    std::nth_element(finished.begin(), finished.begin() + static_cast<std::ptrdiff_t>(rest),
                     finished.end(), std::greater<>());
    finished.resize(rest);
  }
  int64_t samples = buffered * n;
  for (int32_t f : finished) samples += f;
  return samples;
}

std::map<std::string, double> ManagerState::Metrics() const {
  const ManagerStats s = stats();
  std::map<std::string, double> m = {
      {"manager/prompts_left", static_cast<double>(s.num_prompts_left)},
      {"manager/reissue_queued", static_cast<double>(s.num_reissue_queued)},
      {"manager/in_flight", static_cast<double>(s.num_in_flight)},
      {"manager/buffered", static_cast<double>(s.num_buffered)},
      {"manager/issued", static_cast<double>(s.num_issued)},
      {"manager/reissued", static_cast<double>(s.num_reissued)},
      {"manager/moved", static_cast<double>(s.num_moved)},
      {"manager/completed", static_cast<double>(s.num_completed)},
      {"manager/taken", static_cast<double>(s.num_taken)},
      {"manager/trajectories_accepted", static_cast<double>(s.num_trajectories_accepted)},
      {"manager/partials_accepted", static_cast<double>(s.num_partials_accepted)},
      {"manager/rollouts_alive", static_cast<double>(rollouts_.size())},
      {"manager/rollouts_dead", static_cast<double>(s.num_rollouts_dead)},
      {"manager/epoch", static_cast<double>(s.cursor.epoch)},
  };
  for (int r = 0; r < kNumDropReasons; ++r) {
    m["manager/dropped/" + std::string(DropReasonName(static_cast<DropReason>(r)))] =
        static_cast<double>(s.dropped[r]);
  }
  return m;
}

std::vector<RolloutHealth> ManagerState::Rollouts() const {
  std::vector<RolloutHealth> out;
  out.reserve(rollouts_.size());
  for (const auto& [id, rec] : rollouts_) {
    out.push_back(rec.health);
    out.back().num_groups = static_cast<int64_t>(rec.groups.size());
  }
  return out;
}

std::optional<RolloutHealth> ManagerState::Rollout(std::string_view rollout_id) const {
  auto it = rollouts_.find(rollout_id);
  if (it == rollouts_.end()) return std::nullopt;
  RolloutHealth h = it->second.health;
  h.num_groups = static_cast<int64_t>(it->second.groups.size());
  return h;
}

std::optional<std::string> ManagerState::GroupRollout(std::string_view prompt_id) const {
  auto it = in_flight_.find(std::string(prompt_id));
  if (it == in_flight_.end()) return std::nullopt;
  return it->second.rollout_id;
}

}  // namespace laminar::manager
