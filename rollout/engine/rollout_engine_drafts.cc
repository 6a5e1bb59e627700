// RolloutEngine's speculation planning in its phases: the decoding candidates and their
// acceptance histories, the catch-ups of cold drafter caches, the budgets from measured costs, and
// exploration; and the verification of a drafted tree. See rollout_engine.h.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/check.h"
#include "rollout/engine/rollout_engine.h"

namespace laminar::rollout {

std::unordered_map<RequestId, int64_t> RolloutEngine::PlanDrafts() {
  DraftCandidates c = DecodingCandidates();
  PlanCatchUpCosts(c);
  std::vector<int64_t> budgets = BudgetDrafts(c);
  Explore(c, budgets);
  std::unordered_map<RequestId, int64_t> out;
  for (size_t i = 0; i < c.ids.size(); ++i) out[c.ids[i]] = budgets[i];
  return out;
}

RolloutEngine::DraftCandidates RolloutEngine::DecodingCandidates() {
  DraftCandidates c;
  for (const auto& [id, s] : samples_) {
    // Decodes only (a preempted sample waits to be prefilled again).
    if (std::ssize(s.tokens) > s.num_prompt_tokens && scheduler_.IsDecoding(id)) {
      c.ids.push_back(id);
    }
  }
  std::sort(c.ids.begin(), c.ids.end());
  // A sequence not verified yet starts from the engine's acceptance over all sequences; one that
  // has not drafted for a while fades back toward it.
  for (RequestId id : c.ids) {
    const Sample& s = samples_.at(id);
    c.stats.push_back(s.verifications > 0
                          ? s.acceptance.FadedToward(acceptance_, s.steps_without_draft)
                          : acceptance_.Prior());
  }
  // The cost model as measured at this batch size: plain steps against the line, drafts' costs
  // against the model's.
  c.gain = &GainFor(std::ssize(c.ids));
  c.calibration = {.plain_level = c.gain->level(),
                   .extra_factor = c.gain->extra_factor(),
                   .acceptance_factor = c.gain->acceptance_factor()};
  return c;
}

void RolloutEngine::PlanCatchUpCosts(DraftCandidates& c) const {
  // A model drafter whose cache is behind by more than one verified tree (a sequence it never
  // drafted for, or not for long) first catches up with a prefill: cold sequences pay it in their
  // first draft token, spread over the verifications left in them (at the engine-wide acceptance),
  // and exploration passes them over, so that drafts that do not pay never cost prefills. A
  // group's cold samples share their prompt's prefill, and until drafting has paid at this batch
  // size one cold sample a step may catch up (PlanCatchUps).
  const int64_t warm_catch_up = WarmCatchUp();
  std::vector<CatchUpNeed> needs;
  for (RequestId id : c.ids) {
    const Sample& s = samples_.at(id);
    needs.push_back({.behind = drafter_->CatchUpTokens({.seq = id,
                                                        .group = s.request_id,
                                                        .tokens = s.tokens,
                                                        .num_prompt_tokens = s.num_prompt_tokens}),
                     .group = s.request_id,
                     .generated = std::ssize(s.tokens) - s.num_prompt_tokens});
  }
  c.catch_up = PlanCatchUps(needs, warm_catch_up, c.gain->measured_to_pay());
  c.first_cost.assign(c.ids.size(), 0.0);
  const double a = std::min(acceptance_.alpha(), 0.999);
  const double tokens_per_verify =
      (1 - std::pow(a, static_cast<double>(config_.speculative.max_draft_tokens + 1))) / (1 - a);
  for (size_t i = 0; i < c.ids.size(); ++i) {
    if (c.catch_up[i] <= warm_catch_up) continue;
    if (c.catch_up[i] == kCatchUpNotThisStep) {
      c.first_cost[i] = std::numeric_limits<double>::infinity();
      continue;
    }
    const Sample& s = samples_.at(c.ids[i]);
    const int64_t left = std::max<int64_t>(
        1, s.matcher.options().max_tokens - (std::ssize(s.tokens) - s.num_prompt_tokens));
    const double verifications = std::max(1.0, static_cast<double>(left) / tokens_per_verify);
    c.first_cost[i] =
        static_cast<double>(c.catch_up[i]) * costs_.catch_up_per_token() / verifications;
  }
  // Warm sequences feed their catch-up in the drafter's first forward; cold ones in a prefill of
  // their own (first_cost).
  c.warm_rows.resize(c.ids.size());
  for (size_t i = 0; i < c.ids.size(); ++i) {
    c.warm_rows[i] = c.catch_up[i] <= warm_catch_up ? c.catch_up[i] : 0;
  }
}

std::vector<int64_t> RolloutEngine::BudgetDrafts(const DraftCandidates& c) {
  const SpeculativeConfig& spec = config_.speculative;
  std::vector<int64_t> budgets(c.ids.size(), spec.max_draft_tokens);
  if (!spec.adaptive) return budgets;
  if (costs_.ready()) {
    budgets = PlanDraftBudgets(c.stats, costs_, std::ssize(c.ids), spec.max_draft_tokens,
                               /*explore_nodes=*/0, c.first_cost, c.warm_rows, c.calibration);
    // Steps with drafts measured slower than plain ones: only exploration drafts (Explore), and
    // its steps keep measuring whether drafting pays again. While drafting pays, a plain step
    // now and then measures what it is compared with.
    if (!c.gain->pays() || c.gain->plain_due()) budgets.assign(c.ids.size(), 0);
    return budgets;
  }
  // Until the step cost has been measured at two sizes, every other step one sequence drafts
  // and the others do not: both sizes come soon whatever the batch. It is the sequence whose
  // drafter cache is most nearly caught up (a model drafter's catch-up costs a prefill; after the
  // first, that sequence stays warm).
  budgets.assign(c.ids.size(), 0);
  if (!c.ids.empty() && ++unmeasured_steps_ % 2 == 1) {
    // In turn among the least behind (all of them for drafters without a cache), so that a
    // sequence the drafter has nothing for does not hold the measurement up.
    const int64_t least = *std::ranges::min_element(c.catch_up);
    const size_t n = c.ids.size();
    const size_t start = static_cast<size_t>(unmeasured_steps_ / 2) % n;
    for (size_t k = 0; k < n; ++k) {
      if (c.catch_up[(start + k) % n] == least) {
        budgets[(start + k) % n] = std::min<int64_t>(4, spec.max_draft_tokens);
        break;
      }
    }
  }
  return budgets;
}

void RolloutEngine::Explore(const DraftCandidates& c, std::vector<int64_t>& budgets) {
  // Exploration: when no sequence has drafted for explore_every_ steps, the one that went
  // longest without tries two, so that acceptance and the cost of larger steps keep being
  // measured. One at a time: a model drafter's first draft for a sequence catches its cache up
  // on the whole sequence, which costs like a prefill.
  const std::vector<RequestId>& ids = c.ids;
  const int64_t warm_catch_up = WarmCatchUp();
  size_t longest = ids.size();     // the warm sequence idle longest
  size_t least_cold = ids.size();  // else the one least behind
  bool drafting = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    Sample& s = samples_.at(ids[i]);
    s.exploring = false;
    if (budgets[i] > 0) {
      s.acceptance = c.stats[i];  // the faded history (or the prior) is its history now
      s.steps_without_draft = 0;
      drafting = true;
    } else if (++s.steps_without_draft >
                   (longest < ids.size() ? samples_.at(ids[longest]).steps_without_draft : 0) &&
               c.catch_up[i] <= warm_catch_up) {
      longest = i;
    } else if (least_cold == ids.size() || c.catch_up[i] < c.catch_up[least_cold]) {
      least_cold = i;
    }
  }
  if (drafting || ids.empty()) {
    steps_since_draft_ = 0;
  } else if (++steps_since_draft_ >= explore_every_ && longest == ids.size() &&
             steps_since_draft_ >= kMaxExploreEvery && least_cold < ids.size() &&
             static_cast<double>(steps_since_draft_) * costs_.Seconds(std::ssize(ids)) >=
                 kColdExploreShare * static_cast<double>(c.catch_up[least_cold]) *
                     costs_.catch_up_per_token()) {
    // No warm sequence: a model drafter's caches all fell behind while drafting did not pay.
    // Once in kMaxExploreEvery steps at least, the least-behind sequence catches up and tries, so
    // that the acceptance estimate does not go stale for good; its catch-up (a prefill) at most
    // 1/kColdExploreShare of the time since the last try (a drafter that is never right, such as
    // layer_skip on an untrained model, cost the long tail 9% when it tried every 256 steps).
    longest = least_cold;
  }
  // Exploration measures acceptance. Where drafts would not pay even if nearly all were accepted
  // (a batch whose verification and drafter rows cost real compute), there is nothing to learn,
  // and a try costs rows (a model drafter's, a prefill when its cache is cold).
  const SpeculativeConfig& spec = config_.speculative;
  if (!drafting && !ids.empty() && steps_since_draft_ >= explore_every_ && longest < ids.size() &&
      DraftsCouldPay(costs_, std::ssize(ids), spec.max_draft_tokens, c.first_cost, c.warm_rows,
                     c.calibration)) {
    Sample& s = samples_.at(ids[longest]);
    s.acceptance = c.stats[longest];
    budgets[longest] = std::min<int64_t>(2, spec.max_draft_tokens);
    s.exploring = true;
    s.steps_without_draft = 0;
    steps_since_draft_ = 0;
  }
}

SpeculationGain& RolloutEngine::GainFor(int64_t decodes) {
  return gains_[std::bit_width(static_cast<uint64_t>(std::max<int64_t>(decodes, 1)))];
}

StatusOr<int64_t> RolloutEngine::AcceptDrafts(const ScheduledSeq& seq, const DraftTree& tree,
                                              std::span<const float> logits,
                                              std::vector<FinishedSample>* finished,
                                              int64_t* emitted, DraftOutcome* outcome) {
  Sample& s = samples_.at(seq.id);
  const int64_t v = model_->config().vocab_size;
  VerifiedPath path = VerifyTree(tree, logits, v, s.sampler);
  const auto accepted = std::ssize(path.accepted_nodes);
  // The accepted nodes' KV moves from the slot of position start + node to start + depth.
  const int64_t bs = config_.block_size;
  for (int64_t k = 0; k < accepted; ++k) {
    const int64_t from = seq.start + path.accepted_nodes[k], to = seq.start + 1 + k;
    if (from == to) continue;
    cache_.CopySlot(seq.block_table[from / bs], from % bs, seq.block_table[to / bs], to % bs);
  }
  // A rejection ended the walk unless the last accepted node (or the root) is a leaf.
  const int32_t last = accepted > 0 ? path.accepted_nodes.back() : 0;
  const bool rejected = std::ranges::find(tree.parents, last) != tree.parents.end();
  ++s.verifications;
  // PlanDrafts left the history it planned with in s.acceptance (the engine-wide prior as it
  // stood then, for a sequence's first tree).
  const double alpha = s.acceptance.alpha();
  double power = 1;
  for (int64_t j = 0; j < tree.size(); ++j) outcome->expected += (power *= alpha);
  outcome->accepted += accepted;
  s.acceptance.Record(accepted, rejected);
  acceptance_.Record(accepted, rejected, /*decay=*/0.99);
  if (s.exploring) {
    explore_every_ = accepted == 0 ? std::min(2 * explore_every_, kMaxExploreEvery) : kExploreEvery;
  }
  ++spec_stats_.verify_steps;
  spec_stats_.drafted_tokens += tree.size();
  spec_stats_.accepted_tokens += accepted;
  int64_t appended = 0;
  for (engine::SampledToken& token : path.tokens) {
    const bool finite = std::isfinite(token.logprob);  // else Append ends the sample without it
    LAMINAR_ASSIGN_OR_RETURN(bool done, Append(seq.id, std::move(token), finished));
    *emitted += finite;
    if (done) return 0;
    ++appended;
  }
  return appended;
}

}  // namespace laminar::rollout
