// The rollout worker's weights: the newest version pulled from the relays between trajectories,
// and the draft_model drafter's model built from it. See worker.h.
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "core/logging.h"
#include "proto/codec.h"
#include "relay/policy_weights.h"
#include "rollout/worker/wire.h"
#include "rollout/worker/worker.h"

namespace laminar::rollout {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Status RolloutWorker::MaybeUpdateWeights() {
  const auto start = Clock::now();
  const int64_t held = engine_ ? engine_->weight_version() : -1;
  // Whether there is anything newer first (one control request, every turn of an idle loop, which
  // waits up to its timeout for a relay that does not answer); the transfer itself, which takes
  // seconds for a large model, and building the model from it: all with the heartbeats going.
  const StatusOr<int64_t> latest = [&] {
    const BusyHeartbeats::Scope busy = BusyScope();
    return relay_->LatestVersion();
  }();
  if (latest.ok() && *latest <= held) {
    relay_unreachable_since_.reset();
    return OkStatus();
  }
  StatusOr<std::shared_ptr<const relay::PulledVersion>> pulled =
      latest.ok() ? NotFoundError("not pulled") : latest.status();
  if (latest.ok()) {
    {
      const BusyHeartbeats::Scope busy = BusyScope();
      pulled = relay_->PullLatest(held);
    }
    MutexLock lock(&stats_mu_);
    stats_.pull_wait_s += Seconds(Clock::now() - start);  // served or not
  }
  const auto pulled_at = Clock::now();
  const StatusCode code = pulled.status().code();
  // Busy relays answered (back-pressure): ask again on a later turn of the loop, which keeps the
  // heartbeats going meanwhile.
  if (pulled.ok() || code == StatusCode::kNotFound || code == StatusCode::kResourceExhausted) {
    relay_unreachable_since_.reset();
  } else if (!relay_unreachable_since_) {
    relay_unreachable_since_ = start;
  }
  if (code == StatusCode::kNotFound || code == StatusCode::kResourceExhausted) return OkStatus();
  if (!pulled.ok()) {
    if (Seconds(start - *relay_unreachable_since_) > options_.relay_timeout_s) {
      return UnavailableError(
          options_.id + ": no relay answered for " + std::to_string(options_.relay_timeout_s) +
          " s (rollout.relay_timeout_s): " + std::string(pulled.status().message()));
    }
    LAMINAR_LOG(WARN, ROLLOUT) << options_.id
                               << ": no version from the relays: " << pulled.status();
    return OkStatus();  // try again later
  }
  const relay::PulledVersion& v = **pulled;
  // Building the model (quantizing it, for a large model seconds) goes with heartbeats too.
  const BusyHeartbeats::Scope busy = BusyScope();
  LAMINAR_ASSIGN_OR_RETURN(model::WeightStore tensors, relay::WeightStoreOf(v),
                           options_.id + ": version " + std::to_string(v.version()));
  auto store = std::make_unique<model::WeightStore>(std::move(tensors));
  const auto build_start = Clock::now();
  LAMINAR_ASSIGN_OR_RETURN(
      std::unique_ptr<engine::LlamaModel> model,
      engine::LlamaModel::Create(config_, *store, engine::Backend::kCpu, options_.weight_format),
      options_.id + ": version " + std::to_string(v.version()));
  const bool draft_model = options_.engine.speculative.drafter == DrafterKind::kDraftModel;
  // The policy as its own draft (kPolicyDraftModel): rebuilt from every version, so it follows
  // the policy.
  std::unique_ptr<engine::LlamaModel> policy_draft;
  if (draft_model && options_.draft_model_path == kPolicyDraftModel) {
    LAMINAR_ASSIGN_OR_RETURN(policy_draft,
                             engine::LlamaModel::Create(config_, *store, engine::Backend::kCpu,
                                                        options_.draft_weight_format),
                             options_.id + ": version " + std::to_string(v.version()) +
                                 ": the policy as draft model in " +
                                 engine::WeightFormatName(options_.draft_weight_format));
  } else if (draft_model && draft_model_ == nullptr) {
    LAMINAR_RETURN_IF_ERROR(BuildDraftModel(v), options_.id);
  }
  if (!engine_) {
    RolloutEngineConfig c = options_.engine;
    c.weight_version = v.version();
    c.speculative.draft_model = policy_draft ? policy_draft.get() : draft_model_.get();
    LAMINAR_ASSIGN_OR_RETURN(engine_, RolloutEngine::Create(model.get(), std::move(c)));
  } else {
    LAMINAR_RETURN_IF_ERROR(engine_->SetWeights(model.get(), v.version(), policy_draft.get()),
                            options_.id);
  }
  const double build_s = Seconds(Clock::now() - build_start);
  LAMINAR_LOG(INFO, ROLLOUT) << options_.id << ": version " << v.version() << " built as "
                             << engine::WeightFormatName(options_.weight_format)
                             << (policy_draft
                                     ? ", its draft model as " +
                                           engine::WeightFormatName(options_.draft_weight_format)
                                     : std::string())
                             << " in " << build_s << " s (pulled from " << v.relay() << " by "
                             << v.source() << ")";
  // The engine now uses the new models; the old ones and their weights can go (models first).
  model_ = std::move(model);
  if (policy_draft) draft_model_ = std::move(policy_draft);
  weights_ = std::move(store);
  MutexLock lock(&stats_mu_);
  ++stats_.versions_loaded;
  stats_.version = v.version();
  stats_.pull_wait_s += Seconds(Clock::now() - pulled_at);
  stats_.weight_build_s += build_s;
  ++(v.relay() == options_.relays.front() ? stats_.pulls_own_relay : stats_.pulls_other_relay);
  return OkStatus();
}

Status RolloutWorker::BuildDraftModel(const relay::PulledVersion& v) {
  const std::string what = "version " + std::to_string(v.version());
  LAMINAR_ASSIGN_OR_RETURN(model::WeightStore tensors,
                           relay::WeightStoreOf(v, relay::kDraftModelPrefix), what);
  if (tensors.size() == 0) {
    return FailedPreconditionError(
        what +
        " carries no draft model: the drafter is draft_model, so the actor must publish "
        "one (the actor's recipe sets rollout.speculative.draft_model)");
  }
  auto store = std::make_unique<model::WeightStore>(std::move(tensors));
  LAMINAR_ASSIGN_OR_RETURN(
      draft_model_,
      engine::LlamaModel::Create(*options_.draft_model_config, *store, engine::Backend::kCpu,
                                 options_.draft_weight_format),
      what + ": the draft model (rollout.speculative.draft_model " + options_.draft_model_path +
          ")");
  draft_weights_ = std::move(store);
  return OkStatus();
}

}  // namespace laminar::rollout
