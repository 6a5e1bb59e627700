// Speculative decoding against speculation off on the rollout engine (see spec_bench.h).
#include "bench/spec_bench.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <utility>

namespace laminar::bench {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status CheckLoad(const SpecLoad& load) {
  if (load.prompts.empty() || load.warmup_prompts.empty() || load.n < 1 || load.max_tokens < 1 ||
      load.warmup_max_tokens < 1) {
    return InvalidArgumentError(
        "spec bench: needs prompts, warm-up prompts, n >= 1, max_tokens >= 1, warm-up max_tokens "
        ">= 1");
  }
  if (load.tail_max_tokens > 0 && load.tail_prompt.empty()) {
    return InvalidArgumentError("spec bench: a tail sample needs its prompt");
  }
  return OkStatus();
}

// One case's engine and what it measured.
struct Lane {
  const SpecCase* c = nullptr;
  std::unique_ptr<rollout::RolloutEngine> engine;
  rollout::SpecStats warmup_stats;  // the warm-up's counts, left out
  SpecRun run;
};

rollout::RolloutRequest Request(const SpecLoad& load, const SpecCase& c,
                                const std::vector<int32_t>& prompt, uint64_t seed,
                                int32_t max_tokens, int32_t n) {
  rollout::RolloutRequest req;
  req.prompt_ids = prompt;
  req.sampling.temperature = c.temperature;
  req.sampling.seed = seed;
  req.stop.max_tokens = max_tokens;
  // Sampled responses run to max_tokens (SpecLoad::stop_ids).
  if (c.temperature == 0) req.stop.stop_token_ids = load.stop_ids;
  req.n = n;
  return req;
}

// Creates the case's engine and runs the untimed warm-up pass through it.
StatusOr<Lane> StartLane(const engine::LlamaModel& model, const SpecLoad& load, const SpecCase& c) {
  if (c.batch < 1) return InvalidArgumentError("spec bench: batch must be >= 1");
  size_t longest = load.tail_prompt.size();
  for (const auto& p : load.prompts) longest = std::max(longest, p.size());
  for (const auto& p : load.warmup_prompts) longest = std::max(longest, p.size());
  rollout::RolloutEngineConfig config;
  config.block_size = load.block_size;
  const int64_t positions =  // + 64 for drafts
      static_cast<int64_t>(longest) + std::max(load.max_tokens, load.tail_max_tokens) + 64;
  config.num_blocks =
      static_cast<int32_t>(c.batch * ((positions + load.block_size - 1) / load.block_size) + 4);
  config.scheduler.max_num_seqs = c.batch;
  config.scheduler.max_num_batched_tokens = load.max_num_batched_tokens;
  LAMINAR_ASSIGN_OR_RETURN(const rollout::DrafterVariant variant,
                           rollout::ParseDrafterVariant(c.drafter), "spec bench");
  config.speculative.drafter = variant.drafter;
  config.speculative.async_draft = variant.async_draft;
  if (variant.vocab) config.speculative.draft_vocab = c.draft_vocab;
  config.speculative.max_draft_tokens = c.max_draft_tokens;
  config.speculative.min_confidence = c.min_confidence;
  config.speculative.adaptive = c.adaptive;
  config.speculative.draft_model = c.draft_model;
  Lane lane;
  lane.c = &c;
  LAMINAR_ASSIGN_OR_RETURN(lane.engine, rollout::RolloutEngine::Create(&model, config));
  const double start = Now();
  const size_t groups = static_cast<size_t>((c.batch + load.n - 1) / load.n);
  for (size_t r = 0; r < std::min(groups, load.warmup_prompts.size()); ++r) {
    LAMINAR_RETURN_IF_ERROR(
        lane.engine
            ->Add(Request(load, c, load.warmup_prompts[r], load.seed + load.prompts.size() + r,
                          std::min(load.max_tokens, load.warmup_max_tokens), load.n))
            .status(),
        "spec bench warm-up");
  }
  LAMINAR_RETURN_IF_ERROR(lane.engine->RunToCompletion().status(), "spec bench warm-up");
  lane.run.warmup_s = Now() - start;
  lane.warmup_stats = lane.engine->spec_stats();
  // The timed load, queued (nothing runs until the first step).
  if (load.tail_max_tokens > 0) {
    // Exactly tail_max_tokens tokens (no EOS stop): at temperature > 0 speculation samples other
    // tokens than off does (from the same distribution), and an EOS drawn at another length would
    // make one case's tail hundreds of tokens longer than the other's.
    rollout::RolloutRequest tail =
        Request(load, c, load.tail_prompt, load.seed + 7919, load.tail_max_tokens, 1);
    tail.stop.stop_token_ids.clear();  // at temperature 0 too
    LAMINAR_RETURN_IF_ERROR(lane.engine->Add(std::move(tail)).status(), "spec bench tail sample");
  }
  for (size_t r = 0; r < load.prompts.size(); ++r) {
    LAMINAR_RETURN_IF_ERROR(
        lane.engine->Add(Request(load, c, load.prompts[r], load.seed + r, load.max_tokens, load.n))
            .status(),
        "spec bench prompt " + std::to_string(r));
  }
  return lane;
}

// One timed step of the lane's engine.
Status StepLane(Lane& lane) {
  rollout::RolloutEngine& engine = *lane.engine;
  SpecRun& run = lane.run;
  const bool alone = engine.num_in_flight() == 1;
  int64_t before = 0;
  if (alone) before = static_cast<int64_t>(engine.InFlight()[0].generated_ids.size());
  const double t0 = Now();
  LAMINAR_ASSIGN_OR_RETURN(std::vector<rollout::FinishedSample> done, engine.Step(),
                           "spec bench " + lane.c->drafter);
  const double step_s = Now() - t0;
  run.steps_s += step_s;
  for (const auto& f : done) run.generated_tokens += std::ssize(f.generated_ids);
  if (alone) {
    const int64_t after = done.empty()
                              ? static_cast<int64_t>(engine.InFlight()[0].generated_ids.size())
                              : std::ssize(done[0].generated_ids);
    run.tail_tokens += after - before;
    run.tail_s += step_s;
  }
  return OkStatus();
}

void FinishLane(Lane& lane) {
  SpecRun& run = lane.run;
  const rollout::RolloutEngine& engine = *lane.engine;
  run.tokens_per_s = run.steps_s > 0 ? static_cast<double>(run.generated_tokens) / run.steps_s : 0;
  run.tail_tokens_per_s = run.tail_s > 0 ? static_cast<double>(run.tail_tokens) / run.tail_s : 0;
  run.spec = engine.spec_stats() - lane.warmup_stats;
  if (const rollout::StepCostModel& costs = engine.step_costs(); costs.ready()) {
    run.step_fixed_s = costs.fixed();
    run.step_per_token_s = costs.per_token();
  }
  run.draft_fixed_s = engine.step_costs().draft().fixed();
  run.draft_per_row_s = engine.step_costs().draft().per_unit();
  const auto& s = run.spec;
  if (s.verify_steps > 0) {
    run.mean_accepted_len = static_cast<double>(s.accepted_tokens + s.verify_steps) /
                            static_cast<double>(s.verify_steps);
  }
  if (s.drafted_tokens > 0) {
    run.accept_rate =
        static_cast<double>(s.accepted_tokens) / static_cast<double>(s.drafted_tokens);
  }
  if (s.decode_steps > 0) {
    run.enabled_frac = static_cast<double>(s.verify_steps) / static_cast<double>(s.decode_steps);
  }
}

}  // namespace

StatusOr<std::vector<SpecRun>> RunSpecCases(const engine::LlamaModel& model, const SpecLoad& load,
                                            std::span<const SpecCase> cases) {
  LAMINAR_RETURN_IF_ERROR(CheckLoad(load));
  std::vector<Lane> lanes;
  for (const SpecCase& c : cases) {
    LAMINAR_ASSIGN_OR_RETURN(Lane lane, StartLane(model, load, c));
    lanes.push_back(std::move(lane));
  }
  // Lockstep: each round of steps gives every running engine one step, the first engine of the
  // round rotating, so that a minute of a slower machine slows every case alike.
  const size_t n = lanes.size();
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (size_t k = 0; k < n; ++k) {
      Lane& lane = lanes[(round + k) % n];
      if (lane.engine->idle()) continue;
      any = true;
      LAMINAR_RETURN_IF_ERROR(StepLane(lane));
    }
    if (!any) break;
  }
  std::vector<SpecRun> out;
  for (Lane& lane : lanes) {
    FinishLane(lane);
    out.push_back(lane.run);
  }
  return out;
}

}  // namespace laminar::bench
