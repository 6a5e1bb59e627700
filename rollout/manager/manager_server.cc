// The manager's server; see manager_server.h.
#include "rollout/manager/manager_server.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>
#include <utility>

#include "core/logging.h"
#include "proto/codec.h"

namespace laminar::manager {

StatusOr<RunMode> ParseRunMode(std::string_view name) {
  if (name == "sync") return RunMode::kSync;
  if (name == "one_step_off") return RunMode::kOneStepOff;
  if (name == "async") return RunMode::kAsync;
  return InvalidArgumentError("mode '" + std::string(name) +
                              "' is not sync, one_step_off or async");
}

Status ManagerServerOptions::Validate() const {
  if (groups_per_step < 1) {
    return InvalidArgumentError("manager: groups_per_step must be >= 1, got " +
                                std::to_string(groups_per_step));
  }
  if (!(heartbeat_timeout_s > 0)) {
    return InvalidArgumentError("manager: heartbeat_timeout_s must be > 0");
  }
  if (!(repack_interval_s >= 0)) {
    return InvalidArgumentError("manager: repack.interval_s must be >= 0");
  }
  return repack.Validate();
}

StatusOr<std::unique_ptr<ManagerServer>> ManagerServer::Start(
    std::shared_ptr<const PromptDataset> dataset, ManagerConfig config,
    ManagerServerOptions options) {
  LAMINAR_RETURN_IF_ERROR(options.Validate());
  LAMINAR_ASSIGN_OR_RETURN(std::unique_ptr<ManagerState> state,
                           ManagerState::Create(std::move(dataset), std::move(config)));
  std::unique_ptr<ManagerServer> s(new ManagerServer(std::move(state), std::move(options)));
  ManagerServer* self = s.get();
  LAMINAR_ASSIGN_OR_RETURN(
      s->server_,
      ZmqReplyServer::Start(s->options_.endpoint,
                            [self](std::string_view request, std::string_view peer) {
                              return self->Handle(request, peer);
                            }),
      "manager");
  return s;
}

ManagerServer::ManagerServer(std::unique_ptr<ManagerState> state, ManagerServerOptions options)
    : options_(std::move(options)),
      start_(std::chrono::steady_clock::now()),
      state_(std::move(state)) {
  for (const char* k :
       {"repack/rounds", "repack/requests_moved", "repack/kv_tokens_moved", "repack/sources_freed",
        "repack/overhead_s", "manager/orphans_reissued", "manager/kv_blocks_leaked"}) {
    totals_[k] = 0;
  }
}

ManagerServer::~ManagerServer() { Stop(); }

void ManagerServer::Stop() {
  if (server_) server_->Stop();
  MutexLock lock(&mu_);
  for (const auto& [id, rate] : rates_) EndStraggler(id);
}

double ManagerServer::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

int64_t ManagerServer::actor_version() const {
  MutexLock lock(&mu_);
  return actor_version_;
}

std::map<std::string, double> ManagerServer::Metrics() const {
  MutexLock lock(&mu_);
  std::map<std::string, double> m = state_->Metrics();
  for (const auto& [k, v] : totals_) m[k] = v;
  for (const auto& [k, v] : counter_totals_) m[k] = v;
  return m;
}

std::string ManagerServer::Handle(std::string_view request, std::string_view peer) {
  proto::ManagerReply reply;
  auto decoded = proto::Decode<proto::ManagerRequest>(request, peer);
  if (!decoded.ok()) {
    reply.set_error(std::string(decoded.status().message()));
  } else {
    MutexLock lock(&mu_);
    reply = Dispatch(*decoded, Now());
    reply.set_actor_version(actor_version_);
  }
  reply.mutable_header()->set_sender("manager");
  return proto::Encode(std::move(reply));
}

std::string ManagerServer::HostOf(const std::string& id) const {
  auto it = hosts_.find(id);
  return it != hosts_.end() ? it->second : "unknown";
}

void ManagerServer::RecordFault(Fault fault) const {
  fault.seen_by = "manager";
  if (Status st = options_.faults.Record(std::move(fault)); !st.ok()) {
    LAMINAR_LOG(WARN, MANAGER) << st;
  }
}

void ManagerServer::ExpireDead(double now) {
  // Every request checks, but only a scan past the earliest deadline can find anyone dead: one
  // scan per heartbeat timeout instead of one per request with a thousand rollouts.
  if (now <= next_expiry_check_s_) return;
  for (const std::string& id :
       state_->ExpireDead(now, options_.heartbeat_timeout_s, &next_expiry_check_s_)) {
    LAMINAR_LOG(WARN, MANAGER) << "rollout " << id << " missed its heartbeats for "
                               << options_.heartbeat_timeout_s << " s: its groups are re-issued";
    EndStraggler(id);
    // Detected now; recovered at once: its groups went back to the pool for the others.
    const double t = FaultClockNow();
    declared_hung_[id] = t;
    RecordFault({.kind = FaultKind::kHang,
                 .role = id,
                 .host = HostOf(id),
                 .detail = "no heartbeat for " + std::to_string(options_.heartbeat_timeout_s) +
                           " s; its groups are re-issued",
                 .detected_unix_s = t,
                 .recovered_unix_s = t});
    running_.erase(id);
    orders_.erase(id);
    // Samples waiting to be imported there are lost with it; their groups were re-issued whole.
    imports_.erase(id);
    kv_at_last_round_.erase(id);
    placed_.erase(id);
    rates_.erase(id);
    heartbeat_version_.erase(id);
  }
}

void ManagerServer::TrackStragglers(const proto::Heartbeat& hb, double now) {
  GenerationRate& r = rates_[hb.id()];
  // The work done as it is done (finished samples alone come in lumps: most intervals of a long
  // response would show none), over the time it could work: pulling a new version is waiting on
  // the relay, not straggling.
  auto tokens_it = hb.counters().find("rollout/tokens_forwarded");
  if (tokens_it == hb.counters().end()) return;
  const double tokens = tokens_it->second;
  auto pull_it = hb.counters().find("relay/pull_wait_s");
  const double pull_s = pull_it != hb.counters().end() ? pull_it->second : 0;
  auto restart_interval = [&] {
    r.last_tokens = tokens;
    r.last_pull_s = pull_s;
    r.last_s = now;
    r.running_sum = 0;
    r.running_count = 0;
  };
  if (r.last_tokens < 0 || tokens < r.last_tokens || pull_s < r.last_pull_s) {
    restart_interval();  // the first heartbeat, or a restarted process
    return;
  }
  r.running_sum += hb.running();
  ++r.running_count;
  const double dt = now - r.last_s - (pull_s - r.last_pull_s);
  if (now - r.last_s < 0.5) return;  // too short an interval to say
  if (dt < 0.25) {
    restart_interval();  // it spent the interval pulling: nothing to say of its rate either way
    return;
  }
  // Busy: it holds groups (it should be decoding them). The rate is per sample running (the
  // mean over the interval's heartbeats): a decode step forwards a token for each, so a rollout
  // with a larger share of the work is not taken for a fast one, nor one left with a group's
  // last long sample (a long tail) for a slow one.
  const std::optional<RolloutHealth> health = state_->Rollout(hb.id());
  const int64_t groups = health ? health->num_groups : 0;
  const double running = std::max(1.0, r.running_sum / r.running_count);
  r.busy = groups > 0;
  r.rate = r.busy ? (tokens - r.last_tokens) / dt / running : 0;
  LAMINAR_LOG(DEBUG, MANAGER) << hb.id() << ": " << r.rate << " tokens/s per running sample ("
                              << running << " running, " << groups << " groups) over " << dt
                              << " s not pulling";
  restart_interval();
  if (r.busy) r.busy_s = now;
  // The others' rates while they last had work (within a few heartbeat timeouts): a straggler
  // holding groups can leave the others idle, waiting for the actor, which waits for it. With no
  // other busy, its own recent rate: the median of its last busy intervals while it was neither
  // straggling nor slow (a slowdown is an outlier against its own past too).
  std::optional<double> reference = MedianOfOthers(hb.id(), now);
  std::string reference_text = "the other busy rollouts' median ";
  constexpr size_t kMinHistory = 5, kHistory = 50;
  if (!reference && r.history.size() >= kMinHistory) {
    std::vector<double> sorted(r.history.begin(), r.history.end());
    std::ranges::nth_element(sorted,
                             sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2));
    reference = sorted[sorted.size() / 2];
    reference_text =
        "its own median over its last " + std::to_string(sorted.size()) + " busy intervals ";
  }
  if (r.busy) r.busy_rate = r.rate;
  const bool others_empty = !reference.has_value();
  const double median = reference.value_or(0);
  const bool slow_now = r.busy && !others_empty && r.rate < median / 3;
  if (r.busy && r.straggling_since_unix_s == 0 && !slow_now) {
    r.history.push_back(r.rate);
    if (r.history.size() > kHistory) r.history.pop_front();
  }
  // Two intervals in a row decide either way, so that one unlucky interval (a scheduling hiccup,
  // a batch finishing) neither raises nor ends a straggler.
  constexpr int kIntervals = 2;
  if (r.straggling_since_unix_s != 0) {
    // Recovered: back over half the others' rate, or done with its work (nothing waits on it).
    const bool fine = !r.busy || others_empty || r.rate >= median / 2;
    r.streak = fine ? r.streak + 1 : 0;
    if (r.streak >= kIntervals) {
      RecordFault({.kind = FaultKind::kStraggler,
                   .role = hb.id(),
                   .host = HostOf(hb.id()),
                   .detail = r.detail,
                   .detected_unix_s = r.straggling_since_unix_s,
                   .recovered_unix_s = FaultClockNow()});
      r.straggling_since_unix_s = 0;
      r.streak = 0;
    }
    return;
  }
  if (!slow_now) {
    r.streak = 0;
    return;
  }
  if (r.streak++ == 0) r.first_slow_unix_s = FaultClockNow();
  if (r.streak >= kIntervals) {
    r.straggling_since_unix_s = r.first_slow_unix_s;
    r.streak = 0;
    r.detail = "forwarding " + std::to_string(r.rate) +
               " tokens/s (outside pulls) per running sample, " + reference_text +
               std::to_string(median);
    LAMINAR_LOG(WARN, MANAGER) << hb.id() << " straggles: " << r.detail;
    // Recorded now, and again when it recovers: a manager killed meanwhile loses nothing.
    RecordFault({.kind = FaultKind::kStraggler,
                 .role = hb.id(),
                 .host = HostOf(hb.id()),
                 .detail = r.detail,
                 .detected_unix_s = r.straggling_since_unix_s});
  }
}

std::optional<double> ManagerServer::MedianOfOthers(const std::string& id, double now) {
  constexpr size_t kFewRollouts = 64;
  BusyRates& b = busy_rates_;
  if (rates_.size() <= kFewRollouts || b.built_s < 0 || now - b.built_s >= 0.1) {
    b.sorted.clear();
    b.of.clear();
    for (const auto& [other, o] : rates_) {
      if (o.busy_s > 0 && now - o.busy_s < 4 * options_.heartbeat_timeout_s) {
        b.sorted.push_back(o.busy_rate);
        b.of[other] = o.busy_rate;
      }
    }
    std::ranges::sort(b.sorted);
    b.built_s = now;
  }
  // The k-th smallest with `id`'s own value left out.
  std::optional<size_t> skip;
  if (auto own = b.of.find(id); own != b.of.end()) {
    skip = static_cast<size_t>(std::ranges::lower_bound(b.sorted, own->second) - b.sorted.begin());
  }
  const size_t n = b.sorted.size() - (skip ? 1 : 0);
  if (n == 0) return std::nullopt;
  const std::vector<double>& v = b.sorted;
  auto at = [&v, skip](size_t k) { return skip && k >= *skip ? v[k + 1] : v[k]; };
  return n % 2 == 1 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
}

void ManagerServer::EndStraggler(const std::string& id) {
  auto it = rates_.find(id);
  if (it == rates_.end() || it->second.straggling_since_unix_s == 0) return;
  RecordFault({.kind = FaultKind::kStraggler,
               .role = id,
               .host = HostOf(id),
               .detail = it->second.detail,
               .detected_unix_s = it->second.straggling_since_unix_s});
  it->second.straggling_since_unix_s = 0;
}

proto::ManagerReply ManagerServer::Dispatch(const proto::ManagerRequest& r, double now) {
  proto::ManagerReply reply;
  ExpireDead(now);
  switch (r.kind_case()) {
    case proto::ManagerRequest::kWork:
      OnWork(r.work(), now, &reply);
      break;
    case proto::ManagerRequest::kHeartbeat:
      OnHeartbeat(r.heartbeat(), now, &reply);
      break;
    case proto::ManagerRequest::kTrajectories: {
      int32_t dropped = 0;
      for (const proto::Trajectory& t : r.trajectories().trajectories()) {
        if (Status st = state_->OnTrajectory(t, now); !st.ok()) {
          ++dropped;
          LAMINAR_LOG(DEBUG, MANAGER) << "dropped a trajectory: " << st.message();
          continue;
        }
        // Counted when accepted, before any batch can take the sample: the step that trains it
        // reports its failure, and a batch the rollout sends again (a slow reply) counts once.
        // A rollout's weights only move forward: trajectories it sends in order never come from
        // an older version than one before them (a restarted process starts at the newest).
        if (auto [newest, fresh] = newest_sent_.emplace(t.rollout_id(), t.version());
            !fresh && t.version() < newest->second) {
          totals_["manager/version_regressions"] += 1;
          LAMINAR_LOG(WARN, MANAGER)
              << t.rollout_id() << " sent " << t.prompt_id() << " sample " << t.sample_index()
              << " of version " << t.version() << " after one of version " << newest->second;
        } else if (!fresh) {
          newest->second = t.version();
        }
        if (t.reward_outcome() == proto::REWARD_OUTCOME_ERROR) {
          ++counter_totals_["reward/error_count"];
        }
        if (t.reward_outcome() == proto::REWARD_OUTCOME_TIMEOUT) {
          ++counter_totals_["reward/timeout_count"];
        }
        if (t.finish_reason() == proto::FINISH_REASON_NON_FINITE_LOGITS) {
          // The rollout ended the response at once; the sample is trained as it stands.
          const double at = FaultClockNow();
          RecordFault({.kind = FaultKind::kNonFinite,
                       .role = t.rollout_id(),
                       .host = HostOf(t.rollout_id()),
                       .detail = "non-finite logits ended " + t.prompt_id() + " sample " +
                                 std::to_string(t.sample_index()) + " at version " +
                                 std::to_string(t.version()),
                       .detected_unix_s = at,
                       .recovered_unix_s = at});
        }
      }
      reply.set_dropped(dropped);
      break;
    }
    case proto::ManagerRequest::kPartials:
      for (const proto::PartialResponse& p : r.partials().partials()) {
        if (Status st = state_->OnPartial(p, now); !st.ok()) {
          LAMINAR_LOG(DEBUG, MANAGER) << "dropped a partial response: " << st.message();
        }
      }
      break;
    case proto::ManagerRequest::kMigrated:
      OnMigrated(r.migrated());
      break;
    case proto::ManagerRequest::kReturned:
      if (r.returned().reason() == proto::kRestartReason && r.returned().prompt_ids_size() == 0) {
        // A rollout (re)started under this id: an earlier process's groups go back to the pool.
        auto requeued = state_->DeclareDead(r.returned().rollout_id());
        if (requeued.ok() && *requeued > 0) {
          LAMINAR_LOG(WARN, MANAGER) << r.returned().rollout_id() << " restarted: " << *requeued
                                     << " groups it held are re-issued";
        }
        running_.erase(r.returned().rollout_id());
        orders_.erase(r.returned().rollout_id());
        imports_.erase(r.returned().rollout_id());
        last_counters_.erase(r.returned().rollout_id());  // the new process counts from 0
        EndStraggler(r.returned().rollout_id());
        rates_.erase(r.returned().rollout_id());
        placed_.erase(r.returned().rollout_id());
        heartbeat_version_.erase(r.returned().rollout_id());
        break;
      }
      for (const std::string& id : r.returned().prompt_ids()) {
        Status st = state_->ReturnGroup(id, r.returned().rollout_id());
        LAMINAR_LOG(WARN, MANAGER)
            << r.returned().rollout_id() << " gave back " << id << " (" << r.returned().reason()
            << "): " << (st.ok() ? "re-issued" : std::string(st.message()));
      }
      break;
    case proto::ManagerRequest::kTakeBatch:
      OnTakeBatch(r.take_batch(), &reply);
      break;
    case proto::ManagerRequest::kVersion:
      if (r.version().version() > actor_version_) {
        actor_version_ = r.version().version();
        repack_due_ = true;
      }
      break;
    case proto::ManagerRequest::kSnapshot:
      reply.set_snapshot_json(state_->Snapshot().dump());
      break;
    case proto::ManagerRequest::kRestore: {
      nlohmann::json j = nlohmann::json::parse(r.restore().snapshot_json(), nullptr, false);
      Status st =
          j.is_discarded() ? InvalidArgumentError("the snapshot is not JSON") : state_->Restore(j);
      if (!st.ok()) reply.set_error("restore: " + std::string(st.message()));
      break;
    }
    case proto::ManagerRequest::kPing:
      break;
    case proto::ManagerRequest::KIND_NOT_SET:
      reply.set_error("no request kind set");
      break;
  }
  // Not with a busy heartbeat: the thread that sent it does not act on replies.
  const bool busy = r.has_heartbeat() && r.heartbeat().busy();
  if (reply.error().empty() && !busy) DeliverOrders(r.header().sender(), &reply);
  return reply;
}

void ManagerServer::DeliverOrders(const std::string& rollout_id, proto::ManagerReply* reply) {
  if (auto it = orders_.find(rollout_id); it != orders_.end()) {
    for (proto::RepackCommand& c : it->second) *reply->add_repack() = std::move(c);
    orders_.erase(it);
  }
  if (auto it = imports_.find(rollout_id); it != imports_.end()) {
    for (proto::MigratedSample& m : it->second) {
      placed_[rollout_id][m.prompt_id()] = 0;
      *reply->add_imports() = std::move(m);
    }
    imports_.erase(it);
  }
}

void ManagerServer::OnWork(const proto::WorkRequest& work, double now, proto::ManagerReply* reply) {
  int64_t allowed = work.max_groups();
  if (options_.mode != RunMode::kAsync) {
    // Batch b (groups [b B, (b + 1) B) in hand-out order) may be generated by versions >= b - lag.
    const int64_t lag = options_.mode == RunMode::kSync ? 0 : 1;
    // Groups handed out so far in the run, from the data cursor (a snapshot restores it).
    const ManagerStats st = state_->stats();
    const int64_t issued = st.cursor.epoch * st.num_rows + st.cursor.index;
    const int64_t b = options_.groups_per_step;
    int64_t quota = (work.version() + lag + 1) * b - issued;
    // one_step_off overlaps generating batch k + 1 with training batch k: a batch's groups go
    // out only once every earlier batch is complete, so batches complete (and are taken) in
    // order and no group waits for a later step.
    const int64_t completed = issued - st.num_in_flight - st.num_reissue_queued;
    if (options_.mode == RunMode::kOneStepOff) {
      quota = completed < (issued / b) * b ? 0 : std::min(quota, (issued / b + 1) * b - issued);
    }
    allowed = std::min(allowed, std::max(quota, st.num_reissue_queued));
  }
  if (allowed <= 0) {
    (void)state_->Assign(work.rollout_id(), 0, work.version(), now);  // it is alive
    return;
  }
  auto groups =
      state_->Assign(work.rollout_id(), static_cast<int32_t>(allowed), work.version(), now);
  if (!groups.ok()) {
    reply->set_error(std::string(groups.status().message()));
    return;
  }
  for (proto::PromptGroup& g : *groups) {
    placed_[work.rollout_id()][g.prompt_id()] = 0;
    *reply->mutable_work()->add_groups() = std::move(g);
  }
}

void ManagerServer::OnHeartbeat(const proto::Heartbeat& hb, double now,
                                proto::ManagerReply* reply) {
  if (Status st = state_->OnHeartbeat(hb, now); !st.ok()) {
    reply->set_error(std::string(st.message()));
    return;
  }
  running_[hb.id()].assign(hb.running_samples().begin(), hb.running_samples().end());
  if (!hb.host().empty()) hosts_[hb.id()] = hb.host();
  // Busy heartbeats come from another thread of the rollout, which does not count what went
  // unanswered: the next whole heartbeat tells.
  if (auto hung = declared_hung_.find(hb.id()); hung != declared_hung_.end() && !hb.busy()) {
    // Back after it was declared hung. A stopped or stuck process sent nothing meanwhile; one
    // whose requests went unanswered for longer than the timeout was running all along, and what
    // failed was the link between it and this manager.
    if (hb.unanswered() >= 2 && hb.unanswered_s() >= options_.heartbeat_timeout_s) {
      char detail[160];
      std::snprintf(detail, sizeof(detail),
                    "alive, but %d sends of its requests over %.1f s got no answer: the link "
                    "failed, not the process",
                    hb.unanswered(), hb.unanswered_s());
      LAMINAR_LOG(WARN, MANAGER) << hb.id() << " is back: " << detail;
      RecordFault({.kind = FaultKind::kLostLink,
                   .role = hb.id(),
                   .host = HostOf(hb.id()),
                   .detail = detail,
                   .detected_unix_s = hung->second,
                   .recovered_unix_s = FaultClockNow(),
                   .supersedes = "hang"});
    }
    declared_hung_.erase(hung);
  }
  ReissueOrphans(hb);
  // A heartbeat sent during one long call of the rollout is a sign of life only: its rate is
  // measured over whole calls, between its other heartbeats, and it carries no counters.
  if (hb.busy()) return;
  TrackStragglers(hb, now);
  for (const auto& [name, value] : hb.counters()) {
    double& last = last_counters_[hb.id()][name];
    const double growth = value >= last ? value - last : value;  // smaller: it restarted
    last = value;
    counter_totals_[name] += growth;
    window_.counter_growth[name] += growth;
  }
  block_size_[hb.id()] = hb.kv_block_size();
  // Between engine steps, KV blocks held while no sample runs or waits belong to no one: a leak
  // in the engine's accounting (cached prefixes count as free). The worst seen, with a warning
  // each time it grows.
  if (hb.running() == 0 && hb.waiting() == 0 && hb.kv_blocks_used() > 0 &&
      static_cast<double>(hb.kv_blocks_used()) > totals_["manager/kv_blocks_leaked"]) {
    totals_["manager/kv_blocks_leaked"] = static_cast<double>(hb.kv_blocks_used());
    LAMINAR_LOG(WARN, MANAGER) << hb.id() << " holds " << hb.kv_blocks_used()
                               << " KV blocks with no sample running or waiting: leaked";
  }
  if (hb.kv_blocks_capacity() > 0) {
    const double util =
        static_cast<double>(hb.kv_blocks_used()) / static_cast<double>(hb.kv_blocks_capacity());
    window_.kv_util_sum += util;
    window_.kv_util_peak = std::max(window_.kv_util_peak, util);
  }
  ++window_.heartbeats;
  window_.idle_heartbeats += hb.running() == 0 && hb.waiting() == 0;
  // How far apart the versions the live rollouts hold are right now (async runs them apart). The
  // spread can only widen when a rollout reports another version than in its last heartbeat; the
  // first heartbeat of each metrics window takes it afresh.
  auto [known, fresh] = heartbeat_version_.try_emplace(hb.id(), hb.version());
  if (fresh || known->second != hb.version() || window_.heartbeats == 1) {
    known->second = hb.version();
    int64_t lo = INT64_MAX, hi = -1;
    for (const RolloutHealth& h : state_->Rollouts()) {
      if (h.version < 0) continue;
      lo = std::min(lo, h.version);
      hi = std::max(hi, h.version);
    }
    if (hi >= 0) window_.version_spread_max = std::max(window_.version_spread_max, hi - lo);
  }
  if (options_.repack.enabled &&
      (repack_due_ || now - last_repack_s_ >= options_.repack_interval_s)) {
    Repack(now);
  }
}

void ManagerServer::ReissueOrphans(const proto::Heartbeat& hb) {
  // Two heartbeats: the one carrying a placement's reply may be built before the worker took it.
  constexpr int kOrphanHeartbeats = 2;
  auto placed = placed_.find(hb.id());
  if (placed == placed_.end()) return;
  std::set<std::string> listed;
  for (const proto::RunningSample& s : hb.running_samples()) listed.insert(s.prompt_id());
  for (auto it = placed->second.begin(); it != placed->second.end();) {
    const std::string& prompt_id = it->first;
    if (state_->GroupRollout(prompt_id) != hb.id()) {
      it = placed->second.erase(it);  // complete, moved, or re-issued already
      continue;
    }
    it->second = listed.contains(prompt_id) ? 0 : it->second + 1;
    if (it->second < kOrphanHeartbeats) {
      ++it;
      continue;
    }
    LAMINAR_LOG(WARN, MANAGER) << hb.id() << " no longer runs " << prompt_id << " ("
                               << kOrphanHeartbeats << " heartbeats without it): re-issued";
    (void)state_->ReturnGroup(prompt_id, hb.id());
    totals_["manager/orphans_reissued"] += 1;
    it = placed->second.erase(it);
  }
}

void ManagerServer::Repack(double now) {
  const auto start = std::chrono::steady_clock::now();
  last_repack_s_ = now;
  repack_due_ = false;
  std::vector<rollout::RepackRollout> rollouts;
  for (const RolloutHealth& h : state_->Rollouts()) {
    const auto bs_it = block_size_.find(h.id);
    if (bs_it == block_size_.end() || bs_it->second <= 0 || h.version < 0 ||
        h.kv_blocks_capacity <= 0) {
      continue;  // no heartbeat with KV numbers yet
    }
    if (!orders_[h.id].empty()) continue;  // still carrying out the last round's order
    const int64_t bs = bs_it->second;
    rollout::RepackRollout r;
    r.id = h.id;
    r.version = h.version;
    r.num_waiting = h.waiting;
    r.newer_version_exists = actor_version_ > h.version;
    r.kv_capacity_tokens = std::min(h.kv_blocks_capacity * bs, rollout::kMaxRepackKvTokens);
    r.kv_used_tokens = std::min(h.kv_blocks_used * bs, r.kv_capacity_tokens);
    // "Falling" compares with the previous round (finished samples free KV between rounds,
    // while a decoding long tail grows it a block at a time); the heartbeat's own previous value
    // before the first round.
    auto last = kv_at_last_round_.find(h.id);
    r.kv_used_previous_tokens =
        last != kv_at_last_round_.end() ? last->second : h.kv_blocks_used_previous * bs;
    kv_at_last_round_[h.id] = r.kv_used_tokens;
    for (const proto::RunningSample& s : running_[h.id]) {
      if (s.kv_tokens() == 0) continue;  // finished, being scored: nothing left to move
      r.running.push_back({.id = s.prompt_id() + "#" + std::to_string(s.sample_index()),
                           .kv_tokens = std::min(s.kv_tokens(), r.kv_capacity_tokens)});
    }
    rollouts.push_back(std::move(r));
  }
  auto plan = rollout::PlanRepack(rollouts, options_.repack);
  if (!plan.ok()) {
    LAMINAR_LOG(WARN, MANAGER) << "repack: " << plan.status();
    return;
  }
  totals_["repack/rounds"] += 1;
  std::map<std::string, proto::RepackCommand> by_source;
  for (const rollout::RepackMove& m : plan->moves) {
    proto::RepackCommand& c = by_source[m.source];
    c.set_source(m.source);
    c.set_destination(m.destination);
    c.set_version(m.version);
    const std::string prompt_id = m.request_id.substr(0, m.request_id.rfind('#'));
    if (std::find(c.request_ids().begin(), c.request_ids().end(), prompt_id) ==
        c.request_ids().end()) {
      c.add_request_ids(prompt_id);
    }
  }
  totals_["repack/sources_freed"] += static_cast<double>(plan->sources_freed);
  for (auto& [source, c] : by_source) orders_[source].push_back(std::move(c));
  totals_["repack/overhead_s"] +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ManagerServer::OnMigrated(const proto::MigratedBatch& batch) {
  std::set<std::string> moved, refused;
  for (const proto::MigratedSample& m : batch.samples()) {
    if (refused.contains(m.prompt_id())) continue;
    if (!moved.contains(m.prompt_id())) {
      Status st = state_->MoveGroup(m.prompt_id(), batch.source(), batch.destination());
      if (!st.ok()) {
        // The destination cannot take it (gone, or another version now): start the group again.
        LAMINAR_LOG(WARN, MANAGER) << "repack: " << st.message() << "; re-issuing the group";
        (void)state_->ReturnGroup(m.prompt_id(), batch.source());
        moved.insert(m.prompt_id());  // one message per group
        refused.insert(m.prompt_id());
        continue;
      }
      moved.insert(m.prompt_id());
      LAMINAR_LOG(INFO, MANAGER) << "repack: moved " << m.prompt_id() << " from " << batch.source()
                                 << " to " << batch.destination() << " (version " << m.version()
                                 << ")";
    }
    totals_["repack/requests_moved"] += 1;
    totals_["repack/kv_tokens_moved"] +=
        static_cast<double>(m.prompt_ids_size() + m.response_ids_size());
    imports_[batch.destination()].push_back(m);
  }
}

void ManagerServer::OnTakeBatch(const proto::TakeBatchRequest& take, proto::ManagerReply* reply) {
  std::optional<std::vector<CompletedGroup>> groups = state_->TakeBatch(take.num_groups());
  if (!groups) {
    const ManagerStats st = state_->stats();
    reply->set_exhausted(state_->exhausted() && st.num_in_flight == 0 &&
                         st.num_buffered < take.num_groups());
    // For the actor's progress bar while it waits (how many of num_groups are ready).
    reply->set_buffered(static_cast<int32_t>(st.num_buffered));
    reply->set_samples_ready(static_cast<int32_t>(state_->SamplesTowardBatch(take.num_groups())));
    reply->set_group_size(state_->config().num_samples);
    return;
  }
  for (CompletedGroup& g : *groups) {
    for (proto::Trajectory& t : g.trajectories) {
      *reply->mutable_batch()->add_trajectories() = std::move(t);
    }
  }
  auto& m = *reply->mutable_metrics();
  for (const auto& [k, v] : state_->Metrics()) m[k] = v;
  for (const auto& [k, v] : totals_) m[k] = v;
  if (window_.heartbeats == 0) {
    // No heartbeat since the last batch (two batches back to back): the rollouts' last reports.
    for (const RolloutHealth& h : state_->Rollouts()) {
      if (h.kv_blocks_capacity > 0) {
        const double util =
            static_cast<double>(h.kv_blocks_used) / static_cast<double>(h.kv_blocks_capacity);
        window_.kv_util_sum += util;
        window_.kv_util_peak = std::max(window_.kv_util_peak, util);
      }
      ++window_.heartbeats;
      window_.idle_heartbeats += h.running == 0 && h.waiting == 0;
    }
  }
  const double beats = static_cast<double>(std::max<int64_t>(window_.heartbeats, 1));
  m["rollout/kv_util_mean"] = window_.kv_util_sum / beats;
  m["rollout/kv_util_peak"] = window_.kv_util_peak;
  m["rollouter/idle_ratio"] = static_cast<double>(window_.idle_heartbeats) / beats;
  m["rollout/version_spread_max"] = static_cast<double>(window_.version_spread_max);
  // Failure counts over the run (they only rise); the pull wait over this step.
  for (const char* k : {"reward/error_count", "reward/timeout_count"}) m[k] = counter_totals_[k];
  m["relay/pull_wait_s"] = window_.counter_growth["relay/pull_wait_s"];
  m["rollout/weight_build_s"] = window_.counter_growth["rollout/weight_build_s"];
  // Which relay served the rollouts' pulls: their own node's, or another node's (a fallback).
  for (const char* k : {"relay/pulls_own_relay", "relay/pulls_other_relay"}) {
    m[k] = window_.counter_growth[k];
  }
  // Speculative decoding over the step (rollout/speculation/cost_model.h SpecStats): the enabled
  // fraction is 0 when nothing was drafted, and the acceptance metrics are then absent (a 0 would
  // read as every draft rejected).
  auto& g = window_.counter_growth;
  const double decodes = g["rollout/spec_decode_steps"], verifies = g["rollout/spec_verify_steps"];
  const double drafted = g["rollout/spec_drafted_tokens"];
  const double accepted = g["rollout/spec_accepted_tokens"];
  if (drafted > 0) m["rollout/spec_accept_rate"] = accepted / drafted;
  if (verifies > 0) m["rollout/spec_mean_accepted_len"] = (accepted + verifies) / verifies;
  m["rollout/spec_enabled_frac"] = decodes > 0 ? verifies / decodes : 0.0;
  window_ = Window{};
}

}  // namespace laminar::manager
