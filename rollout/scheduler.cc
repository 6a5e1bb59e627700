// Scheduler: one engine step's plan from the running and waiting requests (see scheduler.h).
#include "rollout/scheduler.h"

#include <algorithm>
#include <string>
#include <utility>

namespace laminar::rollout {
namespace {

std::string ReqName(RequestId id) { return "request " + std::to_string(id); }

Status UnknownRequest(RequestId id) { return NotFoundError("scheduler: unknown " + ReqName(id)); }

}  // namespace

Status SchedulerConfig::Validate() const {
  if (max_num_batched_tokens <= 0) {
    return InvalidArgumentError("scheduler config: max_num_batched_tokens must be > 0, got " +
                                std::to_string(max_num_batched_tokens));
  }
  if (max_num_seqs <= 0) {
    return InvalidArgumentError("scheduler config: max_num_seqs must be > 0, got " +
                                std::to_string(max_num_seqs));
  }
  return OkStatus();
}

Scheduler::Scheduler(SchedulerConfig config, int32_t block_size, int32_t num_blocks)
    : config_(config), blocks_(block_size, num_blocks) {
  const Status st = config_.Validate();
  LAMINAR_CHECK(st.ok()) << st;
}

Status Scheduler::Add(RequestId id, int64_t num_prompt_tokens, int64_t max_tokens,
                      std::optional<RequestId> group_parent) {
  if (requests_.contains(id)) return AlreadyExistsError("scheduler: " + ReqName(id) + " exists");
  if (num_prompt_tokens < 1 || max_tokens < 1) {
    return InvalidArgumentError("scheduler: " + ReqName(id) + " needs num_prompt_tokens >= 1 and " +
                                "max_tokens >= 1, got " + std::to_string(num_prompt_tokens) +
                                " and " + std::to_string(max_tokens));
  }
  // The last generated token is never fed back, so it needs no KV slot.
  const int64_t max_slots = num_prompt_tokens + max_tokens - 1;
  const int64_t max_blocks = blocks_.BlocksToAllocate(max_slots);
  if (max_blocks > blocks_.num_total_blocks()) {
    return ResourceExhaustedError(
        "scheduler: " + ReqName(id) + " (" + std::to_string(num_prompt_tokens) +
        " prompt tokens + up to " + std::to_string(max_tokens) + " generated) needs up to " +
        std::to_string(max_blocks) + " KV blocks of " + std::to_string(blocks_.block_size()) +
        " tokens; the whole cache holds " + std::to_string(blocks_.num_total_blocks()) + " blocks");
  }
  Request r;
  r.num_prompt_tokens = num_prompt_tokens;
  r.max_tokens = max_tokens;
  if (group_parent.has_value()) {
    auto it = requests_.find(*group_parent);
    if (it == requests_.end()) return UnknownRequest(*group_parent).WithContext(ReqName(id));
    RequestId root = *group_parent;
    // Fork from the group's root, so that every pending child hangs off a prefilled request.
    if (it->second.fork_parent.has_value()) {
      root = *it->second.fork_parent;
      it = requests_.find(root);
    }
    const Request& parent = it->second;
    if (parent.num_prompt_tokens != num_prompt_tokens) {
      return InvalidArgumentError("scheduler: " + ReqName(id) + " has " +
                                  std::to_string(num_prompt_tokens) +
                                  " prompt tokens but its group parent " + ReqName(root) + " has " +
                                  std::to_string(parent.num_prompt_tokens));
    }
    if (parent.num_generated == 0 && parent.num_computed < parent.num_prompt_tokens) {
      r.fork_parent = root;
    }
  }
  requests_.emplace(id, r);
  waiting_.push_back(id);
  return OkStatus();
}

Status Scheduler::Finish(RequestId id) {
  LAMINAR_RETURN_IF_ERROR(Remove(id));
  ++num_finished_;
  return OkStatus();
}

Status Scheduler::Abort(RequestId id) {
  LAMINAR_RETURN_IF_ERROR(Remove(id));
  ++num_aborted_;
  return OkStatus();
}

Status Scheduler::Remove(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return UnknownRequest(id);
  if (it->second.running) {
    const Status st = blocks_.Free(id);
    LAMINAR_CHECK(st.ok()) << st;
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  requests_.erase(it);
  expected_samples_.erase(id);
  DetachChildren(id);
  return OkStatus();
}

void Scheduler::DetachChildren(RequestId parent) {
  for (RequestId w : waiting_) {
    Request& r = requests_.at(w);
    if (r.fork_parent == parent) r.fork_parent.reset();
  }
}

void Scheduler::Preempt(RequestId id, Plan& plan) {
  Request& r = requests_.at(id);
  LAMINAR_CHECK(r.running) << ReqName(id);
  const Status st = blocks_.Free(id);
  LAMINAR_CHECK(st.ok()) << st;
  r.running = false;
  r.num_computed = 0;  // recompute: prompt and generated tokens are prefilled again
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  plan.preempted.push_back(id);
  ++num_preemptions_;
}

void Scheduler::ScheduleChunk(RequestId id, int64_t n, Plan& plan) {
  Request& r = requests_.at(id);
  LAMINAR_CHECK(n >= 1 && r.num_computed + n <= r.length()) << ReqName(id) << " chunk " << n;
  LAMINAR_CHECK_GE(*blocks_.num_tokens(id), r.num_computed + n) << ReqName(id);
  ScheduledSeq s;
  s.id = id;
  s.start = r.num_computed;
  s.num_tokens = n;
  r.num_computed += n;
  s.samples = r.num_computed == r.length();
  if (s.samples) expected_samples_.insert(id);
  if (s.samples && r.num_generated == 0) {
    // The prompt is complete: fork the group children waiting for it (they follow it in waiting_).
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      Request& c = requests_.at(*it);
      if (c.fork_parent != id) {
        ++it;
        continue;
      }
      c.fork_parent.reset();
      if (std::ssize(running_) >= config_.max_num_seqs) {
        ++it;  // no room: it will be prefilled on its own
        continue;
      }
      const Status st = blocks_.Fork(id, *it);
      LAMINAR_CHECK(st.ok()) << st;
      c.running = true;
      c.num_computed = r.num_computed;
      running_.push_back(*it);
      s.forked.push_back(*it);
      expected_samples_.insert(*it);
      it = waiting_.erase(it);
    }
  }
  const std::span<const BlockId> table = *blocks_.block_table(id);
  s.block_table.assign(table.begin(), table.end());
  plan.num_batched_tokens += n;
  plan.seqs.push_back(std::move(s));
}

StatusOr<Plan> Scheduler::Schedule() {
  if (step_in_flight_) {
    return FailedPreconditionError("scheduler: Schedule() before OnTokens() of the previous plan");
  }
  Plan plan;
  int64_t budget = config_.max_num_batched_tokens;
  // (1) Sequences with one position left (decodes, and prefills down to their last token).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    const RequestId id = running_[i];
    const Request& r = requests_.at(id);
    if (r.length() - r.num_computed != 1) {
      ++i;
      continue;
    }
    const int64_t missing = r.num_computed + 1 - *blocks_.num_tokens(id);
    bool self_preempted = false;
    while (missing > 0 && !blocks_.CanAppend(id, missing)) {
      // Victims come from the back, past i: never a sequence already in this plan.
      const RequestId victim = running_.back();
      Preempt(victim, plan);
      if (victim == id) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the last running request
    if (missing > 0) {
      StatusOr<std::vector<BlockCopy>> copies = blocks_.Append(id, missing);
      LAMINAR_CHECK(copies.ok()) << copies.status();
      plan.copies.insert(plan.copies.end(), copies->begin(), copies->end());
    }
    ScheduleChunk(id, 1, plan);
    --budget;
    ++i;
  }
  // (2) Chunks of running prefills; their blocks were allocated at admission.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    const RequestId id = running_[i];
    const Request& r = requests_.at(id);
    const int64_t left = r.length() - r.num_computed;
    if (left <= 1) continue;  // done this step in (1), or forked this step
    const int64_t n = std::min(left, budget);
    ScheduleChunk(id, n, plan);
    budget -= n;
  }
  // (3) Admission in order; stops at the first request that does not fit (no overtaking, so a
  // large request is not starved). Children waiting to be forked are skipped.
  for (size_t i = 0; i < waiting_.size() && budget > 0;) {
    const RequestId id = waiting_[i];
    Request& r = requests_.at(id);
    if (r.fork_parent.has_value()) {
      ++i;
      continue;
    }
    if (std::ssize(running_) >= config_.max_num_seqs || !blocks_.CanAllocate(r.length())) break;
    const Status st = blocks_.Allocate(id, r.length());
    LAMINAR_CHECK(st.ok()) << st;
    r.running = true;
    r.num_computed = 0;
    running_.push_back(id);
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    const int64_t n = std::min(r.length(), budget);
    ScheduleChunk(id, n, plan);  // may erase forked children, which lie after i
    budget -= n;
  }
  step_in_flight_ = true;
  return plan;
}

StatusOr<std::vector<RequestId>> Scheduler::OnTokens(std::span<const RequestId> sampled) {
  if (!step_in_flight_) return FailedPreconditionError("scheduler: OnTokens() without a plan");
  std::unordered_set<RequestId> seen;
  for (RequestId id : sampled) {
    if (!expected_samples_.contains(id) || !seen.insert(id).second) {
      return InvalidArgumentError("scheduler: OnTokens() reports " + ReqName(id) +
                                  ", which did not sample in the last plan (or twice)");
    }
  }
  for (RequestId id : expected_samples_) {
    if (!seen.contains(id)) {
      return InvalidArgumentError("scheduler: OnTokens() misses " + ReqName(id) +
                                  ", which sampled in the last plan");
    }
  }
  std::vector<RequestId> finished;
  for (RequestId id : sampled) {
    Request& r = requests_.at(id);
    ++r.num_generated;
    if (r.num_generated == r.max_tokens) finished.push_back(id);
  }
  for (RequestId id : finished) {
    const Status st = Finish(id);
    LAMINAR_CHECK(st.ok()) << st;
  }
  expected_samples_.clear();
  step_in_flight_ = false;
  return finished;
}

StatusOr<int64_t> Scheduler::num_generated(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return UnknownRequest(id);
  return it->second.num_generated;
}

SchedulerStats Scheduler::stats() const {
  return SchedulerStats{.num_running = std::ssize(running_),
                        .num_waiting = std::ssize(waiting_),
                        .num_kv_blocks_used = blocks_.num_used_blocks(),
                        .num_kv_blocks_total = blocks_.num_total_blocks(),
                        .num_preemptions = num_preemptions_,
                        .num_finished = num_finished_,
                        .num_aborted = num_aborted_};
}

void Scheduler::CheckInvariants() const {
  blocks_.CheckInvariants();
  LAMINAR_CHECK_EQ(running_.size() + waiting_.size(), requests_.size());
  LAMINAR_CHECK_LE(std::ssize(running_), config_.max_num_seqs);
  LAMINAR_CHECK_EQ(blocks_.num_sequences(), std::ssize(running_));
  for (RequestId id : running_) {
    const Request& r = requests_.at(id);
    LAMINAR_CHECK(r.running && !r.fork_parent.has_value()) << ReqName(id);
    LAMINAR_CHECK(blocks_.HasSequence(id)) << ReqName(id);
    LAMINAR_CHECK_LE(r.num_computed, r.length()) << ReqName(id);
    LAMINAR_CHECK_GE(*blocks_.num_tokens(id), r.num_computed) << ReqName(id);
    LAMINAR_CHECK_LE(*blocks_.num_tokens(id), std::max(r.num_computed, r.length())) << ReqName(id);
  }
  for (RequestId id : waiting_) {
    const Request& r = requests_.at(id);
    LAMINAR_CHECK(!r.running && r.num_computed == 0) << ReqName(id);
    LAMINAR_CHECK_LT(r.num_generated, r.max_tokens) << ReqName(id);
    if (r.fork_parent.has_value()) {
      const Request& p = requests_.at(*r.fork_parent);
      LAMINAR_CHECK(!p.fork_parent.has_value() && p.num_generated == 0) << ReqName(id);
    }
  }
}

}  // namespace laminar::rollout
