// Measured costs and gains of speculation; see cost_model.h.
#include "rollout/speculation/cost_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <utility>

#include "core/check.h"

namespace laminar::rollout {

// ---------------------------------------------------------------------------------------------
// Adaptivity

void AcceptanceStats::Record(int64_t num_accepted, bool rejected, double decay) {
  accepted = decay * accepted + static_cast<double>(num_accepted);
  rejections = decay * rejections + (rejected ? 1.0 : 0.0);
}

AcceptanceStats AcceptanceStats::FadedToward(const AcceptanceStats& global, int64_t idle_steps,
                                             double decay) const {
  const double w = std::pow(decay, static_cast<double>(std::max<int64_t>(idle_steps, 0)));
  const AcceptanceStats prior = global.Prior();
  return {.accepted = w * accepted + (1 - w) * prior.accepted,
          .rejections = w * rejections + (1 - w) * prior.rejections};
}

void StepCostModel::RecordCatchUp(int64_t tokens, double seconds) {
  if (tokens <= 0 || !(seconds >= 0)) return;
  const double per_token = seconds / static_cast<double>(tokens);
  catch_up_per_token_ = catch_up_seen_ ? 0.8 * catch_up_per_token_ + 0.2 * per_token : per_token;
  catch_up_seen_ = true;
}

void StepCostModel::RecordDraft(int64_t rows, double seconds) {
  if (rows <= 0 || !(seconds >= 0)) return;
  draft_.Record(rows, seconds);
}

namespace {
constexpr size_t kCostWindow = 256;
constexpr size_t kMinRecordsOffTheMode = 3;  // CostLine::Fit
}  // namespace

void CostLine::Record(int64_t size, double seconds) {
  window_.emplace_back(size, seconds);
  if (window_.size() > kCostWindow) window_.pop_front();
  Fit();
}

void SpeculationGain::RecordPlain(double seconds, double line_seconds) {
  since_plain_ = 0;
  if (!(seconds > 0) || !(line_seconds > 0)) return;
  const double level = seconds / line_seconds;
  level_ = level_seen_ ? 0.7 * level_ + 0.3 * level : level;
  level_seen_ = true;
}

void SpeculationGain::Record(int64_t decodes, int64_t emitted, double seconds, double line_seconds,
                             double modelled_extra, double decay) {
  if (decodes <= 0 || seconds <= 0 || line_seconds <= 0) return;
  ++since_plain_;
  const double plain_seconds = line_seconds * level_;
  if (modelled_extra > 0 && level_seen_) {
    extra_seen_ = decay * extra_seen_ + (seconds - plain_seconds);
    extra_modelled_ = decay * extra_modelled_ + modelled_extra;
  }
  const double r =
      (static_cast<double>(emitted) / seconds) / (static_cast<double>(decodes) / plain_seconds);
  sum_ = decay * sum_ + r;
  weight_ = decay * weight_ + 1;
  if (++steps_ < kMinSteps) return;
  if (pays_ && ratio() < kOff) pays_ = false;
  if (!pays_ && ratio() > kOn) pays_ = true;
}

double SpeculationGain::extra_factor() const {
  if (!(extra_modelled_ > 0)) return 1.0;
  return std::clamp(extra_seen_ / extra_modelled_, kMinExtra, kMaxExtra);
}

void SpeculationGain::RecordAcceptance(double expected, int64_t accepted, double decay) {
  if (!(expected > 0)) return;
  expected_ = decay * expected_ + expected;
  accepted_ = decay * accepted_ + static_cast<double>(accepted);
}

double SpeculationGain::acceptance_factor() const {
  constexpr double kPrior = 2.0;  // tokens at factor 1
  return std::clamp((accepted_ + kPrior) / (expected_ + kPrior), kMinAcceptance, 1.0);
}

double CostLine::Seconds(int64_t size) const { return a_ + b_ * static_cast<double>(size); }

void CostLine::Fit() {
  // The median time of each size, then a least-squares line through those medians weighted by
  // their counts: one stalled record (a page fault, a neighbour's burst) moves a median little,
  // where it would tilt a plain fit over the records, and a slope measured from a stall would be
  // kept, switching speculation off for good.
  std::map<int64_t, std::vector<double>> by_size;
  for (const auto& [t, s] : window_) by_size[t].push_back(s);
  double n = 0, st = 0, ss = 0, stt = 0, sts = 0;
  for (auto& [t, times] : by_size) {
    const auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
    std::nth_element(times.begin(), mid, times.end());
    // The upper median for an even count: averaging the two middle times measured b1 speculation
    // at 1.0x instead of 1.4x (the warm-up's first steps, two per size, then set the slope).
    const double w = static_cast<double>(times.size()), x = static_cast<double>(t), y = *mid;
    n += w;
    st += w * x;
    ss += w * y;
    stt += w * x * x;
    sts += w * x * y;
  }
  largest_ = by_size.empty() ? 0 : by_size.rbegin()->first;
  const double var = stt - st * st / n;
  // Records of one size only (speculation off, a steady batch) say nothing of the slope: keep
  // the last one measured and move the line through their median. Nor does one record of another
  // size: at batch 16 a single drafted step of 20 tokens, a few ms off, set the slope to 0 (and
  // verification rows free) for a planner that then drafted for every sequence; the first slope
  // waits for 3 records outside the most common size, whose median one stall cannot move.
  size_t most_common = 0;
  for (const auto& [t, times] : by_size) most_common = std::max(most_common, times.size());
  if (by_size.size() >= 2 && var > 0 && window_.size() >= 4 &&
      (fitted_ || window_.size() - most_common >= kMinRecordsOffTheMode)) {
    b_ = std::max(0.0, (sts - st * ss / n) / var);
    fitted_ = true;
  }
  a_ = std::max(0.0, (ss - b_ * st) / n);
}

}  // namespace laminar::rollout
