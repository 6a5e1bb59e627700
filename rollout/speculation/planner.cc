// Draft budgets and catch-ups; see planner.h.
#include "rollout/speculation/planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <unordered_map>
#include <utility>

#include "core/check.h"

namespace laminar::rollout {

// Kept whole: one greedy search over chain depths whose running totals every step of it reads.
std::vector<int64_t> PlanDraftBudgets(std::span<const AcceptanceStats> alpha,
                                      const StepCostModel& cost, int64_t base_tokens,
                                      int64_t max_nodes, int64_t explore_nodes,
                                      std::span<const double> first_cost,
                                      std::span<const int64_t> catch_up,
                                      const PlanCalibration& calibration) {
  LAMINAR_CHECK(first_cost.empty() || first_cost.size() == alpha.size());
  LAMINAR_CHECK(catch_up.empty() || catch_up.size() == alpha.size());
  const size_t n = alpha.size();
  std::vector<int64_t> best(n, 0);
  if (max_nodes <= 0 || alpha.empty()) return best;
  if (!cost.ready()) {
    std::fill(best.begin(), best.end(), std::min(explore_nodes, max_nodes));
    return best;
  }
  constexpr double kMinGain = 0.05;  // expected tokens a draft token must add
  const double plain_s = std::max(cost.Seconds(base_tokens) * calibration.plain_level, 1e-12);
  const double extra = calibration.extra_factor;
  const double per_forward = extra * cost.draft().fixed(), per_row = extra * cost.draft_per_row();
  const double per_token = extra * cost.per_token();
  // A token after a chain's first: a row of the policy's step and a row of a drafter forward.
  const double marginal = per_token + per_row;
  double best_rate = static_cast<double>(n) / plain_s;
  const int64_t max_rows = std::max<int64_t>(2 * cost.largest_step(), base_tokens + 1);
  std::vector<int64_t> budget(n);
  std::vector<double> next_gain(n);
  for (int64_t depth = 1; depth <= max_nodes; ++depth) {
    double tokens = static_cast<double>(n);
    int64_t rows = base_tokens;  // the step's tokens, drafts included
    double seconds =
        plain_s + static_cast<double>(cost.forward_per_depth() ? depth : 1) * per_forward;
    double rate = tokens / seconds;
    std::fill(budget.begin(), budget.end(), 0);
    // Best next gain first (a heap of (gain of the sequence's next draft token, sequence)).
    std::priority_queue<std::pair<double, size_t>> next;
    for (size_t i = 0; i < n; ++i) {
      next_gain[i] = calibration.acceptance_factor * alpha[i].alpha();
      next.emplace(next_gain[i], i);
    }
    while (!next.empty()) {
      const auto [gain, i] = next.top();
      next.pop();
      if (gain < kMinGain) break;
      const double a = alpha[i].alpha();
      if (budget[i] == 0) {
        // A chain's first token also pays its catch-up (rows of the first forward, a cold
        // prefill), shared by the whole chain: take the length that raises the rate most, or
        // leave the sequence out (others may still pay).
        const double first = (first_cost.empty() ? 0.0 : first_cost[i]) +
                             (catch_up.empty() ? 0.0 : static_cast<double>(catch_up[i]) * per_row) +
                             per_token;
        double sum = 0, g = gain, chain_rate = rate;
        int64_t chain = 0;
        for (int64_t k = 1; k <= depth && rows + k <= max_rows && g >= kMinGain; ++k, g *= a) {
          sum += g;
          const double r =
              (tokens + sum) / (seconds + first + static_cast<double>(k - 1) * marginal);
          if (r > chain_rate) {
            chain_rate = r;
            chain = k;
          }
        }
        if (chain == 0) continue;
        for (int64_t k = 0; k < chain; ++k) {
          tokens += next_gain[i];
          next_gain[i] *= a;
        }
        seconds += first + static_cast<double>(chain - 1) * marginal;
        rate = chain_rate;
        budget[i] = chain;
        rows += chain;
      } else {
        const double new_rate = (tokens + gain) / (seconds + marginal);
        if (!(new_rate > rate) || rows + 1 > max_rows) continue;  // this chain stops here
        tokens += gain;
        seconds += marginal;
        rate = new_rate;
        ++rows;
        ++budget[i];
        next_gain[i] *= a;
      }
      if (budget[i] < depth) next.emplace(next_gain[i], i);
    }
    if (rate > best_rate) {
      best_rate = rate;
      best = budget;
    }
  }
  return best;
}

std::vector<int64_t> PlanCatchUps(std::span<const CatchUpNeed> need, int64_t warm, bool proven) {
  const size_t n = need.size();
  std::vector<int64_t> out(n);
  std::vector<int64_t> own(n);
  struct SharedPrompt {
    int64_t tokens = 0;  // the most prompt tokens a cold member lacks
    int64_t cold = 0;    // cold members lacking any
  };
  std::unordered_map<int64_t, SharedPrompt> shared;
  size_t cheapest = n;  // the cold sequence least behind
  for (size_t i = 0; i < n; ++i) {
    out[i] = own[i] = need[i].behind;
    if (need[i].behind <= warm) continue;
    if (cheapest == n || need[i].behind < need[cheapest].behind) cheapest = i;
    own[i] = std::min(need[i].behind, std::max<int64_t>(1, need[i].generated));
    if (own[i] == need[i].behind) continue;
    SharedPrompt& g = shared[need[i].group];
    g.tokens = std::max(g.tokens, need[i].behind - own[i]);
    ++g.cold;
  }
  for (size_t i = 0; i < n; ++i) {
    if (need[i].behind <= warm) continue;
    if (!proven) {
      // The cost model is a guess at a batch size where drafts have not run: at batch 4 the
      // drafter's rows cost 4 ms each, not the 2 ms its one-row forwards suggested, and
      // prefilling every cold sample of a wave for it lost 4% before drafting stopped.
      if (i != cheapest) out[i] = kCatchUpNotThisStep;
    } else if (own[i] < need[i].behind) {
      // Charging the prompt to one of them only (the first) planned drafts for its siblings
      // alone, which then paid the whole prompt: a 508 ms prefill planned as 5 ms.
      // Still a prefill of its own (the first of them to draft feeds the prompt in one).
      const SharedPrompt& g = shared.at(need[i].group);
      out[i] = std::max(warm + 1, own[i] + (g.tokens + g.cold - 1) / g.cold);
    }
  }
  return out;
}

bool DraftsCouldPay(const StepCostModel& cost, int64_t base_tokens, int64_t max_nodes,
                    std::span<const double> first_cost, std::span<const int64_t> catch_up,
                    const PlanCalibration& calibration) {
  if (!cost.ready() || base_tokens <= 0) return true;
  const std::vector<AcceptanceStats> sure(static_cast<size_t>(base_tokens),
                                          AcceptanceStats{.accepted = 19, .rejections = 1});
  PlanCalibration costs_only = calibration;  // nearly all accepted, whatever was measured
  costs_only.acceptance_factor = 1.0;
  const std::vector<int64_t> best =
      PlanDraftBudgets(sure, cost, base_tokens, max_nodes, 0, first_cost, catch_up, costs_only);
  return std::ranges::any_of(best, [](int64_t b) { return b > 0; });
}

}  // namespace laminar::rollout
