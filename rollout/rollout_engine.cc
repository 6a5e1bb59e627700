// Rollout engine: one scheduler plan per step, executed as one packed paged forward, then
// per-sample sampling and stop rules.
#include "rollout/rollout_engine.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "core/check.h"

namespace laminar::rollout {

uint64_t SampleSeed(uint64_t request_seed, int32_t sample_index) {
  if (sample_index == 0) return request_seed;
  // SplitMix64 (Steele et al., OOPSLA 2014) of the seed offset by the index: distinct, well mixed
  // streams for the samples of one group.
  uint64_t z = request_seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(sample_index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t KvBytesPerToken(const model::ModelConfig& model) {
  return 2 * model.num_hidden_layers * model.num_key_value_heads * model.head_dim *
         static_cast<int64_t>(sizeof(float));
}

StatusOr<int32_t> KvBlocksFor(int64_t megabytes, int64_t bytes_per_token, int32_t block_size) {
  if (megabytes <= 0 || bytes_per_token <= 0 || block_size <= 0) {
    return InvalidArgumentError("KV cache: " + std::to_string(megabytes) + " MiB, " +
                                std::to_string(bytes_per_token) + " bytes per token, blocks of " +
                                std::to_string(block_size) + " tokens: each must be > 0");
  }
  const int64_t blocks = (megabytes << 20) / (bytes_per_token * block_size);
  if (blocks < 1) {
    return InvalidArgumentError(std::to_string(megabytes) + " MiB holds no KV block of " +
                                std::to_string(block_size) + " tokens (" +
                                std::to_string(bytes_per_token * block_size) + " bytes)");
  }
  return static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30));
}

Status RolloutEngineConfig::Validate() const {
  if (block_size <= 0) {
    return InvalidArgumentError("rollout engine config: block_size must be > 0, got " +
                                std::to_string(block_size));
  }
  if (num_blocks <= 0) {
    return InvalidArgumentError("rollout engine config: num_blocks must be > 0, got " +
                                std::to_string(num_blocks));
  }
  LAMINAR_RETURN_IF_ERROR(speculative.Validate());
  return scheduler.Validate();
}

StatusOr<std::unique_ptr<RolloutEngine>> RolloutEngine::Create(const engine::LlamaModel* model,
                                                               RolloutEngineConfig config) {
  LAMINAR_CHECK(model != nullptr) << "RolloutEngine needs a model";
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  if (!config.token_bytes) {
    config.token_bytes = [](int32_t) -> StatusOr<std::string> { return std::string(); };
  }
  LAMINAR_ASSIGN_OR_RETURN(std::unique_ptr<Drafter> drafter, MakeDrafter(config.speculative));
  if (drafter != nullptr) LAMINAR_RETURN_IF_ERROR(drafter->OnWeights(model), "speculative drafter");
  std::unique_ptr<RolloutEngine> engine(new RolloutEngine(model, std::move(config)));
  if (drafter != nullptr) engine->costs_.set_forward_per_depth(drafter->runs_model());
  engine->drafter_ = std::move(drafter);
  return engine;
}

RolloutEngine::RolloutEngine(const engine::LlamaModel* model, RolloutEngineConfig config)
    : model_(model),
      config_(std::move(config)),
      scheduler_(config_.scheduler, config_.block_size, config_.num_blocks),
      cache_(model->NewPagedCache(config_.num_blocks, config_.block_size)) {
  scheduler_.mutable_blocks().SetWeightVersion(config_.weight_version);
}

Status RolloutEngine::CheckIds(std::span<const int32_t> ids, const std::string& what) const {
  const int64_t v = model_->config().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= v) {
      return InvalidArgumentError(what + " token " + std::to_string(i) + " has id " +
                                  std::to_string(ids[i]) + " outside the vocabulary of " +
                                  std::to_string(v));
    }
  }
  return OkStatus();
}

Status RolloutEngine::CheckContext(int64_t num_prompt, int64_t max_tokens) const {
  const int64_t context = model_->config().max_position_embeddings;
  if (num_prompt + max_tokens - 1 > context) {
    return InvalidArgumentError("a prompt of " + std::to_string(num_prompt) +
                                " tokens with max_tokens " + std::to_string(max_tokens) +
                                " does not fit the model's context of " + std::to_string(context) +
                                " positions");
  }
  return OkStatus();
}

StatusOr<int64_t> RolloutEngine::Add(RolloutRequest request) {
  const int64_t num_prompt = static_cast<int64_t>(request.prompt_ids.size());
  if (num_prompt == 0) return InvalidArgumentError("request: the prompt has no token ids");
  LAMINAR_RETURN_IF_ERROR(CheckIds(request.prompt_ids, "prompt"), "request");
  if (request.n < 1) {
    return InvalidArgumentError("request: n must be >= 1, got " + std::to_string(request.n));
  }
  LAMINAR_RETURN_IF_ERROR(request.sampling.Validate(), "request");
  LAMINAR_ASSIGN_OR_RETURN(
      StopMatcher matcher,
      StopMatcher::Create(request.stop, config_.token_bytes, config_.strips_leading_space),
      "request");
  const int64_t max_tokens = request.stop.max_tokens;
  LAMINAR_RETURN_IF_ERROR(CheckContext(num_prompt, max_tokens), "request");
  const RequestId first = next_seq_id_;
  // Every sample needs the same blocks, so if the first fits the empty cache all do.
  LAMINAR_RETURN_IF_ERROR(scheduler_.Add(first, request.prompt_ids, max_tokens), "request");
  const int64_t request_id = next_request_id_++;
  for (int32_t i = 0; i < request.n; ++i) {
    const RequestId id = next_seq_id_++;
    if (i > 0) LAMINAR_CHECK_OK(scheduler_.Add(id, request.prompt_ids, max_tokens, first));
    engine::SamplingParams params = request.sampling;
    params.seed = SampleSeed(request.sampling.seed, i);
    samples_.emplace(id, Sample{.request_id = request_id,
                                .sample_index = i,
                                .num_prompt_tokens = num_prompt,
                                .tokens = request.prompt_ids,
                                .logprobs = {},
                                .top_logprobs = {},
                                .sampler = engine::Sampler(params),
                                .matcher = matcher,
                                .acceptance = {},
                                .steps_without_draft = 0,
                                .exploring = false,
                                .verifications = 0});
  }
  return request_id;
}

// The ids, prompt/generated split and logprobs of `s`, moved into a FinishedSample or SampleState.
template <typename Out>
void RolloutEngine::MoveTokens(Sample& s, Out* out) {
  out->request_id = s.request_id;
  out->sample_index = s.sample_index;
  out->prompt_ids.assign(s.tokens.begin(), s.tokens.begin() + s.num_prompt_tokens);
  out->generated_ids.assign(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
  out->logprobs = std::move(s.logprobs);
  out->top_logprobs = std::move(s.top_logprobs);
}

void RolloutEngine::EndSample(RequestId id, const Sample& s) {
  if (drafter_ != nullptr) drafter_->OnSequenceEnd(id, s.request_id, s.tokens, s.num_prompt_tokens);
}

FinishedSample RolloutEngine::Finish(RequestId id, FinishReason reason) {
  auto it = samples_.find(id);
  LAMINAR_CHECK(it != samples_.end()) << "finishing unknown sample " << id;
  EndSample(id, it->second);
  FinishedSample out;
  MoveTokens(it->second, &out);
  out.finish_reason = reason;
  out.version = config_.weight_version;
  samples_.erase(it);
  return out;
}

StatusOr<bool> RolloutEngine::Append(RequestId id, engine::SampledToken token,
                                     std::vector<FinishedSample>* finished) {
  Sample& s = samples_.at(id);
  if (!std::isfinite(token.logprob)) {
    // The sampler found a NaN or +inf logit (engine::Sampler::Distribution).
    return InternalError("sample " + std::to_string(id) + " of request " +
                         std::to_string(s.request_id) + ": the policy's logits at position " +
                         std::to_string(s.tokens.size()) + " are not finite (weight version " +
                         std::to_string(config_.weight_version) +
                         "): its weights or activations overflowed; nothing was sampled");
  }
  LAMINAR_ASSIGN_OR_RETURN(StopMatcher::Step stop, s.matcher.Push(token.id),
                           "sample " + std::to_string(id));
  s.tokens.push_back(token.id);
  s.logprobs.push_back(token.logprob);
  if (s.sampler.params().logprobs > 0) s.top_logprobs.push_back(std::move(token.top));
  if (!stop.stop) return false;
  LAMINAR_RETURN_IF_ERROR(scheduler_.Finish(id));
  finished->push_back(Finish(id, stop.finish_reason));
  return true;
}

std::unordered_map<RequestId, int64_t> RolloutEngine::PlanDrafts() {
  const SpeculativeConfig& spec = config_.speculative;
  std::vector<RequestId> ids;
  for (const auto& [id, s] : samples_) {
    // Decodes only (a preempted sample waits to be prefilled again).
    if (std::ssize(s.tokens) > s.num_prompt_tokens && scheduler_.IsDecoding(id)) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  std::vector<AcceptanceStats> stats;
  // A sequence not verified yet starts from the engine's acceptance over all sequences; one that
  // has not drafted for a while fades back toward it.
  for (RequestId id : ids) {
    const Sample& s = samples_.at(id);
    stats.push_back(s.verifications > 0
                        ? s.acceptance.FadedToward(acceptance_, s.steps_without_draft)
                        : acceptance_.Prior());
  }
  // The cost model as measured at this batch size: plain steps against the line, drafts' costs
  // against the model's.
  const SpeculationGain& gain = GainFor(std::ssize(ids));
  const PlanCalibration calibration{.plain_level = gain.level(),
                                    .extra_factor = gain.extra_factor(),
                                    .acceptance_factor = gain.acceptance_factor()};
  // A model drafter whose cache is behind by more than one verified tree (a sequence it never
  // drafted for, or not for long) first catches up with a prefill: cold sequences pay it in their
  // first draft token, spread over the verifications left in them (at the engine-wide acceptance),
  // and exploration passes them over, so that drafts that do not pay never cost prefills. A
  // group's cold samples share their prompt's prefill, and until drafting has paid at this batch
  // size one cold sample a step may catch up (PlanCatchUps).
  const int64_t warm_catch_up = WarmCatchUp();
  std::vector<CatchUpNeed> needs;
  for (RequestId id : ids) {
    const Sample& s = samples_.at(id);
    needs.push_back({.behind = drafter_->CatchUpTokens({.seq = id,
                                                        .group = s.request_id,
                                                        .tokens = s.tokens,
                                                        .num_prompt_tokens = s.num_prompt_tokens}),
                     .group = s.request_id,
                     .generated = std::ssize(s.tokens) - s.num_prompt_tokens});
  }
  std::vector<int64_t> catch_up = PlanCatchUps(needs, warm_catch_up, gain.measured_to_pay());
  std::vector<double> first_cost(ids.size(), 0.0);
  const double a = std::min(acceptance_.alpha(), 0.999);
  const double tokens_per_verify =
      (1 - std::pow(a, static_cast<double>(spec.max_draft_tokens + 1))) / (1 - a);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (catch_up[i] <= warm_catch_up) continue;
    if (catch_up[i] == kCatchUpNotThisStep) {
      first_cost[i] = std::numeric_limits<double>::infinity();
      continue;
    }
    const Sample& s = samples_.at(ids[i]);
    const int64_t left = std::max<int64_t>(
        1, s.matcher.options().max_tokens - (std::ssize(s.tokens) - s.num_prompt_tokens));
    const double verifications = std::max(1.0, static_cast<double>(left) / tokens_per_verify);
    first_cost[i] = static_cast<double>(catch_up[i]) * costs_.catch_up_per_token() / verifications;
  }
  std::vector<int64_t> budgets(ids.size(), spec.max_draft_tokens);
  // Warm sequences feed their catch-up in the drafter's first forward; cold ones in a prefill of
  // their own (first_cost).
  std::vector<int64_t> warm_rows(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    warm_rows[i] = catch_up[i] <= warm_catch_up ? catch_up[i] : 0;
  }
  if (spec.adaptive) {
    if (costs_.ready()) {
      budgets = PlanDraftBudgets(stats, costs_, std::ssize(ids), spec.max_draft_tokens,
                                 /*explore_nodes=*/0, first_cost, warm_rows, calibration);
      // Steps with drafts measured slower than plain ones: only exploration drafts (below), and
      // its steps keep measuring whether drafting pays again. While drafting pays, a plain step
      // now and then measures what it is compared with.
      if (!gain.pays() || gain.plain_due()) budgets.assign(ids.size(), 0);
    } else {
      // Until the step cost has been measured at two sizes, every other step one sequence drafts
      // and the others do not: both sizes come soon whatever the batch. It is the sequence
      // whose drafter cache is most nearly caught up (a model drafter's catch-up costs a
      // prefill; after the first, that sequence stays warm).
      budgets.assign(ids.size(), 0);
      if (!ids.empty() && ++unmeasured_steps_ % 2 == 1) {
        // In turn among the least behind (all of them for drafters without a cache), so that a
        // sequence the drafter has nothing for does not hold the measurement up.
        const int64_t least = *std::ranges::min_element(catch_up);
        const size_t n = ids.size();
        const size_t start = static_cast<size_t>(unmeasured_steps_ / 2) % n;
        for (size_t k = 0; k < n; ++k) {
          if (catch_up[(start + k) % n] == least) {
            budgets[(start + k) % n] = std::min<int64_t>(4, spec.max_draft_tokens);
            break;
          }
        }
      }
    }
  }
  // Exploration: when no sequence has drafted for explore_every_ steps, the one that went
  // longest without tries two, so that acceptance and the cost of larger steps keep being
  // measured. One at a time: a model drafter's first draft for a sequence catches its cache up
  // on the whole sequence, which costs like a prefill.
  size_t longest = ids.size();     // the warm sequence idle longest
  size_t least_cold = ids.size();  // else the one least behind
  bool drafting = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    Sample& s = samples_.at(ids[i]);
    s.exploring = false;
    if (budgets[i] > 0) {
      s.acceptance = stats[i];  // the faded history (or the prior) is its history now
      s.steps_without_draft = 0;
      drafting = true;
    } else if (++s.steps_without_draft >
                   (longest < ids.size() ? samples_.at(ids[longest]).steps_without_draft : 0) &&
               catch_up[i] <= warm_catch_up) {
      longest = i;
    } else if (least_cold == ids.size() || catch_up[i] < catch_up[least_cold]) {
      least_cold = i;
    }
  }
  if (drafting || ids.empty()) {
    steps_since_draft_ = 0;
  } else if (++steps_since_draft_ >= explore_every_ && longest == ids.size() &&
             steps_since_draft_ >= kMaxExploreEvery && least_cold < ids.size() &&
             static_cast<double>(steps_since_draft_) * costs_.Seconds(std::ssize(ids)) >=
                 kColdExploreShare * static_cast<double>(catch_up[least_cold]) *
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
  if (!drafting && !ids.empty() && steps_since_draft_ >= explore_every_ && longest < ids.size() &&
      DraftsCouldPay(costs_, std::ssize(ids), spec.max_draft_tokens, first_cost, warm_rows,
                     calibration)) {
    Sample& s = samples_.at(ids[longest]);
    s.acceptance = stats[longest];
    budgets[longest] = std::min<int64_t>(2, spec.max_draft_tokens);
    s.exploring = true;
    s.steps_without_draft = 0;
    steps_since_draft_ = 0;
  }
  std::unordered_map<RequestId, int64_t> out;
  for (size_t i = 0; i < ids.size(); ++i) out[ids[i]] = budgets[i];
  return out;
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
    LAMINAR_ASSIGN_OR_RETURN(bool done, Append(seq.id, std::move(token), finished));
    ++*emitted;
    if (done) return 0;
    ++appended;
  }
  return appended;
}

StatusOr<std::vector<FinishedSample>> RolloutEngine::Step() {
  const auto step_start = std::chrono::steady_clock::now();
  // Speculation: budgets for the decodes, and their trees, proposed together before the
  // scheduler grants them rows and blocks.
  std::unordered_map<RequestId, int64_t> budgets;
  std::unordered_map<RequestId, DraftTree> trees;
  Scheduler::DraftWanted draft_wanted;
  // Cold sequences' catch-up prefills this step: a one-time cost, left out of what speculation
  // is measured to yield.
  double catch_up_s = 0;
  bool drafter_asked = false;   // this step
  double modelled_draft_s = 0;  // the cost model's time for this step's drafting
  if (drafter_ != nullptr) {
    budgets = PlanDrafts();
    // Every budgeted decode's tree in one batch (a model drafter runs each chain depth for all of
    // them in one forward), before the scheduler grants rows and blocks: a tree it does not
    // schedule (a rare preemption) is drafted for nothing, and the drafter's cache keeps what it
    // fed.
    std::vector<RequestId> ids;
    for (const auto& [id, b] : budgets) {
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
                          .max_nodes = budgets.at(id),
                          .sampling = &s.sampler.params()});
    }
    if (!contexts.empty()) {
      drafter_asked = true;
      const auto draft_start = std::chrono::steady_clock::now();
      // A catch-up longer than one verified tree (a sequence's first draft: its whole prompt) is
      // a one-time prefill, not the marginal cost of drafting: it would turn speculation off.
      std::vector<DraftTree> proposed = drafter_->ProposeBatch(contexts, WarmCatchUp());
      const double draft_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - draft_start).count();
      const std::span<const DraftForward> forwards = drafter_->last_forwards();
      // What the cost model puts drafting at (before this step's forwards join it).
      for (const DraftForward& f : forwards) {
        if (!f.catch_up) modelled_draft_s += costs_.draft().Seconds(f.rows);
      }
      int64_t drafted = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t n = proposed[i].size();
        drafted += n;
        ++spec_stats_.budgeted;
        spec_stats_.empty_drafts += n == 0;
        if (n > 0) trees[ids[i]] = std::move(proposed[i]);
      }
      if (!drafter_->runs_model()) {
        modelled_draft_s = costs_.draft().Seconds(drafted);
        costs_.RecordDraft(drafted, draft_s);  // a drafter without a model: one "forward"
      }
      for (const DraftForward& f : forwards) {
        if (f.catch_up) {
          costs_.RecordCatchUp(f.rows, f.seconds);
          catch_up_s += f.seconds;
        } else {
          costs_.RecordDraft(f.rows, f.seconds);
        }
      }
    }
    draft_wanted = [&](RequestId id) -> int64_t {
      auto t = trees.find(id);
      return t == trees.end() ? 0 : t->second.size();
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
  std::vector<int32_t> tokens;
  tokens.reserve(static_cast<size_t>(plan.num_batched_tokens));
  std::vector<engine::SequenceSpan> spans;
  std::vector<std::span<const int32_t>> tables;
  std::vector<std::vector<int32_t>> parents(plan.seqs.size());
  // Sequences whose whole proposal is verified now, and their budgets: the drafter may draft past
  // them (SpeculativeConfig::async_draft).
  std::vector<std::pair<RequestId, int64_t>> ahead;
  const bool async_draft = drafter_ != nullptr && config_.speculative.async_draft;
  const int64_t v = model_->config().vocab_size;
  for (size_t b = 0; b < plan.seqs.size(); ++b) {
    const ScheduledSeq& seq = plan.seqs[b];
    const Sample& s = samples_.at(seq.id);
    const int64_t fed = seq.num_tokens - seq.num_draft_tokens;
    LAMINAR_CHECK(seq.start + fed <= static_cast<int64_t>(s.tokens.size()))
        << "sequence " << seq.id << " scheduled past its " << s.tokens.size() << " tokens";
    tokens.insert(tokens.end(), s.tokens.begin() + seq.start, s.tokens.begin() + seq.start + fed);
    if (seq.num_draft_tokens > 0) {
      DraftTree& tree = trees.at(seq.id);
      LAMINAR_CHECK_GE(tree.size(), seq.num_draft_tokens) << "sequence " << seq.id;
      // Drafting ahead pays only when the whole chain is likely accepted: the drafter drafted
      // its whole budget (it did not stop unsure) and alpha^n >= 1/4.
      const int64_t budget = budgets.at(seq.id);
      const AcceptanceStats history = s.verifications > 0 ? s.acceptance : acceptance_.Prior();
      if (async_draft && tree.size() == seq.num_draft_tokens && tree.size() == budget &&
          std::pow(history.alpha(), static_cast<double>(budget)) >= 0.25) {
        ahead.emplace_back(seq.id, budget);
      }
      tree.Truncate(seq.num_draft_tokens);
      LAMINAR_RETURN_IF_ERROR(tree.Validate(v), "drafter " + drafter_->name());
      tokens.insert(tokens.end(), tree.tokens.begin(), tree.tokens.end());
      parents[b] = tree.SpanParents();
    }
    spans.emplace_back(0, seq.start, seq.num_tokens, parents[b]);
    tables.emplace_back(seq.block_table);
  }
  std::vector<float> logits;
  const auto t0 = std::chrono::steady_clock::now();
  double forward_s = 0;  // the policy's forward alone (drafting ahead overlaps it)
  {
    // SwiftSpec's asynchronous drafting: the drafter drafts past each tree on its own thread
    // while the target verifies; joined before anything else touches the drafter. In plan order,
    // so the drafter's random draws come in the same order every run.
    std::future<void> drafting;
    if (!ahead.empty()) {
      drafting = std::async(std::launch::async, [this, &ahead] {
        for (const auto& [id, nodes] : ahead) drafter_->DraftAhead(id, nodes);
      });
    }
    const Status forward = model_->Forward(tokens, spans, tables, &cache_,
                                           engine::LogitsFor::kLastTokenOfEachSequence, &logits);
    forward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (drafting.valid()) drafting.get();  // the wait for drafting ahead is on the critical path
    LAMINAR_RETURN_IF_ERROR(forward, "rollout step");
  }
  // The cost model covers decode steps only (prefill chunks run other kernels at other sizes).
  const bool decodes_only = std::ranges::all_of(plan.seqs, [](const ScheduledSeq& q) {
    return q.num_tokens - q.num_draft_tokens == 1 && q.forked.empty();
  });
  if (drafter_ != nullptr && decodes_only) {
    costs_.Record(plan.num_batched_tokens, forward_s);
  }
  int64_t emitted = 0;   // tokens the decodes appended (those that finished included)
  DraftOutcome outcome;  // of this step's verified trees
  // Plain next-token draws are independent per sample (each has its own sampler and RNG), so they
  // run over the model's pool first; appending, which may finish samples, stays in plan order.
  std::vector<std::pair<RequestId, const float*>> draws;
  for (int64_t row = 0; const ScheduledSeq& seq : plan.seqs) {
    const float* first = logits.data() + row * v;
    row += 1 + seq.num_draft_tokens;
    if (!seq.samples || seq.num_draft_tokens > 0) continue;
    draws.emplace_back(seq.id, first);
    for (RequestId id : seq.forked) draws.emplace_back(id, first);
  }
  std::vector<engine::SampledToken> drawn(draws.size());
  auto draw = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      drawn[i] =
          samples_.at(draws[i].first).sampler.Sample({draws[i].second, static_cast<size_t>(v)});
    }
  };
  if (ThreadPool* pool = model_->pool(); pool != nullptr && draws.size() > 1) {
    pool->ParallelFor(std::ssize(draws), 1, draw);
  } else {
    draw(0, std::ssize(draws));
  }
  std::vector<RequestId> sampled;
  std::vector<int64_t> appended;
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
      LAMINAR_ASSIGN_OR_RETURN(
          int64_t n, AcceptDrafts(seq, trees.at(seq.id), first, &finished, &emitted, &outcome));
      if (n > 0) {
        sampled.push_back(seq.id);
        appended.push_back(n);
      }
      continue;
    }
    std::vector<RequestId> ids = {seq.id};
    ids.insert(ids.end(), seq.forked.begin(), seq.forked.end());
    for (RequestId id : ids) {
      LAMINAR_CHECK(next_draw < draws.size() && draws[next_draw].first == id);
      LAMINAR_ASSIGN_OR_RETURN(bool done, Append(id, std::move(drawn[next_draw++]), &finished));
      ++emitted;
      if (!done) {
        sampled.push_back(id);
        appended.push_back(1);
      }
    }
  }
  const bool verified =
      std::ranges::any_of(plan.seqs, [](const ScheduledSeq& q) { return q.num_draft_tokens > 0; });
  if (verified) {
    GainFor(std::ssize(budgets)).RecordAcceptance(outcome.expected, outcome.accepted);
  }
  if (drafter_ != nullptr && decodes_only && costs_.ready()) {
    // The whole step: drafting, forward, verification and the rest, as a plain step's.
    const double step_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count() -
        catch_up_s;
    // Kept in the bucket PlanDrafts decided from (the decodes it saw; the scheduler may run
    // fewer). A step that drafted but verified nothing is neither.
    const auto decodes = std::ssize(plan.seqs);
    SpeculationGain& gain = GainFor(std::ssize(budgets));
    if (verified) {
      // The rows the drafts added to the policy's forward, at the line's cost per token.
      const double modelled_extra =
          modelled_draft_s +
          costs_.per_token() * static_cast<double>(plan.num_batched_tokens - decodes);
      gain.Record(decodes, emitted, step_s, costs_.Seconds(decodes), modelled_extra);
    } else if (!drafter_asked) {
      gain.RecordPlain(step_s, costs_.Seconds(decodes));
    }
  }
  // The stop matcher ends a sample at max_tokens before the scheduler would; any id the scheduler
  // still finishes here reached its length.
  LAMINAR_ASSIGN_OR_RETURN(std::vector<RequestId> at_length,
                           scheduler_.OnTokens(sampled, appended));
  for (RequestId id : at_length) finished.push_back(Finish(id, FinishReason::kLength));
  return finished;
}

Status RolloutEngine::SetWeights(const engine::LlamaModel* model, int64_t version,
                                 const engine::LlamaModel* draft) {
  LAMINAR_CHECK(model != nullptr) << "SetWeights needs a model";
  if (!idle()) {
    return FailedPreconditionError("rollout engine: cannot swap weights with " +
                                   std::to_string(samples_.size()) + " samples in flight");
  }
  if (version <= config_.weight_version) {
    return InvalidArgumentError("rollout engine: new weight version " + std::to_string(version) +
                                " is not above the current " +
                                std::to_string(config_.weight_version));
  }
  const model::ModelConfig& a = model_->config();
  const model::ModelConfig& b = model->config();
  const bool same_shapes = a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
                           a.num_hidden_layers == b.num_hidden_layers &&
                           a.num_key_value_heads == b.num_key_value_heads &&
                           a.head_dim == b.head_dim &&
                           a.max_position_embeddings == b.max_position_embeddings;
  if (!same_shapes) {
    return InvalidArgumentError(
        "rollout engine: the new weights' shapes (vocab, hidden, layers, kv heads, head dim, "
        "context) differ from the engine's");
  }
  if (drafter_ != nullptr) {
    LAMINAR_RETURN_IF_ERROR(drafter_->OnWeights(model, draft),
                            "rollout engine: speculative drafter");
  }
  if (draft != nullptr) config_.speculative.draft_model = draft;
  model_ = model;
  config_.weight_version = version;
  scheduler_.mutable_blocks().SetWeightVersion(version);
  return OkStatus();
}

StatusOr<std::vector<SampleState>> RolloutEngine::Export(int64_t request_id) {
  std::vector<RequestId> ids;
  for (const auto& [id, s] : samples_) {
    if (s.request_id == request_id) ids.push_back(id);
  }
  if (ids.empty()) {
    return NotFoundError("rollout engine: request " + std::to_string(request_id) +
                         " has no sample in flight");
  }
  std::sort(ids.begin(), ids.end(), [&](RequestId x, RequestId y) {
    return samples_.at(x).sample_index < samples_.at(y).sample_index;
  });
  std::vector<SampleState> out;
  for (RequestId id : ids) {
    Sample& s = samples_.at(id);
    LAMINAR_CHECK_OK(scheduler_.Migrate(id));
    SampleState st;
    MoveTokens(s, &st);
    st.sampling = s.sampler.params();
    st.rng = s.sampler.rng_state();
    st.stop = s.matcher.options();
    st.matcher = s.matcher.Export();
    st.version = config_.weight_version;
    EndSample(id, s);
    out.push_back(std::move(st));
    samples_.erase(id);
  }
  return out;
}

std::vector<SampleState> RolloutEngine::ExportAll() {
  std::set<int64_t> requests;
  for (const auto& [id, s] : samples_) requests.insert(s.request_id);
  std::vector<SampleState> out;
  for (int64_t r : requests) {
    auto states = Export(r);
    LAMINAR_CHECK_OK(states.status());
    for (auto& st : *states) out.push_back(std::move(st));
  }
  return out;
}

StatusOr<int64_t> RolloutEngine::Import(SampleState state) {
  if (state.version != config_.weight_version) {
    return FailedPreconditionError("import: the sample was generated under weight version " +
                                   std::to_string(state.version) + ", this engine holds " +
                                   std::to_string(config_.weight_version));
  }
  const int64_t num_prompt = static_cast<int64_t>(state.prompt_ids.size());
  const int64_t num_generated = static_cast<int64_t>(state.generated_ids.size());
  if (num_prompt == 0) return InvalidArgumentError("import: the prompt has no token ids");
  LAMINAR_RETURN_IF_ERROR(CheckIds(state.prompt_ids, "prompt"), "import");
  LAMINAR_RETURN_IF_ERROR(CheckIds(state.generated_ids, "generated"), "import");
  if (static_cast<int64_t>(state.logprobs.size()) != num_generated) {
    return InvalidArgumentError("import: " + std::to_string(state.logprobs.size()) +
                                " logprobs for " + std::to_string(num_generated) +
                                " generated tokens");
  }
  const bool wants_top = state.sampling.logprobs > 0;
  if (static_cast<int64_t>(state.top_logprobs.size()) != (wants_top ? num_generated : 0)) {
    return InvalidArgumentError("import: " + std::to_string(state.top_logprobs.size()) +
                                " top-logprob lists for " + std::to_string(num_generated) +
                                " generated tokens");
  }
  const int64_t max_tokens = state.stop.max_tokens;
  if (num_generated >= max_tokens) {
    return InvalidArgumentError("import: the sample already has " + std::to_string(num_generated) +
                                " tokens of max_tokens " + std::to_string(max_tokens));
  }
  LAMINAR_ASSIGN_OR_RETURN(
      StopMatcher matcher,
      StopMatcher::Create(state.stop, config_.token_bytes, config_.strips_leading_space), "import");
  LAMINAR_RETURN_IF_ERROR(matcher.Restore(state.matcher), "import");
  if (matcher.num_tokens() != num_generated || matcher.finished()) {
    return InvalidArgumentError("import: the stop state covers " +
                                std::to_string(matcher.num_tokens()) + " tokens" +
                                (matcher.finished() ? " and has stopped" : "") +
                                ", the sample has " + std::to_string(num_generated) + " running");
  }
  LAMINAR_RETURN_IF_ERROR(CheckContext(num_prompt, max_tokens), "import");
  // The prompt and generated tokens are prefilled as one prompt; the next sampled token is the
  // sample's next.
  std::vector<int32_t> tokens = std::move(state.prompt_ids);
  tokens.insert(tokens.end(), state.generated_ids.begin(), state.generated_ids.end());
  const RequestId id = next_seq_id_;
  LAMINAR_RETURN_IF_ERROR(scheduler_.Add(id, tokens, max_tokens - num_generated), "import");
  ++next_seq_id_;
  const int64_t request_id = next_request_id_++;
  samples_.emplace(id, Sample{.request_id = request_id,
                              .sample_index = state.sample_index,
                              .num_prompt_tokens = num_prompt,
                              .tokens = std::move(tokens),
                              .logprobs = std::move(state.logprobs),
                              .top_logprobs = std::move(state.top_logprobs),
                              .sampler = engine::Sampler(state.sampling, state.rng),
                              .matcher = std::move(matcher),
                              .acceptance = {},
                              .steps_without_draft = 0,
                              .exploring = false,
                              .verifications = 0});
  return request_id;
}

std::vector<RolloutEngine::InFlightSample> RolloutEngine::InFlight() const {
  std::vector<InFlightSample> out;
  out.reserve(samples_.size());
  for (const auto& [id, s] : samples_) {
    out.push_back({.request_id = s.request_id,
                   .sample_index = s.sample_index,
                   .num_tokens = static_cast<int64_t>(s.tokens.size()),
                   .generated_ids = std::span<const int32_t>(s.tokens).subspan(
                       static_cast<size_t>(s.num_prompt_tokens)),
                   .logprobs = s.logprobs});
  }
  std::sort(out.begin(), out.end(), [](const InFlightSample& a, const InFlightSample& b) {
    return a.request_id != b.request_id ? a.request_id < b.request_id
                                        : a.sample_index < b.sample_index;
  });
  return out;
}

StatusOr<std::vector<FinishedSample>> RolloutEngine::RunToCompletion() {
  std::vector<FinishedSample> all;
  int64_t empty_steps = 0;
  while (!idle()) {
    LAMINAR_ASSIGN_OR_RETURN(std::vector<FinishedSample> done, Step());
    for (auto& f : done) all.push_back(std::move(f));
    empty_steps = last_step_empty_ ? empty_steps + 1 : 0;
    if (empty_steps > 1) {
      return InternalError("rollout engine: no progress with " + std::to_string(samples_.size()) +
                           " samples left");
    }
  }
  return all;
}

}  // namespace laminar::rollout
