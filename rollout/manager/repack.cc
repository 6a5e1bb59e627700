// Repack placement: validation, source selection and Best-Fit by packing density per version group.
#include "rollout/manager/repack.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

namespace laminar::rollout {
namespace {

Status BadRollout(const RepackRollout& r, const std::string& what) {
  return InvalidArgumentError("repack: rollout '" + r.id + "': " + what);
}

Status ValidateRequests(const RepackRollout& r) {
  std::set<std::string> ids;
  for (const RepackRequest& q : r.running) {
    if (q.id.empty()) return BadRollout(r, "a running request has an empty id");
    if (!ids.insert(q.id).second) return BadRollout(r, "request '" + q.id + "' appears twice");
    if (q.kv_tokens < 0 || q.kv_tokens > r.kv_capacity_tokens) {
      return BadRollout(r, "request '" + q.id + "' kv_tokens " + std::to_string(q.kv_tokens) +
                               " outside [0, capacity " + std::to_string(r.kv_capacity_tokens) +
                               "]");
    }
  }
  return OkStatus();
}

Status ValidateRollout(const RepackRollout& r) {
  if (r.version < 0) return BadRollout(r, "version " + std::to_string(r.version) + " < 0");
  if (r.num_waiting < 0) {
    return BadRollout(r, "num_waiting " + std::to_string(r.num_waiting) + " < 0");
  }
  if (r.kv_capacity_tokens < 1 || r.kv_capacity_tokens > kMaxRepackKvTokens) {
    return BadRollout(r, "kv_capacity_tokens " + std::to_string(r.kv_capacity_tokens) +
                             " outside [1, " + std::to_string(kMaxRepackKvTokens) + "]");
  }
  for (const auto& [name, value] :
       {std::pair{"kv_used_tokens", r.kv_used_tokens},
        std::pair{"kv_used_previous_tokens", r.kv_used_previous_tokens}}) {
    if (value < 0 || value > r.kv_capacity_tokens) {
      return BadRollout(r, std::string(name) + " " + std::to_string(value) +
                               " outside [0, capacity " + std::to_string(r.kv_capacity_tokens) +
                               "]");
    }
  }
  return ValidateRequests(r);
}

Status ValidateRollouts(std::span<const RepackRollout> rollouts) {
  std::set<std::string> ids;
  for (const RepackRollout& r : rollouts) {
    if (r.id.empty()) return InvalidArgumentError("repack: a rollout has an empty id");
    if (!ids.insert(r.id).second) return BadRollout(r, "id appears twice");
    LAMINAR_RETURN_IF_ERROR(ValidateRollout(r));
  }
  return OkStatus();
}

int64_t Footprint(const RepackRollout& r) {
  int64_t sum = 0;  // <= running.size() * 2^31: no overflow
  for (const RepackRequest& q : r.running) sum += q.kv_tokens;
  return sum;
}

// The mutable state of one version group during a round.
struct Slot {
  const RepackRollout* rollout = nullptr;
  int64_t kv_used = 0;      // including what moved in
  int64_t num_running = 0;  // including what moved in
  bool freed = false;
  bool received = false;
};

// Whether `a` ends more densely packed than `b` after taking `add` tokens: (a.kv + add) / a.cap
// against (b.kv + add) / b.cap, exact (both sides <= 2^31 * 2^31); ties by the smaller id.
bool Denser(const Slot& a, const Slot& b, int64_t add) {
  const int64_t lhs = (a.kv_used + add) * b.rollout->kv_capacity_tokens;
  const int64_t rhs = (b.kv_used + add) * a.rollout->kv_capacity_tokens;
  if (lhs != rhs) return lhs > rhs;
  return a.rollout->id < b.rollout->id;
}

// The destination for all of `source`'s requests, or -1 when none fits.
int BestFit(const std::vector<Slot>& slots, int source, int64_t footprint, int64_t num_moved,
            const RepackConfig& config) {
  int best = -1;
  for (int d = 0; d < static_cast<int>(slots.size()); ++d) {
    const Slot& s = slots[static_cast<size_t>(d)];
    if (d == source || s.freed || s.rollout->num_waiting > 0 || s.num_running == 0) continue;
    if (s.kv_used + footprint > s.rollout->kv_capacity_tokens) continue;
    if (s.num_running + num_moved > config.max_batch) continue;
    if (best < 0 || Denser(s, slots[static_cast<size_t>(best)], footprint)) best = d;
  }
  return best;
}

void MoveWhole(std::vector<Slot>& slots, int source, int destination, int64_t footprint,
               RepackPlan& plan) {
  Slot& src = slots[static_cast<size_t>(source)];
  Slot& dst = slots[static_cast<size_t>(destination)];
  std::vector<const RepackRequest*> requests;
  requests.reserve(src.rollout->running.size());
  for (const RepackRequest& q : src.rollout->running) requests.push_back(&q);
  std::sort(requests.begin(), requests.end(),
            [](const RepackRequest* a, const RepackRequest* b) { return a->id < b->id; });
  for (const RepackRequest* q : requests) {
    plan.moves.push_back({.request_id = q->id,
                          .source = src.rollout->id,
                          .destination = dst.rollout->id,
                          .version = src.rollout->version,
                          .kv_tokens = q->kv_tokens});
    ++plan.requests_moved;
    plan.kv_tokens_moved += q->kv_tokens;
  }
  dst.kv_used += footprint;
  dst.num_running += std::ssize(requests);
  dst.received = true;
  src.freed = true;
  plan.freed_sources.push_back(src.rollout->id);
  ++plan.sources_freed;
}

// One version group; `group` is sorted by id so slot order (and every tie) is input-order free.
void PlanGroup(const std::vector<const RepackRollout*>& group, const RepackConfig& config,
               RepackPlan& plan) {
  std::vector<Slot> slots;
  slots.reserve(group.size());
  for (const RepackRollout* r : group) {
    slots.push_back(
        {.rollout = r, .kv_used = r->kv_used_tokens, .num_running = std::ssize(r->running)});
  }
  std::vector<std::tuple<int64_t, std::string, int>> sources;  // (footprint, id, slot)
  for (int i = 0; i < static_cast<int>(group.size()); ++i) {
    const RepackRollout& r = *group[static_cast<size_t>(i)];
    if (IsRepackSource(r, config)) sources.emplace_back(Footprint(r), r.id, i);
  }
  std::sort(sources.begin(), sources.end());
  for (const auto& [footprint, id, i] : sources) {
    if (slots[static_cast<size_t>(i)].received) continue;  // a destination now
    const int64_t num_moved = std::ssize(group[static_cast<size_t>(i)]->running);
    const int d = BestFit(slots, i, footprint, num_moved, config);
    if (d >= 0) MoveWhole(slots, i, d, footprint, plan);
  }
}

}  // namespace

Status RepackConfig::Validate() const {
  if (max_batch < 1) {
    return InvalidArgumentError("repack config: repack.max_batch must be >= 1, got " +
                                std::to_string(max_batch));
  }
  return OkStatus();
}

bool IsRepackSource(const RepackRollout& rollout, const RepackConfig& config) {
  const int64_t num_running = std::ssize(rollout.running);
  return rollout.newer_version_exists && rollout.num_waiting == 0 &&
         rollout.kv_used_tokens < rollout.kv_used_previous_tokens && num_running >= 1 &&
         num_running < config.max_batch;
}

StatusOr<RepackPlan> PlanRepack(std::span<const RepackRollout> rollouts,
                                const RepackConfig& config) {
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  LAMINAR_RETURN_IF_ERROR(ValidateRollouts(rollouts));
  RepackPlan plan;
  if (!config.enabled) return plan;
  std::map<int64_t, std::vector<const RepackRollout*>> groups;  // by version, ascending
  for (const RepackRollout& r : rollouts) groups[r.version].push_back(&r);
  for (auto& [version, group] : groups) {
    std::sort(group.begin(), group.end(),
              [](const RepackRollout* a, const RepackRollout* b) { return a->id < b->id; });
    PlanGroup(group, config, plan);
  }
  return plan;
}

}  // namespace laminar::rollout
