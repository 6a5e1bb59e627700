// Planning a step's drafts: per-sequence budgets for the most tokens per second from the measured
// costs and acceptance (PlanDraftBudgets), and the catch-ups of cold drafter caches (PlanCatchUps).
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "rollout/speculation/cost_model.h"

namespace laminar::rollout {

// What the cost model is corrected by when planning (SpeculationGain, measured per batch size):
// a plain step takes plain_level times the step cost line, the costs drafts add extra_factor
// times what the model puts them at, and drafts are accepted acceptance_factor times as often as
// their sequences' histories say.
struct PlanCalibration {
  double plain_level = 1.0;
  double extra_factor = 1.0;
  double acceptance_factor = 1.0;
};

// How many draft nodes each decoding sequence gets this step, for the most tokens per second
// expected from `cost`. A chain of k tokens for sequence i is expected to add alpha_i + ... +
// alpha_i^k tokens (a geometric acceptance process). It costs k rows of the policy's step
// (per_token), its catch-up rows in the drafter's first forward (catch_up[i] when given: the
// tokens emitted since its last draft) plus k - 1 more rows, and first_cost[i] when given (a cold
// sequence's catch-up prefill, spread over the steps it will serve). Chains of depth D cost D
// drafter forwards (their fixed part; one for a drafter without a model), shared by every sequence
// drafting. For each D the draft
// tokens are added greedily, the next one most likely accepted first, each sequence's first
// chain at the length that pays most, for as long as the tokens per second rise and a token is
// expected to add at least 0.05 tokens; the D that gives most wins, against no drafts at all. A
// step feeds at most twice the largest step measured (base_tokens + 1 at least): the line is a
// straight fit, so a plan far beyond what it measured (96 tokens from steps of 16 and 20 at batch
// 16: a 632 ms step where plain ones took 53) extends it a doubling at a time instead.
// `calibration` corrects the model by what was measured: the plain step the plan is compared with
// is the line's times plain_level, and the rows and forwards drafts add cost extra_factor times
// the lines' (first_cost, measured per catch-up token, is not scaled), and a draft token's
// expected acceptance is acceptance_factor times its history's.
// Returns [alpha.size()] budgets in [0, max_nodes]; all 0 when speculation does not pay (a large
// batch whose extra rows cost real compute). Before `cost` is ready, every sequence gets
// `explore_nodes` so that costs get measured.
std::vector<int64_t> PlanDraftBudgets(std::span<const AcceptanceStats> alpha,
                                      const StepCostModel& cost, int64_t base_tokens,
                                      int64_t max_nodes, int64_t explore_nodes,
                                      std::span<const double> first_cost = {},
                                      std::span<const int64_t> catch_up = {},
                                      const PlanCalibration& calibration = {});

// A decoding sequence's drafter cache as the planner sees it (PlanCatchUps): `behind` tokens of
// the sequence it has not fed (Drafter::CatchUpTokens), `generated` tokens after its prompt, in
// GRPO group `group`.
struct CatchUpNeed {
  int64_t behind = 0;
  int64_t group = 0;
  int64_t generated = 0;
};
inline constexpr int64_t kCatchUpNotThisStep = std::numeric_limits<int64_t>::max() / 4;

// The catch-up each sequence's first draft this step is planned to feed: `behind` for a warm one
// (behind <= warm: rows of the drafter's first forward); for a cold one, a prefill of its own.
// Cold sequences of one group share their prompt's prefill (the model drafter prefills it for the
// first that drafts and copies it to the others, ModelDrafter::HeldPrefix), so each is charged
// its own response tokens and an equal share of the prompt tokens the group lacks (at least
// warm + 1: still cold). Unless `proven` (SpeculationGain::measured_to_pay at this batch size),
// only the cold sequence least behind (the first of equals) may draft this step, charged its
// whole catch-up; the others get kCatchUpNotThisStep (RolloutEngine::PlanDrafts gives them an
// infinite first_cost, which PlanDraftBudgets leaves out). Returns [need.size()] tokens.
std::vector<int64_t> PlanCatchUps(std::span<const CatchUpNeed> need, int64_t warm, bool proven);

// Whether drafting could pay for any of `base_tokens` decoding sequences if nearly all drafts
// were accepted (alpha 0.95; the other arguments as for PlanDraftBudgets): exploration, which
// measures acceptance, has nothing to learn where it could not (a batch whose verification and
// drafter rows cost real compute). True before `cost` is ready. The calibration's
// acceptance_factor is not applied (nearly all accepted is the question).
bool DraftsCouldPay(const StepCostModel& cost, int64_t base_tokens, int64_t max_nodes,
                    std::span<const double> first_cost = {}, std::span<const int64_t> catch_up = {},
                    const PlanCalibration& calibration = {});

}  // namespace laminar::rollout
