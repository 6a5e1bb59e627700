// Scheduler: one engine step's plan from the running and waiting requests (see scheduler.h).
#include "rollout/engine/scheduler.h"

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

Status Scheduler::Add(RequestId id, std::span<const int32_t> prompt_ids, int64_t max_tokens,
                      std::optional<RequestId> group_parent) {
  if (requests_.contains(id)) return AlreadyExistsError("scheduler: " + ReqName(id) + " exists");
  const auto num_prompt_tokens = std::ssize(prompt_ids);
  if (num_prompt_tokens < 1 || max_tokens < 1) {
    return InvalidArgumentError("scheduler: " + ReqName(id) + " needs >= 1 prompt token and " +
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
    if (!std::ranges::equal(parent.prompt_ids, prompt_ids)) {
      return InvalidArgumentError(
          "scheduler: " + ReqName(id) + " has a prompt of " + std::to_string(num_prompt_tokens) +
          " tokens that differs from that of its group parent " + ReqName(root) + " (" +
          std::to_string(parent.num_prompt_tokens()) + " tokens)");
    }
    if (parent.num_generated == 0 && parent.num_computed < parent.num_prompt_tokens()) {
      r.fork_parent = root;
    }
  }
  r.prompt_ids.assign(prompt_ids.begin(), prompt_ids.end());
  requests_.emplace(id, std::move(r));
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

Status Scheduler::Migrate(RequestId id) {
  LAMINAR_RETURN_IF_ERROR(Remove(id));
  ++num_migrated_;
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
  draft_slots_.erase(id);
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
  const bool writes_prompt = s.start < r.num_prompt_tokens();
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
  if (writes_prompt) {
    std::vector<RequestId>& writers = prompt_writers_.emplace_back(1, id);
    writers.insert(writers.end(), s.forked.begin(), s.forked.end());
  }
  const std::span<const BlockId> table = *blocks_.block_table(id);
  s.block_table.assign(table.begin(), table.end());
  plan.num_batched_tokens += n;
  plan.seqs.push_back(std::move(s));
}

bool Scheduler::TryAdmit(size_t index) {
  const RequestId id = waiting_[index];
  Request& r = requests_.at(id);
  if (std::ssize(running_) >= config_.max_num_seqs) return false;
  // The prompt through the prefix cache, then fresh slots for the tokens a preempted request had
  // generated (not cached: their ids are not known here). The prompt's last block is never a cache
  // hit, so appending to it copies nothing.
  const int64_t generated_blocks =
      blocks_.BlocksToAllocate(r.length()) - blocks_.BlocksToAllocate(r.num_prompt_tokens());
  if (blocks_.BlocksToAllocatePrompt(r.prompt_ids) + generated_blocks > blocks_.num_free_blocks()) {
    return false;
  }
  StatusOr<int64_t> cached = blocks_.AllocatePrompt(id, r.prompt_ids);
  LAMINAR_CHECK(cached.ok()) << cached.status();
  LAMINAR_CHECK(*cached % blocks_.block_size() == 0 && *cached < r.num_prompt_tokens())
      << ReqName(id) << ": " << *cached << " cached prompt tokens";
  if (r.num_generated > 0) {
    StatusOr<std::vector<BlockCopy>> copies = blocks_.Append(id, r.num_generated);
    LAMINAR_CHECK(copies.ok()) << copies.status();
    LAMINAR_CHECK(copies->empty()) << ReqName(id) << ": copy-on-write of a fresh prompt block";
  }
  num_prompt_tokens_looked_up_ += r.num_prompt_tokens();
  num_prompt_tokens_reused_ += *cached;
  r.running = true;
  r.num_computed = *cached;
  running_.push_back(id);
  waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(index));
  return true;
}

// Kept whole: one admission pass (decodes, then prefill chunks, then preemption) over a token
// budget that every phase spends.
StatusOr<Plan> Scheduler::Schedule(const DraftWanted& draft_wanted) {
  if (step_in_flight_) {
    return FailedPreconditionError("scheduler: Schedule() before OnTokens() of the previous plan");
  }
  Plan plan;
  int64_t budget = config_.max_num_batched_tokens;
  // (1) Sequences with one position left (decodes, and prefills down to their last token).
  std::vector<size_t> decodes;  // plan entries of (1) that may take drafts
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
    if (r.num_generated > 0) decodes.push_back(plan.seqs.size());
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
    if (requests_.at(id).fork_parent.has_value()) {
      ++i;
      continue;
    }
    if (!TryAdmit(i)) break;
    const Request& r = requests_.at(id);
    const int64_t n = std::min(r.length() - r.num_computed, budget);
    ScheduleChunk(id, n, plan);  // may erase forked children, which lie after i
    budget -= n;
  }
  // (4) Draft tokens from what is left.
  for (size_t index : decodes) {
    if (!draft_wanted || budget <= 0) break;
    ScheduledSeq& seq = plan.seqs[index];
    const Request& r = requests_.at(seq.id);
    int64_t d = std::min({draft_wanted(seq.id), r.max_tokens - r.num_generated - 1, budget});
    while (d > 0 && !blocks_.CanAppend(seq.id, d)) --d;
    if (d <= 0) continue;
    StatusOr<std::vector<BlockCopy>> copies = blocks_.Append(seq.id, d);
    LAMINAR_CHECK(copies.ok()) << copies.status();
    LAMINAR_CHECK(copies->empty()) << ReqName(seq.id) << ": its last block was made its own in (1)";
    const std::span<const BlockId> table = *blocks_.block_table(seq.id);
    seq.block_table.assign(table.begin(), table.end());
    seq.num_draft_tokens = d;
    seq.num_tokens += d;
    plan.num_batched_tokens += d;
    budget -= d;
    draft_slots_[seq.id] = d;
  }
  step_in_flight_ = true;
  return plan;
}

StatusOr<std::vector<RequestId>> Scheduler::OnTokens(std::span<const RequestId> sampled,
                                                     std::span<const int64_t> num_appended) {
  if (!step_in_flight_) return FailedPreconditionError("scheduler: OnTokens() without a plan");
  if (!num_appended.empty() && num_appended.size() != sampled.size()) {
    return InvalidArgumentError("scheduler: OnTokens() with " +
                                std::to_string(num_appended.size()) + " token counts for " +
                                std::to_string(sampled.size()) + " requests");
  }
  auto appended = [&](size_t i) { return num_appended.empty() ? int64_t{1} : num_appended[i]; };
  std::unordered_set<RequestId> seen;
  for (size_t i = 0; i < sampled.size(); ++i) {
    const RequestId id = sampled[i];
    if (!expected_samples_.contains(id) || !seen.insert(id).second) {
      return InvalidArgumentError("scheduler: OnTokens() reports " + ReqName(id) +
                                  ", which did not sample in the last plan (or twice)");
    }
    auto draft = draft_slots_.find(id);
    const int64_t most = 1 + (draft == draft_slots_.end() ? 0 : draft->second);
    if (appended(i) < 1 || appended(i) > most) {
      return InvalidArgumentError("scheduler: OnTokens() reports " + std::to_string(appended(i)) +
                                  " tokens for " + ReqName(id) + ", which could append 1.." +
                                  std::to_string(most));
    }
  }
  for (RequestId id : expected_samples_) {
    if (!seen.contains(id)) {
      return InvalidArgumentError("scheduler: OnTokens() misses " + ReqName(id) +
                                  ", which sampled in the last plan");
    }
  }
  RegisterComputedPrompts();
  std::vector<RequestId> finished;
  for (size_t i = 0; i < sampled.size(); ++i) {
    const RequestId id = sampled[i];
    Request& r = requests_.at(id);
    r.num_generated += appended(i);
    if (draft_slots_.contains(id)) {
      // The accepted drafts' K/V is in place; the rejected ones' slots go back.
      r.num_computed += appended(i) - 1;
      const Status st = blocks_.Truncate(id, r.num_computed);
      LAMINAR_CHECK(st.ok()) << st;
    }
    if (r.num_generated == r.max_tokens) finished.push_back(id);
  }
  draft_slots_.clear();
  for (RequestId id : finished) {
    const Status st = Finish(id);
    LAMINAR_CHECK(st.ok()) << st;
  }
  expected_samples_.clear();
  step_in_flight_ = false;
  return finished;
}

void Scheduler::RegisterComputedPrompts() {
  for (const std::vector<RequestId>& writers : prompt_writers_) {
    // Any holder of the blocks will do; one that was finished or aborted meanwhile is gone (a
    // request re-added under its id since is waiting, holding nothing).
    auto holder = std::ranges::find_if(writers, [&](RequestId id) {
      auto it = requests_.find(id);
      return it != requests_.end() && it->second.running;
    });
    if (holder == writers.end()) continue;
    // A sequence allocated before a weight swap may mix KV of two versions: never cached.
    if (*blocks_.sequence_version(*holder) != blocks_.weight_version()) continue;
    const Request& r = requests_.at(*holder);
    const std::span<const int32_t> computed_prompt(
        r.prompt_ids.data(), static_cast<size_t>(std::min(r.num_computed, r.num_prompt_tokens())));
    const StatusOr<int32_t> registered = blocks_.RegisterPrefix(*holder, computed_prompt);
    LAMINAR_CHECK(registered.ok()) << registered.status();
  }
  prompt_writers_.clear();
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
                        .num_aborted = num_aborted_,
                        .num_migrated = num_migrated_,
                        .num_prompt_tokens_looked_up = num_prompt_tokens_looked_up_,
                        .num_prompt_tokens_reused = num_prompt_tokens_reused_,
                        .num_kv_blocks_cached = blocks_.num_cached_blocks()};
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
    auto draft = draft_slots_.find(id);
    LAMINAR_CHECK_LE(*blocks_.num_tokens(id), std::max(r.num_computed, r.length()) +
                                                  (draft == draft_slots_.end() ? 0 : draft->second))
        << ReqName(id);
    LAMINAR_CHECK_GE(r.num_prompt_tokens(), 1) << ReqName(id);
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
