// What speculation is decided from, measured: counters, per-sequence acceptance histories, the step
// and drafter cost lines, and the measured gain of drafted steps over plain ones.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace laminar::rollout {

// Counters of speculation in an engine (totals since construction). The per-step metrics
// (docs/metrics.md): rollout/spec_accept_rate = accepted_tokens / drafted_tokens,
// rollout/spec_mean_accepted_len = (accepted_tokens + verify_steps) / verify_steps (tokens emitted
// per verified tree), rollout/spec_enabled_frac = verify_steps / decode_steps.
struct SpecStats {
  int64_t decode_steps = 0;     // decode entries (one sequence, one step), speculating or not
  int64_t verify_steps = 0;     // of those, with a draft tree
  int64_t drafted_tokens = 0;   // nodes verified
  int64_t accepted_tokens = 0;  // nodes accepted
  int64_t budgeted = 0;         // decodes given a draft budget (the drafter was asked)
  int64_t empty_drafts = 0;     // of those, the drafter proposed nothing
  int64_t rerooted = 0;         // proposals taken from a chain drafted ahead (async_draft)
  // The counts since `earlier` (a snapshot of the same engine's running totals).
  SpecStats operator-(const SpecStats& earlier) const {
    return {.decode_steps = decode_steps - earlier.decode_steps,
            .verify_steps = verify_steps - earlier.verify_steps,
            .drafted_tokens = drafted_tokens - earlier.drafted_tokens,
            .accepted_tokens = accepted_tokens - earlier.accepted_tokens,
            .budgeted = budgeted - earlier.budgeted,
            .empty_drafts = empty_drafts - earlier.empty_drafts,
            .rerooted = rerooted - earlier.rerooted};
  }
};

// The acceptance history of one sequence: alpha, the per-token acceptance rate (maximum-likelihood
// of a geometric acceptance process: accepted / (accepted + rejections)), with exponential
// forgetting so it follows the sequence.
struct AcceptanceStats {
  double accepted = 1.0;  // prior: one accepted of two tried
  double rejections = 1.0;
  void Record(int64_t num_accepted, bool rejected, double decay = 0.9);
  double alpha() const { return accepted / (accepted + rejections); }
  // A fresh history with this one's alpha and the weight of the default prior (two tries).
  AcceptanceStats Prior() const {
    return {.accepted = 2 * alpha(), .rejections = 2 * (1 - alpha())};
  }
  // This history after `idle_steps` steps without a try: its evidence fades by `decay` per step
  // toward `global`'s Prior(). A sequence switched off by a run of rejections (frequent at
  // temperature 1, where a near-exact drafter still loses some draws) comes back once the
  // engine-wide rate says drafting pays, instead of waiting for exploration.
  AcceptanceStats FadedToward(const AcceptanceStats& global, int64_t idle_steps,
                              double decay = 0.9) const;
};

// A cost measured as a line, seconds = a + b * size, through the median time of each size over
// the recent records (a sliding window; least squares weighted by each size's count, so a stalled
// record does not tilt it), so speculation is decided from measured costs, not constants.
class CostLine {
 public:
  void Record(int64_t size, double seconds);
  // False until records of at least two distinct sizes were seen together (4 or more in the
  // window, 3 or more of them outside the most common size); then true for good (the slope is
  // kept while the window holds one size). Before, the line is flat through the median of what
  // was seen.
  bool ready() const { return fitted_; }
  bool seen() const { return !window_.empty(); }
  double Seconds(int64_t size) const;  // a + b * size (b >= 0)
  double fixed() const { return a_; }
  double per_unit() const { return b_; }
  // The largest size recorded in the window (0 before any): how far the line was measured.
  int64_t largest() const { return largest_; }

 private:
  void Fit();
  std::deque<std::pair<int64_t, double>> window_;
  double a_ = 0, b_ = 0;
  bool fitted_ = false;  // a slope was measured (records of two sizes at least)
  int64_t largest_ = 0;
};

// The measured costs speculation is planned from: the policy's step against the tokens it feeds,
// the drafter's forward against the rows it feeds (a batched drafter runs one forward per chain
// depth for all its sequences: a fixed part that reads the weights, and a part per row), and a
// model drafter's catch-up prefill per token.
class StepCostModel {
 public:
  // A decode step of the policy fed `tokens` tokens in `seconds`.
  void Record(int64_t tokens, double seconds) { step_.Record(tokens, seconds); }
  // A drafter forward fed `rows` (> 0) tokens in `seconds` (DraftForward). A drafter without a
  // model records each step's proposals as one "forward" whose rows are the tokens it drafted.
  void RecordDraft(int64_t rows, double seconds);
  const CostLine& draft() const { return draft_; }
  // What the planner takes a drafter row to cost: the draft line's slope once it has one.
  // Before, a model drafter's row costs what a policy token does: measured at one row count only
  // (one sequence drafting at a time while the step line is measured) the slope is 0, and rows
  // that looked free planned a draft for 14 of 16 sequences (each row cost 1.8 ms there: 0.94x of
  // off). A drafter without a model keeps its own line (rows are drafted tokens, microseconds).
  // The calibration's modelled extra (SpeculationGain) stays on the draft line itself: with this
  // stand-in there too, batch 4 drafted at a loss (0.98x).
  double draft_per_row() const {
    if (draft_.ready() || !forward_per_depth_) return draft_.per_unit();
    return std::max(draft_.per_unit(), step_.per_unit());
  }
  // Whether the drafter runs a forward per chain depth (a model drafter; the default) or once per
  // step whatever the depth (set by the engine from Drafter::runs_model).
  void set_forward_per_depth(bool per_depth) { forward_per_depth_ = per_depth; }
  bool forward_per_depth() const { return forward_per_depth_; }
  // A model drafter fed `tokens` (> 0) tokens of cold sequences in one prefill to catch their
  // caches up: an exponential moving average of seconds per token. Before one is seen,
  // catch_up_per_token() is a one-row draft forward's (a decode per token: an upper bound).
  void RecordCatchUp(int64_t tokens, double seconds);
  double catch_up_per_token() const {
    return catch_up_seen_ ? catch_up_per_token_ : draft_.Seconds(1);
  }
  // The policy's step line (CostLine::ready and the rest).
  bool ready() const { return step_.ready(); }
  double Seconds(int64_t tokens) const { return step_.Seconds(tokens); }
  double fixed() const { return step_.fixed(); }
  double per_token() const { return step_.per_unit(); }
  int64_t largest_step() const { return step_.largest(); }

 private:
  CostLine step_, draft_;
  bool forward_per_depth_ = true;
  double catch_up_per_token_ = 0;
  bool catch_up_seen_ = false;
};

// What speculation actually yields, measured: per step with drafts (decode steps only), the
// tokens it emitted per second of the whole step (drafting, forward, verification), against the
// tokens per second the same step would have emitted without drafts. That plain time is the step
// cost line at its decode count times a level measured on recent plain steps (their whole time
// over the line's), so a machine that slows down or speeds up, or overheads the line does not
// see, do not bias it; the first step after the line is measured, and while speculation runs
// every kPlainEvery-th step, is plain (plain_due) to keep the level fresh. A moving average of the
// ratio (exponential, corrected for its start so the first step weighs no more than the others);
// from kMinSteps steps on, pays() turns false below kOff and true again above kOn (hysteresis: near
// 1 the ratio is mostly noise). PlanDraftBudgets plans from expectations (acceptance history, a
// linear step cost); this closes the loop on what they missed (a step cost that is not linear in
// the rows, acceptance that does not hold, verification's own cost), so that speculation that loses
// is switched off (the "never slower than off").
class SpeculationGain {
 public:
  static constexpr int64_t kMinSteps = 8;
  static constexpr int64_t kPlainEvery = 16;
  static constexpr double kOff = 0.97, kOn = 1.03;
  // A step with drafts: `decodes` decoding sequences emitted `emitted` tokens in `seconds`; the
  // step cost line puts the same step without drafts at `line_seconds`, and the cost model put
  // what the drafts added (their rows in the policy's forward, the drafter's forwards) at
  // `modelled_extra` seconds (0: not known).
  void Record(int64_t decodes, int64_t emitted, double seconds, double line_seconds,
              double modelled_extra = 0, double decay = 0.95);
  // A plain step (no drafts) took `seconds` where the line puts it at `line_seconds`.
  void RecordPlain(double seconds, double line_seconds);
  bool pays() const { return pays_; }
  // kMinSteps drafted steps measured, and they pay: the cost model is trusted at this batch size
  // (PlanCatchUps' `proven`).
  bool measured_to_pay() const { return steps_ >= kMinSteps && pays_; }
  double ratio() const { return weight_ > 0 ? sum_ / weight_ : 1.0; }  // 1 before any step
  int64_t steps() const { return steps_; }
  // Plain steps' time over the line's, recent ones weighing most (1 before any).
  double level() const { return level_; }
  // No plain step measured the level yet, or kPlainEvery steps with drafts ran since the last.
  bool plain_due() const { return !level_seen_ || since_plain_ >= kPlainEvery; }
  // What drafted steps took beyond a plain step (their time less the line's times the level) over
  // what the cost model put their drafts at, recent steps weighing most, in [kMinExtra, kMaxExtra]
  // (1 before any): the costs the model does not see (verification's sampling, the drafter's
  // draws and bookkeeping, a drafter forward slower at its real shapes than its line), which
  // PlanDraftBudgets scales its modelled costs by (PlanCalibration). Never below 1: a step of a
  // few drafted tokens measures its extra within the noise of a plain step, and a factor of 0.5
  // from such steps doubled how often suffix drafted at batch 4 (0.96x of off).
  double extra_factor() const;
  static constexpr double kMinExtra = 1.0, kMaxExtra = 4.0;
  // A step's verified drafts: the planner expected `expected` of their tokens to be accepted (for
  // each sequence, alpha + alpha^2 + ... over the nodes it verified, alpha as planned) and
  // `accepted` were.
  void RecordAcceptance(double expected, int64_t accepted, double decay = 0.95);
  // Accepted over expected tokens, recent steps weighing most, with two tokens of prior at 1,
  // in [kMinAcceptance, 1]: what PlanDraftBudgets scales its expected gains by
  // (PlanCalibration). The planner drafts for the sequences whose histories look best, and a
  // history that looks good by chance then accepts less than it promised (selection bias): suffix
  // at batch 16, T = 1, drafted where alpha said 0.35 paid and accepted 0.31 of its tokens, 0.89x
  // of off in one round. Never above 1: the bias runs one way, and exploration (not chosen by its
  // history) brings the factor back when drafts get better.
  double acceptance_factor() const;
  static constexpr double kMinAcceptance = 0.25;

 private:
  double sum_ = 0, weight_ = 0;  // Σ decay^age · ratio, Σ decay^age
  int64_t steps_ = 0;
  bool pays_ = true;
  double level_ = 1.0;
  bool level_seen_ = false;
  int64_t since_plain_ = 0;
  double extra_seen_ = 0, extra_modelled_ = 0;  // Σ decay^age · seconds
  double accepted_ = 0, expected_ = 0;          // Σ decay^age · tokens
};

}  // namespace laminar::rollout
