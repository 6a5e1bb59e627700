// `laminar bench spec`: each drafter against speculation off, per batch and temperature, on
// chat-rendered prompts of a JSONL dataset (GRPO groups of --n), in interleaved rounds
// (bench/spec_bench.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/spec_bench.h"
#include "cli/bench/bench_command.h"
#include "engine/llama_model.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "rollout/manager/prompt_dataset.h"
#include "rollout/speculation/speculation.h"

namespace laminar::cli {
namespace {

struct SpecArgs {
  std::string model = "smollm2-135m-instruct";
  std::string weights = "f32";
  std::string data;  // JSONL prompts (GSM8K: field "question")
  std::string prompt_key = "question";
  std::vector<int64_t> batches = {1, 4, 16};
  int32_t prompts = 2;
  int32_t n = 8;
  int32_t max_tokens = 128;
  uint64_t seed = 0;
  int32_t block_size = 16;
  std::vector<std::string> drafters = {"suffix"};
  std::vector<float> temperatures = {0.0f, 1.0f};
  int64_t max_draft_tokens = 8;
  int64_t rounds = 1;          // interleaved rounds of off and every drafter
  int32_t warmup_tokens = 32;  // max_tokens of the warm-up pass
  int32_t tail_tokens = 0;     // max_tokens of the long-tail sample (0: none)
  bool fixed_drafts = false;
  bool control = false;         // a second off lane: the measurement's own noise
  int64_t draft_vocab = 16384;  // the +vocab drafters' draft vocabulary
  double min_confidence = rollout::SpeculativeConfig{}.min_confidence;  // model drafters'
  std::string draft_model;    // the draft_model drafter's checkpoint
  std::string draft_weights;  // its weight format (default: the policy's)
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  if (v.empty()) return 0.0;
  const size_t h = v.size() / 2;
  return v.size() % 2 == 1 ? v[h] : (v[h - 1] + v[h]) / 2;
}

// The timed prompts, the warm-up pass's (enough GRPO groups to fill the largest batch) and the
// tail sample's, from the dataset rendered with the model's chat template. Errors name the file.
StatusOr<bench::SpecLoad> LoadSpecLoad(const SpecArgs& a, const std::string& path,
                                       const model::Checkpoint& ckpt) {
  LAMINAR_ASSIGN_OR_RETURN(auto tok, model::LoadTokenizerForModel(path, ""));
  manager::PromptDatasetOptions d;
  d.prompt_key = a.prompt_key;
  d.ground_truth_key = "";
  d.default_data_source = "bench";
  LAMINAR_ASSIGN_OR_RETURN(d.chat, model::ResolveChatFormat("auto", ckpt.chat_template));
  LAMINAR_ASSIGN_OR_RETURN(auto set, manager::LoadPromptDataset(a.data, *tok, d));
  const int64_t warmup_prompts = (std::ranges::max(a.batches) + a.n - 1) / a.n;
  const int64_t tail_prompts = a.tail_tokens > 0 ? 1 : 0;
  if (std::ssize(set.rows) < a.prompts + warmup_prompts + tail_prompts) {
    return InvalidArgumentError(
        a.data + " has " + std::to_string(set.rows.size()) + " prompts, fewer than --prompts " +
        std::to_string(a.prompts) + " and the " + std::to_string(warmup_prompts) +
        " of the warm-up pass" + (tail_prompts > 0 ? " and the tail sample's" : ""));
  }
  bench::SpecLoad load;
  for (int32_t i = 0; i < a.prompts; ++i) load.prompts.push_back(set.rows[i].prompt_ids);
  for (int64_t i = 0; i < warmup_prompts; ++i) {
    load.warmup_prompts.push_back(set.rows[a.prompts + i].prompt_ids);
  }
  load.warmup_max_tokens = a.warmup_tokens;
  if (a.tail_tokens > 0) {
    load.tail_prompt = set.rows[a.prompts + warmup_prompts].prompt_ids;
    load.tail_max_tokens = a.tail_tokens;
  }
  load.n = a.n;
  load.max_tokens = a.max_tokens;
  for (int64_t id : ckpt.config.eos_token_ids) load.stop_ids.push_back(static_cast<int32_t>(id));
  if (tok->eos_id() >= 0) load.stop_ids.push_back(tok->eos_id());
  load.seed = a.seed;
  load.block_size = a.block_size;
  return load;
}

// Whether a --drafters entry (checked by the option's validator) is the draft_model drafter.
bool IsDraftModel(const std::string& name) {
  auto v = rollout::ParseDrafterVariant(name);
  return v.ok() && v->drafter == rollout::DrafterKind::kDraftModel;
}

// Whether a --drafters entry (checked by the option's validator) drafts with a draft vocabulary.
bool UsesDraftVocab(const std::string& name) {
  auto v = rollout::ParseDrafterVariant(name);
  return v.ok() && v->vocab;
}

// The draft_model drafter's model when a drafter needs one (null otherwise): --draft-model's
// checkpoint, or the policy's own (`policy`) in --draft-weights.
StatusOr<std::unique_ptr<engine::LlamaModel>> LoadDraft(const SpecArgs& a,
                                                        const model::Checkpoint& policy) {
  if (std::ranges::none_of(a.drafters, IsDraftModel)) {
    return std::unique_ptr<engine::LlamaModel>();
  }
  std::optional<model::Checkpoint> draft_ckpt;
  if (a.draft_model != rollout::kPolicyDraftModel) {
    LAMINAR_ASSIGN_OR_RETURN(std::string dpath, model::ResolveModelPath(a.draft_model));
    LAMINAR_ASSIGN_OR_RETURN(draft_ckpt, model::LoadCheckpoint(dpath));
  }
  const model::Checkpoint& dck = draft_ckpt ? *draft_ckpt : policy;
  LAMINAR_ASSIGN_OR_RETURN(
      engine::WeightFormat format,
      engine::ParseWeightFormat(a.draft_weights.empty() ? a.weights : a.draft_weights));
  return engine::LlamaModel::Create(dck.config, dck.weights, engine::Backend::kCpu, format);
}

// One drafter's row of a (temperature, batch) cell from its runs, one per round, against off's:
// the speed-up is the median over rounds of the ratio to off in the same round, the other fields
// from the round whose tokens/s is nearest the median. Prints its human line.
nlohmann::json SpecRow(const SpecArgs& a, const std::string& drafter, float t, int64_t b,
                       const std::vector<bench::SpecRun>& mine,
                       const std::vector<bench::SpecRun>& off) {
  std::vector<double> ratios, tail_ratios, tps;
  for (size_t round = 0; round < mine.size(); ++round) {
    const bench::SpecRun& o = off[round];
    const bench::SpecRun& m = mine[round];
    ratios.push_back(o.tokens_per_s > 0 ? m.tokens_per_s / o.tokens_per_s : 0);
    tail_ratios.push_back(o.tail_tokens_per_s > 0 ? m.tail_tokens_per_s / o.tail_tokens_per_s : 0);
    tps.push_back(m.tokens_per_s);
  }
  const double median_tps = Median(tps);
  size_t mid = 0;
  for (size_t k = 1; k < tps.size(); ++k) {
    if (std::abs(tps[k] - median_tps) < std::abs(tps[mid] - median_tps)) mid = k;
  }
  const bench::SpecRun& r = mine[mid];
  const double speedup = Median(ratios), tail_speedup = Median(tail_ratios);
  std::string each;
  for (double x : ratios) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%s%.2f", each.empty() ? "" : " ", x);
    each += buf;
  }
  // No ratio where off ran no step alone (its samples all ended together).
  char tail_ratio[16] = "x -";
  if (tail_speedup > 0) std::snprintf(tail_ratio, sizeof(tail_ratio), "x%.2f", tail_speedup);
  std::fprintf(stderr,
               "T=%.1f batch %3lld %-17s %7.1f tok/s (x%.2f [%s])  accepted len %.2f  "
               "enabled %.2f  tail %7.1f tok/s (%s)  step %.1f + %.2f/token ms, "
               "draft %.2f + %.2f/row ms\n",
               t, static_cast<long long>(b), drafter.c_str(), r.tokens_per_s, speedup, each.c_str(),
               r.mean_accepted_len, r.enabled_frac, r.tail_tokens_per_s, tail_ratio,
               1e3 * r.step_fixed_s, 1e3 * r.step_per_token_s, 1e3 * r.draft_fixed_s,
               1e3 * r.draft_per_row_s);
  return {{"drafter", drafter},
          {"batch", b},
          {"temperature", t},
          {"rounds", a.rounds},
          {"generated_tokens", r.generated_tokens},
          {"warmup_s", r.warmup_s},
          {"steps_s", r.steps_s},
          {"tokens_per_s", r.tokens_per_s},
          {"tokens_per_s_each_round", tps},
          {"speedup_vs_off", speedup},
          {"speedups_vs_off_each_round", ratios},
          {"mean_accepted_len", r.mean_accepted_len},
          {"accept_rate", r.accept_rate},
          {"enabled_frac", r.enabled_frac},
          {"decode_steps", r.spec.decode_steps},
          {"budgeted", r.spec.budgeted},
          {"empty_drafts", r.spec.empty_drafts},
          {"rerooted", r.spec.rerooted},
          {"tail_tokens", r.tail_tokens},
          {"tail_tokens_per_s", r.tail_tokens_per_s},
          {"tail_speedup_vs_off", tail_speedup},
          {"step_fixed_ms", 1e3 * r.step_fixed_s},
          {"step_per_token_ms", 1e3 * r.step_per_token_s},
          {"draft_forward_fixed_ms", 1e3 * r.draft_fixed_s},
          {"draft_forward_per_row_ms", 1e3 * r.draft_per_row_s}};
}

// One (temperature, batch) cell: `rounds` rounds, each running off and every drafter in lockstep
// (bench::RunSpecCases); appends a row per lane to *rows.
Status RunSpecCell(const SpecArgs& a, const engine::LlamaModel& lm, const engine::LlamaModel* draft,
                   const bench::SpecLoad& load, float t, int64_t b, nlohmann::json* rows) {
  std::vector<std::string> drafters = {"off"};
  for (const std::string& name : a.drafters) {  // each once (a repeat would double its rounds)
    if (std::ranges::find(drafters, name) == drafters.end()) drafters.push_back(name);
  }
  if (a.control) drafters.push_back("off-control");
  std::map<std::string, std::vector<bench::SpecRun>> runs;
  for (int64_t round = 0; round < a.rounds; ++round) {
    // Odd rounds create the lanes in the reverse order, so that the first-created lane (whose
    // memory placement may differ) is off in one round and the control lane in the next.
    std::vector<std::string> order = drafters;
    if (round % 2 == 1) std::ranges::reverse(order);
    std::vector<bench::SpecCase> cases;
    cases.reserve(order.size());
    for (const std::string& drafter : order) {
      cases.push_back({.drafter = drafter == "off-control" ? "off" : drafter,
                       .batch = b,
                       .temperature = t,
                       .max_draft_tokens = a.max_draft_tokens,
                       .adaptive = !a.fixed_drafts,
                       .draft_vocab = a.draft_vocab,
                       .min_confidence = a.min_confidence,
                       .draft_model = draft});
    }
    LAMINAR_ASSIGN_OR_RETURN(std::vector<bench::SpecRun> r, bench::RunSpecCases(lm, load, cases));
    for (size_t i = 0; i < order.size(); ++i) runs[order[i]].push_back(r[i]);
  }
  for (const std::string& drafter : drafters) {
    rows->push_back(SpecRow(a, drafter, t, b, runs.at(drafter), runs.at("off")));
  }
  return OkStatus();
}

int RunSpec(const SpecArgs& a) {
  if (a.data.empty()) {
    return CommandFail("bench",
                       "bench spec needs --data PROMPTS.jsonl (e.g. GSM8K's test.jsonl, "
                       "field 'question')",
                       2);
  }
  if (std::ranges::any_of(a.drafters, IsDraftModel) && a.draft_model.empty()) {
    return CommandFail("bench", "drafter draft_model needs --draft-model", 2);
  }
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return BenchFail(path.status());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return BenchFail(ckpt.status());
  auto load = LoadSpecLoad(a, *path, *ckpt);
  if (!load.ok()) return CommandFail("bench", load.status().message(), 2);
  auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu,
                                       *engine::ParseWeightFormat(a.weights));
  if (!lm.ok()) return BenchFail(lm.status());
  auto draft = LoadDraft(a, *ckpt);
  if (!draft.ok()) return BenchFail(draft.status());
  nlohmann::json rows = nlohmann::json::array();
  for (const float t : a.temperatures) {
    for (const int64_t b : a.batches) {
      if (Status s = RunSpecCell(a, **lm, draft->get(), *load, t, b, &rows); !s.ok()) {
        return BenchFail(s);
      }
    }
  }
  nlohmann::json out = {{"model", *path},
                        {"weights_dtype", a.weights},
                        {"data", a.data},
                        {"prompts", a.prompts},
                        {"n", load->n},
                        {"max_tokens", load->max_tokens},
                        {"eos_stops", "at temperature 0 only"},
                        {"warmup_max_tokens", load->warmup_max_tokens},
                        {"tail_max_tokens", load->tail_max_tokens},
                        {"max_draft_tokens", a.max_draft_tokens},
                        {"adaptive", !a.fixed_drafts},
                        {"min_confidence", a.min_confidence},
                        {"cores", std::thread::hardware_concurrency()},
                        {"rows", rows}};
  // The draft vocabulary only where a drafter used one.
  if (std::ranges::any_of(a.drafters, UsesDraftVocab)) {
    out["draft_vocab"] = a.draft_vocab;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::function<int()> SetupSpec(CLI::App* app) {
  auto a = std::make_shared<SpecArgs>();
  AddModelOption(app, &a->model);
  app->add_option("--weights", a->weights, std::string(engine::kWeightFormatHelp))
      ->check(CLI::IsMember(engine::WeightFormatNames()));
  app->add_option("--data", a->data, "JSONL prompts (e.g. GSM8K's test.jsonl)")
      ->check(CLI::ExistingFile);
  app->add_option("--prompt-key", a->prompt_key, "the prompt field of --data");
  app->add_option("--batch", a->batches, "running sequences")->check(CLI::Range(1, 4096));
  app->add_option("--prompts", a->prompts, "prompts (GRPO groups)")->check(CLI::Range(1, 1 << 20));
  app->add_option("--n", a->n, "samples per prompt")->check(CLI::Range(1, 1 << 16));
  app->add_option("--max-tokens", a->max_tokens, "tokens generated by every sample at most")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--seed", a->seed, "sampling seed")->check(kNonNegative);
  app->add_option("--block-size", a->block_size, "tokens per KV block")
      ->check(CLI::Range(1, 1 << 16));
  app->add_option(
         "--drafters", a->drafters,
         "drafters measured against off (+async: drafting ahead on its own thread; +vocab: "
         "a draft vocabulary of --draft-vocab tokens)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string& name) {
            auto v = rollout::ParseDrafterVariant(name);
            if (!v.ok()) return v.status().message();
            return v->drafter == rollout::DrafterKind::kOff ? std::string("off is the baseline")
                                                            : std::string();
          },
          "DRAFTER[+async][+vocab]"));
  app->add_option("--draft-model", a->draft_model,
                  "the draft_model drafter's checkpoint (same vocabulary as --model), or policy: "
                  "the policy's own (in --draft-weights)");
  app->add_option("--draft-weights", a->draft_weights,
                  "the draft model's weight format (default: --weights); the policy's own "
                  "checkpoint at a cheaper format is a draft model with the same vocabulary")
      ->check(CLI::IsMember(engine::WeightFormatNames()));
  app->add_option("--temperatures", a->temperatures, "sampling temperatures")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--max-draft-tokens", a->max_draft_tokens, "drafted tokens per tree")
      ->check(CLI::Range(1, 63));
  app->add_option("--rounds", a->rounds,
                  "rounds of off and every drafter, interleaved; speed-ups are the median of "
                  "each round's ratio")
      ->check(CLI::Range(1, 100));
  app->add_option("--warmup-tokens", a->warmup_tokens,
                  "max_tokens of the untimed warm-up pass that runs other prompts on the same "
                  "engine first (it learns its costs there, as a worker does on its first batch)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--tail-tokens", a->tail_tokens,
                  "the long-tail case: one more sample with this max_tokens starts with the first "
                  "batch and runs alone once the groups are done (0: none)")
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--draft-vocab", a->draft_vocab,
                  "the +vocab drafters' head computes this many lowest token ids plus the tokens "
                  "seen (rollout.speculative.draft_vocab; the others compute all)")
      ->check(CLI::PositiveNumber);
  app->add_option("--min-confidence", a->min_confidence,
                  "model drafters stop a chain once the product of its tokens' draft "
                  "probabilities falls below this (rollout.speculative.min_confidence)")
      ->check(CLI::Range(0.0, 0.999999));
  app->add_flag("--fixed-drafts", a->fixed_drafts,
                "always draft --max-draft-tokens (no adaptive budgets)");
  app->add_flag("--control", a->control,
                "a second speculation-off lane (off-control) in every round: its ratio to off is "
                "what the measurement itself varies by");
  return [a] { return RunSpec(*a); };
}

}  // namespace

LAMINAR_REGISTER_BENCH("spec", "speculative decoding: each drafter vs off, in interleaved rounds",
                       SetupSpec);

}  // namespace laminar::cli
