// `laminar bench spec`: generated tokens/s of the rollout engine with each speculative
// drafter against speculation off, measured in the same run on the same prompts: GRPO groups at a
// fixed number of running sequences (batch), and the long tail (steps where the last sequence of
// the load runs alone).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/llama_model.h"
#include "rollout/engine/rollout_engine.h"

namespace laminar::bench {

// The prompts and how they are sampled.
struct SpecLoad {
  std::vector<std::vector<int32_t>> prompts;  // one GRPO group each, >= 1
  // Other prompts, for the untimed warm-up pass: ceil(batch / n) of them (at least one) run first
  // on the same engine, warmup_max_tokens each, so that the timed pass finds the engine as a
  // worker finds it after its first batch (the step and drafter costs, acceptance and the suffix
  // index learned; the kernels' shapes and the allocator warm). Different prompts: a drafter must
  // not have seen the timed responses.
  std::vector<std::vector<int32_t>> warmup_prompts;
  int32_t warmup_max_tokens = 32;
  // The long-tail case: when tail_max_tokens > 0, one more sample (of tail_prompt, another prompt
  // again) makes exactly that many tokens (no EOS stop, so that every case does the same work),
  // added first so that it starts with the first batch and runs alone once the groups are done
  // (SpecRun::tail_*).
  std::vector<int32_t> tail_prompt;
  int32_t tail_max_tokens = 0;
  int32_t n = 8;             // samples per prompt
  int32_t max_tokens = 128;  // per sample
  // EOS ids: greedy responses (temperature 0) end where the policy ends them. Sampled ones run to
  // max_tokens (as vLLM's benchmarks' --ignore-eos): speculation draws other tokens than off does
  // (from the same distribution), so EOS would end its samples at other lengths, and a run whose
  // samples end sooner spends more of its steps at a batch below `batch` (suffix at batch 4
  // measured 0.95x of off with 6% fewer tokens, drafting in 8% of its steps).
  std::vector<int32_t> stop_ids;
  uint64_t seed = 0;  // request r samples with seed + r
  int32_t block_size = 16;
  int64_t max_num_batched_tokens = 2048;
};

// One configuration: the drafter ("off" or a SpeculativeConfig drafter), the running sequences at
// most (the batch) and the temperature.
struct SpecCase {
  // A drafter's name; "+async" appended: async_draft; then "+vocab": a draft vocabulary of
  // draft_vocab tokens (SpeculativeConfig::draft_vocab).
  std::string drafter = "off";
  int64_t batch = 1;
  float temperature = 1.0f;
  int64_t max_draft_tokens = 8;
  bool adaptive = true;
  int64_t draft_vocab = 16384;  // for the "+vocab" drafters
  double min_confidence = rollout::SpeculativeConfig{}.min_confidence;
  const engine::LlamaModel* draft_model = nullptr;  // drafter draft_model (borrowed)
};

struct SpecRun {
  int64_t generated_tokens = 0;
  double warmup_s = 0;  // the warm-up pass (untimed in tokens_per_s)
  double steps_s = 0;   // the timed pass: the sum of its engine's steps
  double tokens_per_s = 0;
  rollout::SpecStats spec;       // the engine's counters over the run
  double mean_accepted_len = 0;  // (accepted + verifications) / verifications; 0 without any
  double accept_rate = 0;        // accepted / drafted
  double enabled_frac = 0;       // verifications / decode steps
  // The long tail: steps that ran with a single sequence left in flight (at batch > 1, only with
  // SpecLoad::tail_max_tokens, or where one sample happens to outlast the others).
  int64_t tail_tokens = 0;
  double tail_s = 0;
  double tail_tokens_per_s = 0;
  // The engine's measured costs at the end (StepCostModel): a step's seconds = fixed + per_token ·
  // tokens, a drafter forward's = draft_fixed + draft_per_row · rows; 0 when speculation never
  // measured them.
  double step_fixed_s = 0, step_per_token_s = 0, draft_fixed_s = 0, draft_per_row_s = 0;
};

// Runs every prompt of `load` as one request of load.n samples on one fresh engine per case over
// `model` (speculation per the case, max_num_seqs = its batch, KV blocks for that many whole
// sequences), after an untimed warm-up pass through each engine (SpecLoad::warmup_prompts), and
// times them in lockstep: each round of steps steps every engine still running once, so that the
// cases share whatever the machine does from one second to the next. A run's steps_s is the sum
// of its engine's steps. Returns [cases.size()] runs. Errors: the engines' (Create, Add, Step);
// InvalidArgument for an empty load, a missing warm-up or tail prompt, or batch < 1.
StatusOr<std::vector<SpecRun>> RunSpecCases(const engine::LlamaModel& model, const SpecLoad& load,
                                            std::span<const SpecCase> cases);

}  // namespace laminar::bench
