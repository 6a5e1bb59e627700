// Drafting ahead on the drafter's own thread; see draft_ahead.h.
#include "rollout/speculation/draft_ahead.h"

#include <cmath>

namespace laminar::rollout {

bool ShouldDraftAhead(int64_t tree_size, int64_t scheduled, int64_t budget, double alpha) {
  return tree_size == scheduled && tree_size == budget &&
         std::pow(alpha, static_cast<double>(budget)) >= 0.25;
}

DraftAheadTask::DraftAheadTask(Drafter* drafter, std::vector<std::pair<int64_t, int64_t>> ahead,
                               Mutex* drafter_mu)
    : ahead_(std::move(ahead)) {
  if (ahead_.empty()) return;
  done_ = std::async(std::launch::async, [drafter, drafter_mu, this] {
    MutexLock lock(drafter_mu);
    for (const auto& [seq, nodes] : ahead_) drafter->DraftAhead(seq, nodes);
  });
}

void DraftAheadTask::Join() {
  if (done_.valid()) done_.get();
}

}  // namespace laminar::rollout
