// Drafting ahead (SwiftSpec, arXiv 2506.11309 §3: the drafter runs off the target's critical
// path): which verified chains the drafter may draft past, and the thread it drafts on while the
// target's forward runs.
#pragma once

#include <cstdint>
#include <future>
#include <span>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "rollout/speculation/drafter.h"

namespace laminar::rollout {

// Whether to draft past a sequence's chain while it is verified: only when the whole chain is
// likely accepted, that is the drafter drafted its whole budget (it did not stop unsure), all of
// it is verified (`scheduled` nodes of a tree of `tree_size`), and alpha^budget >= 1/4 for the
// sequence's acceptance rate `alpha`.
bool ShouldDraftAhead(int64_t tree_size, int64_t scheduled, int64_t budget, double alpha);

// Runs Drafter::DraftAhead for each (sequence, node budget) of `ahead`, in order (so the
// drafter's random draws come in the same order every run), on a thread of its own from
// construction until Join (or destruction), holding `drafter_mu` (the mutex that guards the
// drafter; the caller releases it first and takes it back after Join). Nothing is started when
// `ahead` is empty. Not thread-safe itself: one owner.
class DraftAheadTask {
 public:
  DraftAheadTask(Drafter* drafter, std::vector<std::pair<int64_t, int64_t>> ahead,
                 Mutex* drafter_mu);
  ~DraftAheadTask() { Join(); }
  DraftAheadTask(const DraftAheadTask&) = delete;
  DraftAheadTask& operator=(const DraftAheadTask&) = delete;
  // Waits until the drafter is done (at once when `ahead` was empty).
  void Join();

 private:
  std::vector<std::pair<int64_t, int64_t>> ahead_;
  std::future<void> done_;
};

}  // namespace laminar::rollout
