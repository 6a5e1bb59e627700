// The rollout worker's side of repack: carrying out the manager's move orders (exporting samples
// to another rollout) and importing the samples moved here. See worker.h.
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

}  // namespace

Status RolloutWorker::HandleOrders() {
  // Carrying out an order calls the manager, whose reply may bring more: take them in turns.
  while (!pending_repack_.empty()) {
    std::vector<proto::RepackCommand> orders = std::move(pending_repack_);
    pending_repack_.clear();
    for (const proto::RepackCommand& c : orders) LAMINAR_RETURN_IF_ERROR(CarryOutRepack(c));
  }
  if (pending_imports_.empty()) return OkStatus();
  std::vector<proto::MigratedSample> imports = std::move(pending_imports_);
  pending_imports_.clear();
  // A sample this rollout cannot continue (it changed version since the plan) sends its group
  // back to the pool, once per group.
  std::map<std::string, std::string> failed;
  for (const proto::MigratedSample& m : imports) {
    if (failed.contains(m.prompt_id())) continue;
    if (Status st = ImportSample(m); !st.ok()) failed[m.prompt_id()] = std::string(st.message());
  }
  for (const auto& [prompt_id, why] : failed) {
    LAMINAR_LOG(WARN, ROLLOUT) << options_.id << ": cannot continue " << prompt_id << ": " << why;
    GiveBack(prompt_id, why);
  }
  return OkStatus();
}

Status RolloutWorker::CarryOutRepack(const proto::RepackCommand& command) {
  if (!engine_ || command.version() != engine_->weight_version()) {
    LAMINAR_LOG(INFO, ROLLOUT) << options_.id << ": repack order for version " << command.version()
                               << " is stale (holding "
                               << (engine_ ? engine_->weight_version() : -1) << ")";
    return OkStatus();
  }
  const std::set<std::string> wanted(command.request_ids().begin(), command.request_ids().end());
  proto::ManagerRequest req;
  proto::MigratedBatch* batch = req.mutable_migrated();
  batch->set_source(options_.id);
  batch->set_destination(command.destination());
  std::vector<int64_t> exported;
  for (const auto& [id, r] : requests_) {
    if (!wanted.contains(r.prompt_id)) continue;
    auto states = engine_->Export(id);
    if (!states.ok()) continue;  // finished meanwhile: its trajectories went to the manager
    for (const SampleState& st : *states) {
      proto::MigratedSample m = ToProto(st, r.prompt_id);
      m.set_data_source(r.data_source);
      m.set_ground_truth(r.ground_truth);
      m.set_extra_info_json(r.extra_info_json);
      *batch->add_samples() = std::move(m);
    }
    exported.push_back(id);
  }
  for (int64_t id : exported) requests_.erase(id);
  if (batch->samples_size() == 0) {
    LAMINAR_LOG(INFO, ROLLOUT) << options_.id << ": repack order to " << command.destination()
                               << ": its groups finished before it arrived";
    return OkStatus();
  }
  const int64_t n = batch->samples_size();
  auto reply = Call(std::move(req));
  if (!reply.ok()) {
    // The samples are gone from here; the manager re-issues their groups when it notices.
    LAMINAR_LOG(WARN, ROLLOUT) << options_.id << ": sending " << n
                               << " migrated samples failed: " << reply.status();
    return OkStatus();
  }
  MutexLock lock(&stats_mu_);
  stats_.samples_exported += n;
  return OkStatus();
}

Status RolloutWorker::ImportSample(const proto::MigratedSample& m) {
  LAMINAR_ASSIGN_OR_RETURN(SampleState st, SampleStateFromProto(m), options_.id);
  if (!engine_) return FailedPreconditionError(options_.id + ": import before any version");
  auto id = engine_->Import(std::move(st));
  if (!id.ok()) return id.status();
  requests_[*id] = Request{.prompt_id = m.prompt_id(),
                           .data_source = m.data_source(),
                           .ground_truth = m.ground_truth(),
                           .extra_info_json = m.extra_info_json(),
                           .start = Clock::now()};
  MutexLock lock(&stats_mu_);
  ++stats_.samples_imported;
  return OkStatus();
}

}  // namespace laminar::rollout
