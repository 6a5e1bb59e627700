// RolloutEngine::Step in its phases: drafts (plan and propose), schedule, assemble the packed
// batch, forward (drafting ahead beside it), verify and emit, and measure what speculation
// yielded. See rollout_engine.h.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "rollout/engine/rollout_engine.h"

namespace laminar::rollout {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StatusOr<std::vector<FinishedSample>> RolloutEngine::Step() {
  const auto step_start = std::chrono::steady_clock::now();
  MutexLock drafter_lock(&drafter_mu_);
  // Speculation: budgets for the decodes, and their trees, proposed together before the
  // scheduler grants them rows and blocks.
  StepDrafts drafts;
  Scheduler::DraftWanted draft_wanted;
  if (drafter_ != nullptr) {
    drafts = ProposeDrafts();
    draft_wanted = [&drafts](RequestId id) -> int64_t {
      auto t = drafts.trees.find(id);
      return t == drafts.trees.end() ? 0 : t->second.size();
    };
  }
  LAMINAR_ASSIGN_OR_RETURN(Plan plan, scheduler_.Schedule(draft_wanted));
  if (drafter_ != nullptr) spec_stats_.rerooted = drafter_->rerooted();
  last_step_empty_ = plan.empty();
  std::vector<FinishedSample> finished;
  if (plan.empty()) {
    LAMINAR_RETURN_IF_ERROR(scheduler_.OnTokens({}).status());
    return finished;
  }
  for (const BlockCopy& copy : plan.copies) cache_.CopyBlock(copy.src, copy.dst);
  LAMINAR_ASSIGN_OR_RETURN(StepBatch batch, AssembleBatch(plan, drafts));
  std::vector<float> logits;
  LAMINAR_ASSIGN_OR_RETURN(const double forward_s, RunForward(batch, &logits));
  tokens_forwarded_ += plan.num_batched_tokens;
  // The cost model covers decode steps only (prefill chunks run other kernels at other sizes).
  const bool decodes_only = std::ranges::all_of(plan.seqs, [](const ScheduledSeq& q) {
    return q.num_tokens - q.num_draft_tokens == 1 && q.forked.empty();
  });
  if (drafter_ != nullptr && decodes_only) costs_.Record(plan.num_batched_tokens, forward_s);
  LAMINAR_ASSIGN_OR_RETURN(StepEmitted emitted, EmitTokens(plan, drafts, logits, &finished));
  MeasureStep(plan, drafts, emitted, decodes_only, SecondsSince(step_start));
  // The stop matcher ends a sample at max_tokens before the scheduler would; any id the scheduler
  // still finishes here reached its length.
  LAMINAR_ASSIGN_OR_RETURN(std::vector<RequestId> at_length,
                           scheduler_.OnTokens(emitted.sampled, emitted.appended));
  for (RequestId id : at_length) finished.push_back(Finish(id, FinishReason::kLength));
  return finished;
}

RolloutEngine::StepDrafts RolloutEngine::ProposeDrafts() {
  StepDrafts d;
  d.budgets = PlanDrafts();
  // Every budgeted decode's tree in one batch (a model drafter runs each chain depth for all of
  // them in one forward), before the scheduler grants rows and blocks: a tree it does not
  // schedule (a rare preemption) is drafted for nothing, and the drafter's cache keeps what it
  // fed.
  std::vector<RequestId> ids;
  for (const auto& [id, b] : d.budgets) {
    if (b > 0) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());  // the drafter's draws in the same order every run
  std::vector<DraftContext> contexts;
  for (RequestId id : ids) {
    const Sample& s = samples_.at(id);
    contexts.push_back({.seq = id,
                        .group = s.request_id,
                        .tokens = s.tokens,
                        .num_prompt_tokens = s.num_prompt_tokens,
                        .max_nodes = d.budgets.at(id),
                        .sampling = &s.sampler.params()});
  }
  if (contexts.empty()) return d;
  d.asked = true;
  const auto draft_start = std::chrono::steady_clock::now();
  // A catch-up longer than one verified tree (a sequence's first draft: its whole prompt) is
  // a one-time prefill, not the marginal cost of drafting: it would turn speculation off.
  std::vector<DraftTree> proposed = drafter_->ProposeBatch(contexts, WarmCatchUp());
  const double draft_s = SecondsSince(draft_start);
  const std::span<const DraftForward> forwards = drafter_->last_forwards();
  // What the cost model puts drafting at (before this step's forwards join it).
  for (const DraftForward& f : forwards) {
    if (!f.catch_up) d.modelled_draft_s += costs_.draft().Seconds(f.rows);
  }
  int64_t drafted = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t n = proposed[i].size();
    drafted += n;
    ++spec_stats_.budgeted;
    spec_stats_.empty_drafts += n == 0;
    if (n > 0) d.trees[ids[i]] = std::move(proposed[i]);
  }
  if (!drafter_->runs_model()) {
    d.modelled_draft_s = costs_.draft().Seconds(drafted);
    costs_.RecordDraft(drafted, draft_s);  // a drafter without a model: one "forward"
  }
  for (const DraftForward& f : forwards) {
    if (f.catch_up) {
      costs_.RecordCatchUp(f.rows, f.seconds);
      d.catch_up_s += f.seconds;
    } else {
      costs_.RecordDraft(f.rows, f.seconds);
    }
  }
  return d;
}

StatusOr<RolloutEngine::StepBatch> RolloutEngine::AssembleBatch(const Plan& plan,
                                                                StepDrafts& drafts) {
  StepBatch batch;
  batch.tokens.reserve(static_cast<size_t>(plan.num_batched_tokens));
  batch.parents.resize(plan.seqs.size());
  const bool async_draft = drafter_ != nullptr && config_.speculative.async_draft;
  const int64_t v = model_->config().vocab_size;
  for (size_t b = 0; b < plan.seqs.size(); ++b) {
    const ScheduledSeq& seq = plan.seqs[b];
    const Sample& s = samples_.at(seq.id);
    const int64_t fed = seq.num_tokens - seq.num_draft_tokens;
    LAMINAR_CHECK(seq.start + fed <= static_cast<int64_t>(s.tokens.size()))
        << "sequence " << seq.id << " scheduled past its " << s.tokens.size() << " tokens";
    batch.tokens.insert(batch.tokens.end(), s.tokens.begin() + seq.start,
                        s.tokens.begin() + seq.start + fed);
    if (seq.num_draft_tokens > 0) {
      DraftTree& tree = drafts.trees.at(seq.id);
      LAMINAR_CHECK_GE(tree.size(), seq.num_draft_tokens) << "sequence " << seq.id;
      const int64_t budget = drafts.budgets.at(seq.id);
      const AcceptanceStats history = s.verifications > 0 ? s.acceptance : acceptance_.Prior();
      if (async_draft &&
          ShouldDraftAhead(tree.size(), seq.num_draft_tokens, budget, history.alpha())) {
        batch.ahead.emplace_back(seq.id, budget);
      }
      tree.Truncate(seq.num_draft_tokens);
      LAMINAR_RETURN_IF_ERROR(tree.Validate(v), "drafter " + drafter_->name());
      batch.tokens.insert(batch.tokens.end(), tree.tokens.begin(), tree.tokens.end());
      batch.parents[b] = tree.SpanParents();
    }
    batch.spans.emplace_back(0, seq.start, seq.num_tokens, batch.parents[b]);
    batch.tables.emplace_back(seq.block_table);
  }
  return batch;
}

StatusOr<double> RolloutEngine::RunForward(StepBatch& batch, std::vector<float>* logits) {
  const auto start = std::chrono::steady_clock::now();
  // SwiftSpec's asynchronous drafting: the drafter drafts past each tree on its own thread while
  // the target verifies. The drafter goes to that thread with drafter_mu_ and comes back when
  // the thread is joined.
  Drafter* drafter = drafter_.get();
  drafter_mu_.Unlock();
  DraftAheadTask drafting(drafter, std::move(batch.ahead), &drafter_mu_);
  const Status forward = model_->Forward(batch.tokens, batch.spans, batch.tables, &cache_,
                                         engine::LogitsFor::kLastTokenOfEachSequence, logits);
  const double forward_s = SecondsSince(start);  // the policy's forward alone
  drafting.Join();  // the wait for drafting ahead is on the critical path
  drafter_mu_.Lock();
  LAMINAR_RETURN_IF_ERROR(forward, "rollout step");
  return forward_s;
}

std::vector<engine::SampledToken> RolloutEngine::DrawPlainTokens(
    const Plan& plan, std::span<const float> logits,
    std::vector<std::pair<RequestId, const float*>>* draws) {
  const int64_t v = model_->config().vocab_size;
  for (int64_t row = 0; const ScheduledSeq& seq : plan.seqs) {
    const float* first = logits.data() + row * v;
    row += 1 + seq.num_draft_tokens;
    if (!seq.samples || seq.num_draft_tokens > 0) continue;
    draws->emplace_back(seq.id, first);
    for (RequestId id : seq.forked) draws->emplace_back(id, first);
  }
  std::vector<engine::SampledToken> drawn(draws->size());
  auto draw = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      drawn[i] = samples_.at((*draws)[i].first)
                     .sampler.Sample({(*draws)[i].second, static_cast<size_t>(v)});
    }
  };
  if (ThreadPool* pool = model_->pool(); pool != nullptr && draws->size() > 1) {
    pool->ParallelFor(std::ssize(*draws), 1, draw);
  } else {
    draw(0, std::ssize(*draws));
  }
  return drawn;
}

StatusOr<RolloutEngine::StepEmitted> RolloutEngine::EmitTokens(
    const Plan& plan, StepDrafts& drafts, std::span<const float> logits,
    std::vector<FinishedSample>* finished) {
  const int64_t v = model_->config().vocab_size;
  StepEmitted e;
  // Plain next-token draws are independent per sample (each has its own sampler and RNG), so they
  // run over the model's pool first; appending, which may finish samples, stays in plan order.
  std::vector<std::pair<RequestId, const float*>> draws;
  std::vector<engine::SampledToken> drawn = DrawPlainTokens(plan, logits, &draws);
  size_t next_draw = 0;
  int64_t row = 0;
  for (const ScheduledSeq& seq : plan.seqs) {
    const int64_t rows = 1 + seq.num_draft_tokens;
    std::span<const float> first(logits.data() + row * v, static_cast<size_t>(rows * v));
    row += rows;
    if (!seq.samples) continue;
    if (drafter_ != nullptr && seq.forked.empty() &&
        seq.start >= samples_.at(seq.id).num_prompt_tokens) {
      ++spec_stats_.decode_steps;
    }
    if (seq.num_draft_tokens > 0) {
      LAMINAR_ASSIGN_OR_RETURN(int64_t n, AcceptDrafts(seq, drafts.trees.at(seq.id), first,
                                                       finished, &e.emitted, &e.outcome));
      if (n > 0) {
        e.sampled.push_back(seq.id);
        e.appended.push_back(n);
      }
      continue;
    }
    std::vector<RequestId> ids = {seq.id};
    ids.insert(ids.end(), seq.forked.begin(), seq.forked.end());
    for (RequestId id : ids) {
      LAMINAR_CHECK(next_draw < draws.size() && draws[next_draw].first == id);
      const bool finite = std::isfinite(drawn[next_draw].logprob);  // else not emitted: see Append
      LAMINAR_ASSIGN_OR_RETURN(bool done, Append(id, std::move(drawn[next_draw++]), finished));
      e.emitted += finite;
      if (!done) {
        e.sampled.push_back(id);
        e.appended.push_back(1);
      }
    }
  }
  return e;
}

void RolloutEngine::MeasureStep(const Plan& plan, const StepDrafts& drafts,
                                const StepEmitted& emitted, bool decodes_only, double step_s) {
  const bool verified =
      std::ranges::any_of(plan.seqs, [](const ScheduledSeq& q) { return q.num_draft_tokens > 0; });
  if (verified) {
    GainFor(std::ssize(drafts.budgets))
        .RecordAcceptance(emitted.outcome.expected, emitted.outcome.accepted);
  }
  if (drafter_ == nullptr || !decodes_only || !costs_.ready()) return;
  // The whole step: drafting, forward, verification and the rest, as a plain step's, less the
  // cold sequences' catch-up prefills (a one-time cost).
  step_s -= drafts.catch_up_s;
  // Kept in the bucket PlanDrafts decided from (the decodes it saw; the scheduler may run
  // fewer). A step that drafted but verified nothing is neither.
  const auto decodes = std::ssize(plan.seqs);
  SpeculationGain& gain = GainFor(std::ssize(drafts.budgets));
  if (verified) {
    // The rows the drafts added to the policy's forward, at the line's cost per token.
    const double modelled_extra =
        drafts.modelled_draft_s +
        costs_.per_token() * static_cast<double>(plan.num_batched_tokens - decodes);
    gain.Record(decodes, emitted.emitted, step_s, costs_.Seconds(decodes), modelled_extra);
  } else if (!drafts.asked) {
    gain.RecordPlain(step_s, costs_.Seconds(decodes));
  }
}

}  // namespace laminar::rollout
