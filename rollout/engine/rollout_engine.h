// The generation engine of a rollout worker: continuous batching (rollout::Scheduler) over a
// paged KV cache (engine::PagedKvCache) and a LlamaModel, with per-sample seeded sampling, exact
// logprobs, stop rules, and GRPO groups whose samples share the prompt's KV blocks
// (docs/architecture.md). References: vLLM (Kwon et al., SOSP 2023, §4), Sarathi-Serve
// (OSDI 2024, §4.2).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "core/status.h"
#include "engine/llama_model.h"
#include "engine/paged_kv_cache.h"
#include "engine/sampler.h"
#include "rollout/engine/scheduler.h"
#include "rollout/engine/stop_matcher.h"
#include "rollout/speculation/speculation.h"

namespace laminar::rollout {

struct RolloutEngineConfig {
  SchedulerConfig scheduler;
  int32_t block_size = 16;   // KV token slots per block (> 0)
  int32_t num_blocks = 256;  // KV blocks in the pool (> 0)
  int64_t weight_version = 0;
  // Bytes of each token's text, for stop strings. Null: tokens have no text (stop strings never
  // match; stop ids and max_tokens still apply).
  TokenBytesFn token_bytes;
  bool strips_leading_space = false;  // SentencePiece's dummy prefix (StopMatcher::Create)
  SpeculativeConfig speculative;      // drafter "off": no speculation
  // InvalidArgument naming the field for bad values.
  Status Validate() const;
};

// Bytes one token takes in the engine's KV cache for `model`: f32 K and V of every layer's KV
// heads, 2 · layers · kv_heads · head_dim · 4.
int64_t KvBytesPerToken(const model::ModelConfig& model);

// How many KV blocks of `block_size` tokens fit in `megabytes` MiB at `bytes_per_token` (at most
// 2^30). Errors: InvalidArgument when not one block fits ("... MiB holds no KV block of N
// tokens"), or for a non-positive argument.
StatusOr<int32_t> KvBlocksFor(int64_t megabytes, int64_t bytes_per_token, int32_t block_size);

// One generation request: `n` samples from one prompt (a GRPO group when n > 1).
struct RolloutRequest {
  std::vector<int32_t> prompt_ids;  // >= 1 ids in [0, V)
  // Sample i draws with seed SampleSeed(sampling.seed, i).
  engine::SamplingParams sampling;
  StopOptions stop;
  int32_t n = 1;  // >= 1
};

// One finished sample of a request.
struct FinishedSample {
  int64_t request_id = 0;    // returned by Add
  int32_t sample_index = 0;  // in [0, n)
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;  // exactly the sampled tokens (stop token included)
  std::vector<float> logprobs;         // [generated_ids.size()], natural log, as sampled
  // [generated_ids.size()] when sampling.logprobs > 0 (each the top tokens of the distribution
  // that token was sampled from, see engine::SampledToken::top); empty otherwise.
  std::vector<std::vector<engine::TokenLogprob>> top_logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  int64_t version = 0;  // weight version the tokens were sampled under
};

// Everything about one in-flight sample that another engine needs to continue it exactly
// (the migration step of Laminar's repack, docs/architecture.md). Plain data.
struct SampleState {
  int64_t request_id = 0;  // in the exporting engine; the importer assigns its own
  int32_t sample_index = 0;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;  // sampled so far (fewer than stop.max_tokens)
  std::vector<float> logprobs;         // [generated_ids.size()]
  std::vector<std::vector<engine::TokenLogprob>> top_logprobs;  // as FinishedSample
  engine::SamplingParams sampling;  // this sample's parameters (seed = SampleSeed(...))
  engine::Xoshiro256::State rng{};  // the sampler's RNG after the last generated token
  StopOptions stop;
  StopMatcher::State matcher;  // after the last generated token
  int64_t version = 0;         // weight version of every generated token
};

// The seed of sample `sample_index` of a request with seed `request_seed`: the request seed itself
// for sample 0 (so an n = 1 request with seed s equals sample 0 of a group with seed s), a
// SplitMix64 mix of both otherwise.
uint64_t SampleSeed(uint64_t request_seed, int32_t sample_index);

// Runs requests to completion step by step. Each Step is one scheduler plan executed as one packed
// paged forward; a sample's tokens depend only on its prompt, parameters and seed, never on what
// else shares the batch (up to the model's batch invariance: exact on the reference backend).
// Preempted samples are re-prefilled from prompt + generated tokens and keep their RNG state.
//
// Borrows the model (it must outlive the engine); owns the scheduler and the KV cache. Not
// thread-safe: one thread calls Add and Step.
class RolloutEngine {
 public:
  // Errors: the config's Validate error (Unimplemented for a drafter not built yet).
  static StatusOr<std::unique_ptr<RolloutEngine>> Create(const engine::LlamaModel* model,
                                                         RolloutEngineConfig config);

  // Queues a request; returns its id (0, 1, 2, ...). Errors (nothing queued): InvalidArgument for
  // an empty prompt, an id outside the vocabulary, n < 1, bad stop options, or a prompt that with
  // max_tokens does not fit the model's context (prompt + max_tokens - 1 >
  // max_position_embeddings, naming both); ResourceExhausted when one sample could not fit the
  // empty KV cache.
  StatusOr<int64_t> Add(RolloutRequest request);

  // Runs one engine step: the plan's block copies, one forward with logits for the last position
  // of each scheduled sequence, a token for every sequence that samples (and for its forked
  // group children, from the same logits, each with its own sampler), the stop rules. Returns the
  // samples that finished in this step (in plan order).
  // With speculation on, decodes also feed a drafted token tree (as many nodes as the scheduler
  // grants from the leftover budget and blocks, sized by PlanDraftBudgets), verified in the same
  // forward (VerifyTree): a sequence appends its accepted drafts and one sampled token, each
  // through the stop rules in order; the accepted drafts' KV moves to their positions' slots and
  // the rejected ones' slots are released. Errors: the scheduler's or the model's
  // (a bug in the engine), after which the engine should be dropped.
  StatusOr<std::vector<FinishedSample>> Step() LAMINAR_EXCLUDES(drafter_mu_);

  // Steps until no request is left; the finished samples in finishing order. Internal error if a
  // step makes no progress while requests are waiting (cannot happen by the scheduler's
  // guarantees).
  StatusOr<std::vector<FinishedSample>> RunToCompletion();

  // Swaps in new weights between steps: `model` (borrowed, outliving the engine) becomes the
  // policy of every later request and `version` their version; the prefix cache forgets KV of
  // older versions. Errors (nothing changes): FailedPrecondition while a request is in flight
  // (every trajectory is generated by exactly one version; docs/architecture.md); InvalidArgument
  // when `version` is not above the current one or the model's shapes differ (the KV pool is laid
  // out for the old shapes). `draft` (optional, borrowed likewise): the draft_model drafter's model
  // from now on (one built from this version, e.g. the policy's weights in a cheaper format);
  // null keeps the drafter's.
  Status SetWeights(const engine::LlamaModel* model, int64_t version,
                    const engine::LlamaModel* draft = nullptr) LAMINAR_EXCLUDES(drafter_mu_);

  // Removes the unfinished samples of request `request_id` from this engine and returns their
  // states, by sample index; their KV blocks are freed. NotFound when the request has no sample in
  // flight (unknown, or all finished).
  StatusOr<std::vector<SampleState>> Export(int64_t request_id) LAMINAR_EXCLUDES(drafter_mu_);
  // Export of every request in flight (the engine is idle afterwards), by request id.
  std::vector<SampleState> ExportAll();
  // Continues an exported sample as a new one-sample request (the returned id; its
  // FinishedSample keeps state.sample_index). The prompt and generated tokens are prefilled
  // again, then sampling resumes with the restored RNG and stop state, so the tokens equal those
  // the exporting engine would have produced (exactly on the reference backend). Errors (nothing
  // queued): FailedPrecondition when state.version differs from this engine's; InvalidArgument
  // for an inconsistent state (ids outside the vocabulary, logprob counts that differ from the
  // generated count, max_tokens already reached, a matcher state that does not fit the stop
  // options, context overflow); ResourceExhausted when it could not fit the empty KV cache.
  StatusOr<int64_t> Import(SampleState state);

  // A running sample's progress, for partial-response streaming (docs/architecture.md). The spans
  // are valid until the next non-const call.
  struct InFlightSample {
    int64_t request_id = 0;
    int32_t sample_index = 0;
    int64_t num_tokens = 0;  // prompt + generated
    std::span<const int32_t> generated_ids;
    std::span<const float> logprobs;
  };
  // Every sample in flight, by request id then sample index.
  std::vector<InFlightSample> InFlight() const;
  // Samples in flight (admitted or waiting).
  int64_t num_in_flight() const { return static_cast<int64_t>(samples_.size()); }

  bool idle() const { return scheduler_.idle(); }
  const SpecStats& spec_stats() const { return spec_stats_; }
  // Tokens run through the model so far (prompt chunks, decodes and their drafts): the work done,
  // as it is done (the manager measures stragglers by it).
  int64_t tokens_forwarded() const { return tokens_forwarded_; }
  const StepCostModel& step_costs() const { return costs_; }
  const Scheduler& scheduler() const { return scheduler_; }
  const engine::PagedKvCache& kv_cache() const { return cache_; }
  int64_t weight_version() const { return config_.weight_version; }

 private:
  // One sample: a scheduler sequence.
  struct Sample {
    int64_t request_id = 0;
    int32_t sample_index = 0;
    int64_t num_prompt_tokens = 0;
    std::vector<int32_t> tokens;  // prompt followed by the generated tokens
    std::vector<float> logprobs;
    std::vector<std::vector<engine::TokenLogprob>> top_logprobs;
    engine::Sampler sampler;
    StopMatcher matcher;
    AcceptanceStats acceptance;  // speculation's history for this sample
    int64_t steps_without_draft = 0;
    bool exploring = false;     // the current draft is an exploration (PlanDrafts)
    int64_t verifications = 0;  // drafts verified so far (0: `acceptance` is not its own yet)
  };
  static constexpr int64_t kExploreEvery = 16;
  static constexpr int64_t kMaxExploreEvery = 256;
  // A cold sequence's exploration waits until the steps since the last try took this many times
  // its catch-up's cost.
  static constexpr double kColdExploreShare = 50;

  RolloutEngine(const engine::LlamaModel* model, RolloutEngineConfig config);
  // InvalidArgument unless `ids` are in the vocabulary (`what` names them in the message).
  Status CheckIds(std::span<const int32_t> ids, const std::string& what) const;
  // InvalidArgument unless num_prompt + max_tokens - 1 positions fit the model's context.
  Status CheckContext(int64_t num_prompt, int64_t max_tokens) const;
  FinishedSample Finish(RequestId id, FinishReason reason) LAMINAR_REQUIRES(drafter_mu_);
  // Appends `token` to `id` through its stop rules; true when the sample finished (it is then
  // finished in the scheduler and moved to `finished`). A token drawn from non-finite logits (its
  // logprob is not finite) is not appended: the sample finishes with kNonFiniteLogits.
  StatusOr<bool> Append(RequestId id, engine::SampledToken token,
                        std::vector<FinishedSample>* finished) LAMINAR_REQUIRES(drafter_mu_);
  // --- a step's phases (rollout_engine_step.cc) ---
  // This step's drafts: the budgets PlanDrafts gave each decode and the trees proposed for them.
  struct StepDrafts {
    std::unordered_map<RequestId, int64_t> budgets;
    std::unordered_map<RequestId, DraftTree> trees;  // budgeted decodes with a non-empty tree
    double catch_up_s = 0;        // cold sequences' catch-up prefills (a one-time cost)
    bool asked = false;           // the drafter was asked for trees
    double modelled_draft_s = 0;  // the cost model's time for this step's drafting
  };
  // The packed forward of a plan: every scheduled sequence's tokens (its truncated tree after),
  // the spans and block tables, and the sequences whose whole chain is verified now and may be
  // drafted past (SpeculativeConfig::async_draft).
  struct StepBatch {
    std::vector<int32_t> tokens;
    std::vector<engine::SequenceSpan> spans;  // tree_parents point into `parents`
    std::vector<std::span<const int32_t>> tables;
    std::vector<std::vector<int32_t>> parents;  // [plan.seqs] a tree's span parents, else empty
    std::vector<std::pair<RequestId, int64_t>> ahead;  // (sequence, node budget)
  };
  // What a step emitted: tokens appended (finishing ones included), the trees' outcome, and the
  // running samples that grew, by how many tokens (for Scheduler::OnTokens).
  struct DraftOutcome {
    double expected = 0;   // Σ alpha^j over the verified nodes, alpha as planned
    int64_t accepted = 0;  // drafted tokens accepted
  };
  struct StepEmitted {
    int64_t emitted = 0;
    DraftOutcome outcome;
    std::vector<RequestId> sampled;
    std::vector<int64_t> appended;
  };
  // Plans this step's draft budgets and has the drafter propose every tree in one batch.
  StepDrafts ProposeDrafts() LAMINAR_REQUIRES(drafter_mu_);
  // The plan's packed batch; truncates each tree to what the scheduler granted and validates it.
  // Errors: a drafter's invalid tree.
  StatusOr<StepBatch> AssembleBatch(const Plan& plan, StepDrafts& drafts)
      LAMINAR_REQUIRES(drafter_mu_);
  // The policy's forward over `batch` into *logits [rows, V], the drafter drafting ahead beside
  // it (batch.ahead is consumed). Returns the forward's seconds; errors: the model's.
  StatusOr<double> RunForward(StepBatch& batch, std::vector<float>* logits)
      LAMINAR_REQUIRES(drafter_mu_);
  // Draws the next token of every plain (undrafted) sequence and fork of `plan` from its logits
  // row, over the model's pool; *draws gets (sample, logits row) in plan order.
  std::vector<engine::SampledToken> DrawPlainTokens(
      const Plan& plan, std::span<const float> logits,
      std::vector<std::pair<RequestId, const float*>>* draws);
  // Verifies the drafted trees and appends every sample's tokens in plan order, finishing those
  // whose stop rules say so into *finished.
  StatusOr<StepEmitted> EmitTokens(const Plan& plan, StepDrafts& drafts,
                                   std::span<const float> logits,
                                   std::vector<FinishedSample>* finished)
      LAMINAR_REQUIRES(drafter_mu_);
  // What speculation yielded this step (SpeculationGain), from the step's `step_s` seconds.
  void MeasureStep(const Plan& plan, const StepDrafts& drafts, const StepEmitted& emitted,
                   bool decodes_only, double step_s);

  // --- speculation planning (rollout_engine_drafts.cc) ---
  // The decoding sequences of a step and what the draft planner is given for each.
  struct DraftCandidates {
    std::vector<RequestId> ids;             // by id
    std::vector<AcceptanceStats> stats;     // [ids] the history planned with
    const SpeculationGain* gain = nullptr;  // measured at this batch size
    PlanCalibration calibration;
    std::vector<int64_t> catch_up;   // [ids] PlanCatchUps
    std::vector<double> first_cost;  // [ids] a cold catch-up's cost per verification left
    std::vector<int64_t> warm_rows;  // [ids] catch-up rows in the drafter's first forward
  };
  // The draft node budgets of this step's decodes, by sequence (PlanDraftBudgets, plus a short
  // draft now and then for sequences it leaves out: exploration).
  std::unordered_map<RequestId, int64_t> PlanDrafts() LAMINAR_REQUIRES(drafter_mu_);
  DraftCandidates DecodingCandidates() LAMINAR_REQUIRES(drafter_mu_);
  // Fills c.catch_up, c.first_cost and c.warm_rows.
  void PlanCatchUpCosts(DraftCandidates& c) const LAMINAR_REQUIRES(drafter_mu_);
  // Budgets from the measured costs (adaptive), or to measure them first.
  std::vector<int64_t> BudgetDrafts(const DraftCandidates& c);
  // A short draft for the sequence idle longest when none drafted for a while.
  void Explore(const DraftCandidates& c, std::vector<int64_t>& budgets);
  // Verifies the tree of `seq` against its logits rows [1 + n, V], moves the accepted KV into
  // place and appends the emitted tokens. Returns the tokens appended while the sample runs
  // (0 when it finished); adds every token appended to *emitted (the finishing one included),
  // and to *outcome what the planner expected of the tree and what it accepted.
  StatusOr<int64_t> AcceptDrafts(const ScheduledSeq& seq, const DraftTree& tree,
                                 std::span<const float> logits,
                                 std::vector<FinishedSample>* finished, int64_t* emitted,
                                 DraftOutcome* outcome) LAMINAR_REQUIRES(drafter_mu_);
  // A model drafter's cache at most this many tokens behind its sequence is warm (one verified
  // tree: its accepted path and the token after); further behind, its catch-up is a prefill.
  int64_t WarmCatchUp() const { return config_.speculative.max_draft_tokens + 1; }
  // The measured gain of steps with `decodes` decoding sequences: one per power-of-two bucket of
  // the batch, so that what a large batch measured does not switch off the small-batch tail.
  SpeculationGain& GainFor(int64_t decodes);
  // The drafter forgets a sample leaving the engine.
  void EndSample(RequestId id, const Sample& s) LAMINAR_REQUIRES(drafter_mu_);
  template <typename Out>
  static void MoveTokens(Sample& s, Out* out);

  const engine::LlamaModel* model_;
  RolloutEngineConfig config_;
  Scheduler scheduler_;
  engine::PagedKvCache cache_;
  std::unordered_map<RequestId, Sample> samples_;
  int64_t next_request_id_ = 0;
  RequestId next_seq_id_ = 0;
  bool last_step_empty_ = false;     // the last Step's plan scheduled nothing
  int64_t non_finite_finishes_ = 0;  // samples ended by non-finite logits (the first are logged)
  // The drafter is used by the engine's thread and, while a step's forward runs, by the drafting-
  // ahead thread (DraftAheadTask): whoever uses it holds drafter_mu_ (RunForward hands it over).
  Mutex drafter_mu_;
  std::unique_ptr<Drafter> drafter_ LAMINAR_PT_GUARDED_BY(drafter_mu_);  // null: speculation off
  StepCostModel costs_;
  // What steps with drafts measured against plain ones, by bit_width(decodes) (GainFor).
  std::map<int, SpeculationGain> gains_;
  SpecStats spec_stats_;
  int64_t tokens_forwarded_ = 0;
  // Acceptance over every sequence (slow forgetting): where a new sequence's history starts.
  AcceptanceStats acceptance_;
  int64_t unmeasured_steps_ = 0;  // PlanDrafts calls before the step cost was measured
  // Exploration (PlanDrafts): steps in which no sequence drafted before one tries two. Doubles
  // after each try that accepts nothing, up to kMaxExploreEvery, and is back at kExploreEvery
  // after one that accepts something, so a drafter that is never right costs little.
  int64_t explore_every_ = kExploreEvery;
  int64_t steps_since_draft_ = 0;
};

}  // namespace laminar::rollout
