// Rollout worker loop; see worker.h.
#include "rollout/worker/worker.h"

#include <map>
#include <set>
#include <thread>
#include <utility>

#include "core/host.h"
#include "core/logging.h"
#include "proto/codec.h"
#include "relay/policy_weights.h"
#include "rollout/worker/wire.h"

namespace laminar::rollout {
namespace {

using Clock = std::chrono::steady_clock;

proto::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return proto::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return proto::FINISH_REASON_LENGTH;
    case FinishReason::kAbort:
      return proto::FINISH_REASON_ABORT;
    case FinishReason::kNonFiniteLogits:
      return proto::FINISH_REASON_NON_FINITE_LOGITS;
    case FinishReason::kNone:
      break;
  }
  return proto::FINISH_REASON_UNSPECIFIED;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Status RolloutWorkerOptions::Validate() const {
  if (id.empty()) return InvalidArgumentError("rollout worker: id is empty");
  if (manager.empty()) return InvalidArgumentError("rollout worker: manager endpoint is empty");
  if (relays.empty()) return InvalidArgumentError("rollout worker: no relay endpoint");
  if (max_groups < 1) {
    return InvalidArgumentError("rollout worker: max_groups must be >= 1, got " +
                                std::to_string(max_groups));
  }
  if (!std::isfinite(reward_failure_score)) {
    return InvalidArgumentError("rollout worker: reward.failure_score must be finite");
  }
  if (engine.speculative.drafter == DrafterKind::kDraftModel &&
      draft_model_path != kPolicyDraftModel && !draft_model_config.has_value()) {
    return InvalidArgumentError(
        "rollout worker: the draft_model drafter needs draft_model_config "
        "(rollout.speculative.draft_model)");
  }
  if (partial_every_tokens < 0) {
    return InvalidArgumentError("rollout worker: partial_every_tokens must be >= 0");
  }
  if (heartbeat_interval_ms < 1 || idle_poll_ms < 0 || request_timeout_ms < 1 ||
      request_attempts < 1) {
    return InvalidArgumentError(
        "rollout worker: heartbeat_interval_ms, request_timeout_ms and request_attempts must be "
        ">= 1 and idle_poll_ms >= 0");
  }
  if (!(manager_timeout_s > 0) || !(relay_timeout_s > 0)) {
    return InvalidArgumentError(
        "rollout worker: rollout.manager_timeout_s and rollout.relay_timeout_s must be > 0");
  }
  if (!(max_busy_heartbeats_s > 0)) {
    return InvalidArgumentError("rollout worker: max_busy_heartbeats_s must be > 0");
  }
  return engine.Validate();
}

StatusOr<std::unique_ptr<RolloutWorker>> RolloutWorker::Create(const model::ModelConfig& config,
                                                               const model::Tokenizer* tokenizer,
                                                               reward::RewardFn reward,
                                                               RolloutWorkerOptions options) {
  LAMINAR_CHECK(tokenizer != nullptr && reward) << "RolloutWorker needs a tokenizer and a reward";
  LAMINAR_RETURN_IF_ERROR(options.Validate());
  if (options.engine.speculative.drafter == DrafterKind::kDraftModel &&
      options.draft_model_path == kPolicyDraftModel &&
      options.draft_weight_format == options.weight_format) {
    LAMINAR_LOG(WARN, ROLLOUT) << options.id
                               << ": the draft model is the policy in its own format ("
                               << engine::WeightFormatName(options.weight_format)
                               << "): it drafts as slowly as the policy verifies; set "
                                  "rollout.speculative.draft_weight_dtype to a cheaper one (q8_0)";
  }
  std::unique_ptr<RolloutWorker> w(
      new RolloutWorker(config, tokenizer, std::move(reward), std::move(options)));
  relay::RelayClientOptions ro;
  ro.id = w->options_.id;
  ro.relays = w->options_.relays;
  ro.host = w->options_.host;
  ro.request_timeout_ms = w->options_.request_timeout_ms;
  LAMINAR_ASSIGN_OR_RETURN(w->relay_, relay::RelayClient::Create(std::move(ro)));
  w->manager_ = std::make_unique<ZmqRequestClient>(w->options_.manager);
  w->busy_beats_ = std::make_unique<BusyHeartbeats>(
      w->options_.manager, w->options_.heartbeat_interval_ms, w->options_.request_timeout_ms,
      w->options_.max_busy_heartbeats_s);
  return w;
}

RolloutWorker::RolloutWorker(const model::ModelConfig& config, const model::Tokenizer* tokenizer,
                             reward::RewardFn reward, RolloutWorkerOptions options)
    : config_(config),
      tokenizer_(tokenizer),
      reward_(std::move(reward)),
      options_(std::move(options)),
      host_(Hostname()) {
  const model::Tokenizer* tok = tokenizer_;
  options_.engine.token_bytes = [tok](int32_t id) { return tok->TokenBytes(id, true); };
  options_.engine.strips_leading_space = tok->strips_leading_space();
}

RolloutWorkerStats RolloutWorker::stats() const {
  MutexLock lock(&stats_mu_);
  return stats_;
}

StatusOr<proto::ManagerReply> RolloutWorker::Call(proto::ManagerRequest request) {
  request.mutable_header()->set_sender(options_.id);
  request.mutable_header()->set_seq(++seq_);
  if (unanswered_ > 0 && request.has_heartbeat()) {
    request.mutable_heartbeat()->set_unanswered(unanswered_);
    request.mutable_heartbeat()->set_unanswered_s(
        std::chrono::duration<double>(Clock::now() - unanswered_since_).count());
  }
  auto bytes = manager_->Call(proto::Encode(request), options_.request_timeout_ms,
                              options_.request_attempts);
  if (!bytes.ok()) {
    // A failed call sent every attempt without an answer (ZmqRequestClient::Call).
    if (unanswered_ == 0) unanswered_since_ = last_manager_ok_;
    unanswered_ += std::max(options_.request_attempts, 1);
    return bytes.status();
  }
  // The count goes to the manager with the next heartbeat: only an answered one has told it.
  if (request.has_heartbeat()) unanswered_ = 0;
  last_manager_ok_ = Clock::now();
  LAMINAR_ASSIGN_OR_RETURN(proto::ManagerReply reply,
                           proto::Decode<proto::ManagerReply>(*bytes, "manager"));
  if (!reply.error().empty()) {
    return FailedPreconditionError("the manager refused the request: " + reply.error());
  }
  actor_version_ = std::max(actor_version_, reply.actor_version());
  for (proto::RepackCommand& c : *reply.mutable_repack()) pending_repack_.push_back(std::move(c));
  for (proto::MigratedSample& m : *reply.mutable_imports()) {
    pending_imports_.push_back(std::move(m));
  }
  reply.clear_repack();
  reply.clear_imports();
  return reply;
}

int32_t RolloutWorker::GroupsThatFit() const {
  const SchedulerStats s = engine_->scheduler().stats();
  if (sample_tokens_estimate_ <= 0) return requests_.empty() ? 1 : 0;  // the first group
  const double block = options_.engine.block_size;
  const double group_blocks =
      std::max(1.0, std::ceil(sample_tokens_estimate_ / block)) * std::max(1, group_samples_);
  const auto fit = static_cast<int32_t>(
      static_cast<double>(s.num_kv_blocks_total - s.num_kv_blocks_used) / group_blocks);
  // An idle engine takes one group even when it looks too big: Add refuses what can never fit.
  return requests_.empty() ? std::max(fit, 1) : fit;
}

int32_t RolloutWorker::num_groups_in_flight() const {
  std::set<std::string> groups;
  for (const auto& [id, r] : requests_) groups.insert(r.prompt_id);
  return static_cast<int32_t>(groups.size());
}

Status RolloutWorker::RequestWork() {
  const int32_t held = num_groups_in_flight();
  const int64_t waiting = engine_->scheduler().stats().num_waiting;
  {
    MutexLock lock(&stats_mu_);
    stats_.peak_groups_held = std::max<int64_t>(stats_.peak_groups_held, held);
    stats_.peak_waiting_samples = std::max(stats_.peak_waiting_samples, waiting);
  }
  const int32_t room = options_.max_groups - held;
  if (room <= 0 || Clock::now() < next_work_) return OkStatus();
  // Back-pressure: while the engine holds samples its KV pool (or max_num_seqs) cannot admit yet,
  // take nothing more, and never more groups than the free KV blocks hold at the size samples have
  // had so far; the manager keeps the rest for rollouts with room. So however large
  // rollout.max_groups is, a rollout holds at most what its pool can run.
  if (waiting > 0) return OkStatus();
  const int32_t fit = GroupsThatFit();
  if (fit <= 0) return OkStatus();
  // A newer version exists: start nothing more under this one, so the rollout drains, becomes
  // idle and pulls it (Laminar §4: rollouts update between trajectories, never during one).
  if (actor_version_ > engine_->weight_version()) return OkStatus();
  proto::ManagerRequest req;
  proto::WorkRequest* w = req.mutable_work();
  w->set_rollout_id(options_.id);
  w->set_version(engine_->weight_version());
  w->set_max_groups(std::min(room, fit));
  auto reply = Call(std::move(req));
  if (!reply.ok()) {
    LAMINAR_LOG(WARN, ROLLOUT) << options_.id << ": work request failed: " << reply.status();
    return OkStatus();
  }
  if (reply->work().groups_size() == 0) {
    // Nothing to do now (pool empty, or the manager waits for a newer version): ask less often.
    next_work_ = Clock::now() + std::chrono::milliseconds(options_.heartbeat_interval_ms / 4 + 1);
  }
  for (const proto::PromptGroup& g : reply->work().groups()) {
    group_samples_ = g.num_samples();
    if (finished_samples_ == 0) {  // nothing finished yet: assume the longest response
      sample_tokens_estimate_ =
          static_cast<double>(g.prompt_ids_size() + g.sampling().max_tokens());
    }
    RolloutRequest r;
    r.prompt_ids.assign(g.prompt_ids().begin(), g.prompt_ids().end());
    r.sampling = SamplingFromProto(g.sampling());
    r.stop = StopFromProto(g.sampling());
    r.n = g.num_samples();
    auto id = engine_->Add(std::move(r));
    if (!id.ok()) {
      // A prompt this engine cannot run (too long for the context or the KV pool): give it back.
      LAMINAR_LOG(ERROR, ROLLOUT) << options_.id << ": cannot run prompt group " << g.prompt_id()
                                  << ": " << id.status();
      GiveBack(g.prompt_id(), std::string(id.status().message()));
      continue;
    }
    requests_[*id] = Request{.prompt_id = g.prompt_id(),
                             .data_source = g.data_source(),
                             .ground_truth = g.ground_truth(),
                             .extra_info_json = g.extra_info_json(),
                             .start = Clock::now()};
    MutexLock lock(&stats_mu_);
    ++stats_.groups_received;
  }
  return OkStatus();
}

proto::ManagerRequest RolloutWorker::BuildHeartbeat(bool busy) {
  proto::ManagerRequest req;
  proto::Heartbeat* h = req.mutable_heartbeat();
  h->set_role("rollout");
  h->set_id(options_.id);
  h->set_version(engine_ ? engine_->weight_version() : -1);
  h->set_host(host_);
  h->set_busy(busy);
  if (engine_) {
    const SchedulerStats s = engine_->scheduler().stats();
    h->set_running(static_cast<int32_t>(s.num_running));
    h->set_waiting(static_cast<int32_t>(s.num_waiting));
    h->set_kv_blocks_used(s.num_kv_blocks_used);
    h->set_kv_blocks_capacity(s.num_kv_blocks_total);
    h->set_kv_blocks_used_previous(kv_blocks_previous_);
    h->set_kv_block_size(options_.engine.block_size);
    if (!busy) kv_blocks_previous_ = s.num_kv_blocks_used;
    const int64_t bs = options_.engine.block_size;
    for (const auto& f : engine_->InFlight()) {
      const Request& r = requests_.at(f.request_id);
      proto::RunningSample* rs = h->add_running_samples();
      rs->set_prompt_id(r.prompt_id);
      rs->set_sample_index(f.sample_index);
      // KV after a re-prefill: the prompt and what was generated, in whole blocks.
      rs->set_kv_tokens((f.num_tokens + bs - 1) / bs * bs);
    }
    for (const auto& [prompt_id, sample_index] : scoring_) {
      proto::RunningSample* rs = h->add_running_samples();
      rs->set_prompt_id(prompt_id);
      rs->set_sample_index(sample_index);
      rs->set_kv_tokens(0);
    }
  }
  // Samples moved here that the main loop has not taken in yet (a heartbeat sent while scoring
  // can bring them): ours, so the manager must not re-issue their groups as orphans. No KV yet,
  // so no repack round moves them on.
  for (const proto::MigratedSample& m : pending_imports_) {
    proto::RunningSample* rs = h->add_running_samples();
    rs->set_prompt_id(m.prompt_id());
    rs->set_sample_index(m.sample_index());
    rs->set_kv_tokens(0);
  }
  if (busy) return req;  // no counters: the manager measures rates between whole calls
  {
    // Running totals: the manager turns them into per-step values and survives a lost heartbeat.
    MutexLock lock(&stats_mu_);
    auto& c = *h->mutable_counters();
    // A rollout that spent an interval pulling was waiting, not straggling.
    c["relay/pull_wait_s"] = stats_.pull_wait_s;
    c["rollout/weight_build_s"] = stats_.weight_build_s;
    c["relay/pulls_own_relay"] = static_cast<double>(stats_.pulls_own_relay);
    c["relay/pulls_other_relay"] = static_cast<double>(stats_.pulls_other_relay);
    c["rollout/tokens_generated"] = static_cast<double>(stats_.tokens_generated);
  }
  if (engine_) {
    const SpecStats& sp = engine_->spec_stats();
    auto& c = *h->mutable_counters();
    c["rollout/spec_decode_steps"] = static_cast<double>(sp.decode_steps);
    c["rollout/spec_verify_steps"] = static_cast<double>(sp.verify_steps);
    c["rollout/spec_drafted_tokens"] = static_cast<double>(sp.drafted_tokens);
    c["rollout/spec_accepted_tokens"] = static_cast<double>(sp.accepted_tokens);
    c["rollout/tokens_forwarded"] = static_cast<double>(engine_->tokens_forwarded());
  }
  return req;
}

BusyHeartbeats::Scope RolloutWorker::BusyScope() {
  proto::ManagerRequest req = BuildHeartbeat(/*busy=*/true);
  req.mutable_header()->set_sender(options_.id);
  req.mutable_header()->set_seq(++seq_);
  return BusyHeartbeats::Scope(busy_beats_.get(), proto::Encode(req));
}

Status RolloutWorker::SendHeartbeat() {
  auto reply = Call(BuildHeartbeat(/*busy=*/false));
  if (!reply.ok()) {
    LAMINAR_LOG(WARN, ROLLOUT) << options_.id << ": heartbeat failed: " << reply.status();
  }
  return OkStatus();
}

RolloutWorker::Scores RolloutWorker::ScoreFinished(const std::vector<FinishedSample>& finished) {
  Scores out;
  out.score.assign(finished.size(), options_.reward_failure_score);
  out.seconds.assign(finished.size(), 0.0);
  out.extra.resize(finished.size());
  out.outcome.assign(finished.size(), proto::REWARD_OUTCOME_OK);
  for (size_t i = 0; i < finished.size(); ++i) {
    const FinishedSample& f = finished[i];
    const Request& r = requests_.at(f.request_id);
    const auto reward_start = Clock::now();
    auto text = tokenizer_->Decode(f.generated_ids, /*skip_special=*/true);
    Status failed = text.status();
    if (text.ok()) {
      auto result = reward_({.data_source = r.data_source,
                             .solution_str = *text,
                             .ground_truth = r.ground_truth,
                             .extra_info_json = r.extra_info_json});
      if (result.ok() && std::isfinite(result->score)) {
        out.score[i] = result->score;
        out.extra[i] = std::move(result->extra);
      } else if (result.ok()) {
        failed = InvalidArgumentError("the reward is not a finite number");
      } else {
        failed = result.status();
      }
    }
    out.seconds[i] = Seconds(Clock::now() - reward_start);
    if (failed.ok()) continue;
    const bool timeout = failed.code() == StatusCode::kDeadlineExceeded;
    ++(timeout ? out.timeouts : out.errors);
    out.outcome[i] = timeout ? proto::REWARD_OUTCOME_TIMEOUT : proto::REWARD_OUTCOME_ERROR;
    // The first failures in full, then one in a hundred, so that a reward failing on every
    // sample says why without flooding the log.
    const int64_t seen = ++reward_failures_logged_;
    if (seen <= 5 || seen % 100 == 0) {
      LAMINAR_LOG(WARN, ROLLOUT) << options_.id << ": reward of " << r.prompt_id << "/"
                                 << f.sample_index << " failed (failure " << seen
                                 << "; it scores reward.failure_score): " << failed;
    }
  }
  return out;
}

RolloutWorker::Scores RolloutWorker::ScoreWithHeartbeats(
    const std::vector<FinishedSample>& finished) {
  // A reward that takes seconds (a Python plug-in may take up to its timeout_s) must not read as
  // a dead rollout whose groups are re-issued. Samples being scored still count as running in the
  // heartbeats (the manager re-issues a group a live rollout stops listing); their KV is already
  // freed.
  scoring_.clear();
  for (const FinishedSample& f : finished) {
    scoring_.emplace_back(requests_.at(f.request_id).prompt_id, f.sample_index);
  }
  Scores scores;
  {
    const BusyHeartbeats::Scope busy = BusyScope();
    scores = ScoreFinished(finished);
  }
  scoring_.clear();
  return scores;
}

Status RolloutWorker::Generate() {
  StatusOr<std::vector<FinishedSample>> stepped = [&] {
    const BusyHeartbeats::Scope busy = BusyScope();
    return engine_->Step();
  }();
  LAMINAR_ASSIGN_OR_RETURN(std::vector<FinishedSample> finished, std::move(stepped), options_.id);
  if (finished.empty()) return OkStatus();
  for (const FinishedSample& f : finished) {
    sample_tokens_sum_ += static_cast<double>(f.prompt_ids.size() + f.generated_ids.size());
  }
  finished_samples_ += static_cast<int64_t>(finished.size());
  sample_tokens_estimate_ = sample_tokens_sum_ / static_cast<double>(finished_samples_);
  const auto scoring_start = Clock::now();
  const Scores scores = ScoreWithHeartbeats(finished);
  proto::ManagerRequest req;
  proto::TrajectoryBatch* batch = req.mutable_trajectories();
  int64_t tokens = 0;
  for (size_t i = 0; i < finished.size(); ++i) {
    FinishedSample& f = finished[i];
    const Request& r = requests_.at(f.request_id);
    proto::Trajectory* t = batch->add_trajectories();
    t->set_prompt_id(r.prompt_id);
    t->set_sample_index(f.sample_index);
    t->mutable_prompt_ids()->Add(f.prompt_ids.begin(), f.prompt_ids.end());
    t->mutable_response_ids()->Add(f.generated_ids.begin(), f.generated_ids.end());
    t->mutable_logprobs()->Add(f.logprobs.begin(), f.logprobs.end());
    t->set_version(f.version);
    t->set_finish_reason(ToProto(f.finish_reason));
    t->set_reward(static_cast<float>(scores.score[i]));
    t->set_reward_outcome(scores.outcome[i]);
    t->mutable_timings()->set_generate_s(Seconds(scoring_start - r.start));
    t->mutable_timings()->set_reward_s(scores.seconds[i]);
    t->set_rollout_id(options_.id);
    for (const auto& [name, value] : scores.extra[i]) {
      if (std::isfinite(value)) (*t->mutable_reward_extra())[name] = value;
    }
    tokens += static_cast<int64_t>(f.generated_ids.size());
    partial_sent_.erase({f.request_id, f.sample_index});
  }
  // A request whose samples have all finished is done.
  std::set<int64_t> live;
  for (const auto& f : engine_->InFlight()) live.insert(f.request_id);
  for (auto it = requests_.begin(); it != requests_.end();) {
    it = live.contains(it->first) ? std::next(it) : requests_.erase(it);
  }
  const int64_t n = batch->trajectories_size();
  auto reply = Call(std::move(req));
  MutexLock lock(&stats_mu_);
  stats_.tokens_generated += tokens;
  stats_.reward_errors += scores.errors;
  stats_.reward_timeouts += scores.timeouts;
  if (!reply.ok()) {
    LAMINAR_LOG(WARN, ROLLOUT) << options_.id << ": sending " << n
                               << " trajectories failed: " << reply.status();
    return OkStatus();  // the manager re-issues the groups it does not get
  }
  stats_.trajectories_sent += n - reply->dropped();
  stats_.trajectories_dropped += reply->dropped();
  return OkStatus();
}

Status RolloutWorker::SendPartials() {
  if (options_.partial_every_tokens == 0) return OkStatus();
  proto::ManagerRequest req;
  proto::PartialBatch* batch = req.mutable_partials();
  for (const auto& f : engine_->InFlight()) {
    size_t& sent = partial_sent_[{f.request_id, f.sample_index}];
    if (f.generated_ids.size() < sent + static_cast<size_t>(options_.partial_every_tokens)) {
      continue;
    }
    // Only the tokens not streamed yet, at their offset in the response.
    proto::PartialResponse* p = batch->add_partials();
    p->set_prompt_id(requests_.at(f.request_id).prompt_id);
    p->set_sample_index(f.sample_index);
    p->set_version(engine_->weight_version());
    p->set_rollout_id(options_.id);
    p->set_offset(static_cast<int32_t>(sent));
    p->mutable_response_ids()->Add(f.generated_ids.begin() + static_cast<std::ptrdiff_t>(sent),
                                   f.generated_ids.end());
    p->mutable_logprobs()->Add(f.logprobs.begin() + static_cast<std::ptrdiff_t>(sent),
                               f.logprobs.end());
    sent = f.generated_ids.size();
  }
  if (batch->partials_size() == 0) return OkStatus();
  auto reply = Call(std::move(req));
  if (!reply.ok()) LAMINAR_LOG(WARN, ROLLOUT) << options_.id << ": partials: " << reply.status();
  return OkStatus();
}

void RolloutWorker::GiveBack(const std::string& prompt_id, const std::string& reason) {
  proto::ManagerRequest req;
  proto::ReturnedGroups* r = req.mutable_returned();
  r->set_rollout_id(options_.id);
  r->add_prompt_ids(prompt_id);
  r->set_reason(reason);
  if (auto reply = Call(std::move(req)); !reply.ok()) {
    LAMINAR_LOG(WARN, ROLLOUT) << options_.id << ": giving back " << prompt_id
                               << " failed: " << reply.status();
  }
}

Status RolloutWorker::Run(const std::atomic<bool>& stop) {
  last_manager_ok_ = Clock::now();
  // A rollout restarted under the same id: whatever its earlier incarnation held is gone.
  {
    proto::ManagerRequest req;
    req.mutable_returned()->set_rollout_id(options_.id);
    req.mutable_returned()->set_reason(proto::kRestartReason);
    if (auto reply = Call(std::move(req)); !reply.ok()) {
      LAMINAR_LOG(WARN, ROLLOUT) << options_.id
                                 << ": the manager did not answer yet: " << reply.status();
    }
  }
  while (!stop.load()) {
    // The heartbeats sent during a long call are contact with the manager too.
    if (auto answered = busy_beats_->last_answered()) {
      last_manager_ok_ = std::max(last_manager_ok_, *answered);
    }
    if (Seconds(Clock::now() - last_manager_ok_) > options_.manager_timeout_s) {
      return UnavailableError(options_.id + ": the manager at " + options_.manager +
                              " did not answer for " + std::to_string(options_.manager_timeout_s) +
                              " s (rollout.manager_timeout_s)");
    }
    // Samples sent here are taken in before an idle engine would move to a newer version.
    if (engine_) LAMINAR_RETURN_IF_ERROR(HandleOrders());
    if (!engine_ || engine_->idle()) LAMINAR_RETURN_IF_ERROR(MaybeUpdateWeights());
    const auto now = Clock::now();
    if (now >= next_heartbeat_) {
      LAMINAR_RETURN_IF_ERROR(SendHeartbeat());
      next_heartbeat_ = now + std::chrono::milliseconds(options_.heartbeat_interval_ms);
    }
    if (!engine_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.idle_poll_ms));
      continue;
    }
    LAMINAR_RETURN_IF_ERROR(RequestWork());
    if (engine_->idle()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.idle_poll_ms));
      continue;
    }
    LAMINAR_RETURN_IF_ERROR(Generate());
    LAMINAR_RETURN_IF_ERROR(SendPartials());
    LAMINAR_RETURN_IF_ERROR(HandleOrders());
  }
  return OkStatus();
}

}  // namespace laminar::rollout
