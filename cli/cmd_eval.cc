// `laminar eval`: samples n responses to every prompt of a held-out JSONL set with fixed seeds,
// scores them with a reward and reports pass@1 and pass@k (the unbiased estimator of Chen et al.
// 2021, §2.1), so a model can be compared before and after training (docs/eval.md).
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/check.h"
#include "engine/llama_model.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "recipe/recipe.h"
#include "reward/pass_at_k.h"
#include "reward/reward.h"
#include "reward/reward_recipe.h"
#include "rollout/engine/rollout_engine.h"
#include "rollout/manager/data_order.h"
#include "rollout/manager/manager_recipe.h"
#include "rollout/manager/prompt_dataset.h"

namespace laminar::cli {
namespace {

struct EvalArgs {
  std::string model, tokenizer, weights = "f32";
  std::string data;
  std::string prompt_key = "prompt", ground_truth_key = "ground_truth";
  std::string data_source_key = "data_source", default_data_source;
  std::string chat_format, system_message;
  std::string reward;  // YAML (ParseRewardSpecs); empty: the recipe's, else "auto"
  int32_t n = 1;
  std::string k;  // "1,4,8"; empty: 1 and n
  float temperature = 0.0f, top_p = 1.0f, min_p = 0.0f;
  int32_t top_k = 0;
  int64_t max_tokens = 256;
  std::vector<std::string> stop;
  uint64_t seed = 0;
  int64_t limit = 0;
  int64_t batch = 256;
  int64_t kv_cache_mb = 256;
  double threshold = 1.0;
  std::string recipe;
  std::vector<std::string> overrides;
  std::string output;
  bool json = false;
};

// What an evaluation runs with, after the recipe (if any) and the flags that override it.
struct EvalSettings {
  std::string model, tokenizer, weights, data, chat_format;
  manager::PromptDatasetOptions data_options;
  std::string reward_name;  // for the report
  reward::RewardFn reward;
  double failure_score = 0;
  int32_t n = 1;
  std::vector<int64_t> ks;
  engine::SamplingParams sampling;  // seed: --seed
  int64_t max_tokens = 256;
  std::vector<std::string> stop;
  bool stop_at_eos = true;
  int64_t limit = 0, batch = 256, kv_cache_mb = 256;
  double threshold = 1.0;
};

// One scored sample.
struct EvalSample {
  std::vector<int32_t> ids;
  std::string text;
  std::string finish_reason;
  double score = 0;
};

int Fail(const std::string& message, int code = 1) { return CommandFail("eval", message, code); }

// "1,4,8" -> {1, 4, 8}; each in [1, n]. Empty: {1, n}.
StatusOr<std::vector<int64_t>> ParseKs(const std::string& text, int32_t n) {
  std::set<int64_t> ks;
  if (text.empty()) {
    ks = {1, n};
  } else {
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
      size_t used = 0;
      int64_t k = 0;
      try {
        k = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != item.size() || k < 1) {
        return InvalidArgumentError("--k: '" + item + "' is not a positive integer");
      }
      if (k > n) {
        return InvalidArgumentError("--k: pass@" + std::to_string(k) + " needs at least " +
                                    std::to_string(k) + " samples per prompt; raise --n (now " +
                                    std::to_string(n) + ")");
      }
      ks.insert(k);
    }
    if (ks.empty()) return InvalidArgumentError("--k: no value");
  }
  return std::vector<int64_t>(ks.begin(), ks.end());
}

// Settings from the recipe's model.*, data.*, reward.* and rollout.* keys.
Status ApplyRecipe(const Config& r, EvalSettings* s) {
  s->model = r.GetString("model.path");
  s->tokenizer = r.GetString("model.tokenizer");
  s->weights = r.GetString("rollout.weight_dtype");
  s->data = r.GetString("data.path");
  // The chat format ("auto" needs the checkpoint) is resolved in LoadEvalSet.
  LAMINAR_ASSIGN_OR_RETURN(s->data_options, manager::PromptDatasetOptionsOf(r, std::nullopt));
  s->data_options.max_prompt_tokens = 0;  // every held-out problem counts
  s->chat_format = r.GetString("data.chat_format");
  LAMINAR_ASSIGN_OR_RETURN(s->reward, reward::RewardOf(r), "--recipe " + r.source());
  s->reward_name = "recipe " + r.source();
  s->failure_score = r.GetFloat("reward.failure_score");
  s->sampling.temperature = static_cast<float>(r.GetFloat("rollout.temperature"));
  s->sampling.top_p = static_cast<float>(r.GetFloat("rollout.top_p"));
  s->sampling.top_k = static_cast<int32_t>(r.GetInt("rollout.top_k"));
  s->sampling.min_p = static_cast<float>(r.GetFloat("rollout.min_p"));
  s->max_tokens = r.GetInt("rollout.max_tokens");
  s->stop = r.GetStringList("rollout.stop");
  s->stop_at_eos = r.GetBool("rollout.stop_at_eos");
  s->kv_cache_mb = r.GetInt("rollout.kv_cache_mb");
  return OkStatus();
}

// The effective settings: defaults, then the recipe, then every flag given on the command line.
StatusOr<EvalSettings> ResolveSettings(const EvalArgs& a, const CLI::App& app) {
  auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  EvalSettings s;
  s.sampling.temperature = a.n == 1 ? 0.0f : 1.0f;
  if (!a.recipe.empty()) {
    LAMINAR_ASSIGN_OR_RETURN(Config recipe, recipe::LoadRecipe(a.recipe, a.overrides));
    LAMINAR_RETURN_IF_ERROR(ApplyRecipe(recipe, &s));
  } else if (!a.overrides.empty()) {
    return InvalidArgumentError("override '" + a.overrides[0] + "' needs --recipe");
  }
  if (given("--model")) s.model = a.model;
  if (given("--tokenizer")) s.tokenizer = a.tokenizer;
  if (given("--weights") || a.recipe.empty()) s.weights = a.weights;
  if (given("--data")) s.data = a.data;
  if (s.model.empty()) return InvalidArgumentError("--model: required (or give --recipe)");
  if (s.data.empty()) return InvalidArgumentError("--data: required (or give --recipe)");
  manager::PromptDatasetOptions& d = s.data_options;
  if (given("--prompt-key") || a.recipe.empty()) d.prompt_key = a.prompt_key;
  if (given("--ground-truth-key") || a.recipe.empty()) d.ground_truth_key = a.ground_truth_key;
  if (given("--data-source-key") || a.recipe.empty()) d.data_source_key = a.data_source_key;
  if (given("--default-data-source")) d.default_data_source = a.default_data_source;
  if (given("--chat-format")) s.chat_format = a.chat_format;
  if (given("--system-message")) d.system_message = a.system_message;
  if (given("--reward")) {
    LAMINAR_ASSIGN_OR_RETURN(s.reward, reward::RewardFromYamlText(a.reward, "--reward"));
    s.reward_name = a.reward;
  } else if (!s.reward) {
    LAMINAR_ASSIGN_OR_RETURN(s.reward, reward::BuiltinReward("auto"));
    s.reward_name = "auto";
  }
  if (given("--temperature")) s.sampling.temperature = a.temperature;
  if (given("--top-p")) s.sampling.top_p = a.top_p;
  if (given("--top-k")) s.sampling.top_k = a.top_k;
  if (given("--min-p")) s.sampling.min_p = a.min_p;
  if (given("--max-tokens") || a.recipe.empty()) s.max_tokens = a.max_tokens;
  if (given("--stop")) s.stop = a.stop;
  if (given("--kv-cache-mb") || a.recipe.empty()) s.kv_cache_mb = a.kv_cache_mb;
  s.sampling.seed = a.seed;
  s.n = a.n;
  LAMINAR_ASSIGN_OR_RETURN(s.ks, ParseKs(a.k, a.n));
  s.limit = a.limit;
  s.batch = a.batch;
  s.threshold = a.threshold;
  return s;
}

// The eval set: LoadPromptDataset with the settings' field names and chat format ("auto": the
// checkpoint's template), cut to the first `limit` rows.
StatusOr<manager::PromptDataset> LoadEvalSet(EvalSettings& s, const model::Checkpoint& ckpt,
                                             const model::Tokenizer& tok) {
  LAMINAR_ASSIGN_OR_RETURN(s.data_options.chat,
                           model::ResolveChatFormat(s.chat_format, ckpt.chat_template),
                           "--chat-format (" + ckpt.path + ")");
  LAMINAR_ASSIGN_OR_RETURN(manager::PromptDataset set,
                           manager::LoadPromptDataset(s.data, tok, s.data_options),
                           "--data " + s.data);
  if (s.limit > 0 && static_cast<int64_t>(set.rows.size()) > s.limit) set.rows.resize(s.limit);
  return set;
}

// Generates n samples of every row through one RolloutEngine (continuous batching of up to
// s.batch sequences). Row r's request has seed manager::GroupSeed(seed, r, 0) and its sample i
// rollout::SampleSeed(that, i), so every sample depends only on (seed, r, i) and the model, not on
// the batch. Returns samples[r][i]; `tokens` gets the number of generated tokens.
StatusOr<std::vector<std::vector<EvalSample>>> Generate(const EvalSettings& s,
                                                        const engine::LlamaModel& lm,
                                                        const model::Tokenizer& tok,
                                                        const manager::PromptDataset& set) {
  const model::ModelConfig& cfg = lm.config();
  const int64_t ctx = cfg.max_position_embeddings;
  rollout::RolloutEngineConfig config;
  LAMINAR_ASSIGN_OR_RETURN(
      config.num_blocks,
      rollout::KvBlocksFor(s.kv_cache_mb, rollout::KvBytesPerToken(cfg), config.block_size),
      "KV cache (--kv-cache-mb or rollout.kv_cache_mb)");
  config.scheduler.max_num_seqs = s.batch;
  config.token_bytes = [&tok](int32_t id) { return tok.TokenBytes(id, true); };
  config.strips_leading_space = tok.strips_leading_space();
  LAMINAR_ASSIGN_OR_RETURN(auto engine, rollout::RolloutEngine::Create(&lm, config));
  std::vector<int32_t> stop_ids;
  if (s.stop_at_eos) {
    for (int64_t id : cfg.eos_token_ids) stop_ids.push_back(static_cast<int32_t>(id));
    if (tok.eos_id() >= 0) stop_ids.push_back(tok.eos_id());
  }
  for (size_t r = 0; r < set.rows.size(); ++r) {
    const manager::PromptRow& row = set.rows[r];
    const int64_t len = static_cast<int64_t>(row.prompt_ids.size());
    if (len >= ctx) {
      return InvalidArgumentError(row.source + ": a prompt of " + std::to_string(len) +
                                  " tokens does not fit the model's context of " +
                                  std::to_string(ctx));
    }
    rollout::RolloutRequest req;
    req.prompt_ids = row.prompt_ids;
    req.sampling = s.sampling;
    req.sampling.seed = manager::GroupSeed(s.sampling.seed, static_cast<int64_t>(r), 0);
    req.stop.stop_token_ids = stop_ids;
    req.stop.stop_strings = s.stop;
    const int64_t budget = row.max_tokens > 0 ? row.max_tokens : s.max_tokens;
    req.stop.max_tokens = static_cast<int32_t>(std::min(budget, ctx - len));
    req.n = s.n;
    LAMINAR_ASSIGN_OR_RETURN(int64_t id, engine->Add(std::move(req)), row.source);
    LAMINAR_CHECK_EQ(id, static_cast<int64_t>(r));
  }
  std::vector<std::vector<EvalSample>> samples(set.rows.size(), std::vector<EvalSample>(s.n));
  const bool progress = isatty(STDERR_FILENO) == 1;
  const int64_t total = static_cast<int64_t>(set.rows.size()) * s.n;
  int64_t done = 0;
  while (!engine->idle()) {
    LAMINAR_ASSIGN_OR_RETURN(std::vector<rollout::FinishedSample> finished, engine->Step());
    for (rollout::FinishedSample& f : finished) {
      EvalSample& e = samples[f.request_id][f.sample_index];
      LAMINAR_ASSIGN_OR_RETURN(e.text, tok.Decode(f.generated_ids, /*skip_special=*/true));
      e.ids = std::move(f.generated_ids);
      e.finish_reason = std::string(rollout::FinishReasonName(f.finish_reason));
      ++done;
    }
    if (progress && !finished.empty()) {
      std::fprintf(stderr, "\r%lld/%lld samples", static_cast<long long>(done),
                   static_cast<long long>(total));
    }
  }
  if (progress) std::fprintf(stderr, "\n");
  return samples;
}

// Scores every sample as the rollout workers do (a reward error or a non-finite score gets
// s.failure_score); returns how many failed and sets `first_error` to the first one's message.
int64_t Score(const EvalSettings& s, const manager::PromptDataset& set,
              std::vector<std::vector<EvalSample>>* samples, std::string* first_error) {
  int64_t errors = 0;
  for (size_t r = 0; r < set.rows.size(); ++r) {
    const manager::PromptRow& row = set.rows[r];
    for (EvalSample& e : (*samples)[r]) {
      auto result = s.reward({.data_source = row.data_source,
                              .solution_str = e.text,
                              .ground_truth = row.ground_truth,
                              .extra_info_json = row.extra_info_json});
      if (result.ok() && std::isfinite(result->score)) {
        e.score = result->score;
        continue;
      }
      e.score = s.failure_score;
      if (errors++ == 0) {
        *first_error =
            row.source + ": " +
            (result.ok() ? "score is not finite" : std::string(result.status().message()));
      }
    }
  }
  return errors;
}

// pass@k (k in s.ks), mean score and mean response length over the rows `rows` of `samples`.
std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

nlohmann::ordered_json Summarize(const EvalSettings& s,
                                 const std::vector<std::vector<EvalSample>>& samples,
                                 const std::vector<size_t>& rows) {
  std::vector<int64_t> num(rows.size(), s.n), correct(rows.size(), 0);
  double score = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (const EvalSample& e : samples[rows[i]]) {
      correct[i] += e.score >= s.threshold ? 1 : 0;
      score += e.score;
      tokens += static_cast<int64_t>(e.ids.size());
    }
  }
  const double num_samples = static_cast<double>(rows.size()) * s.n;
  nlohmann::ordered_json out;
  out["num_problems"] = rows.size();
  out["num_samples"] = static_cast<int64_t>(num_samples);
  for (int64_t k : s.ks) {
    auto p = reward::MeanPassAtK(num, correct, k);
    LAMINAR_CHECK(p.ok()) << p.status();  // every k <= n (ParseKs) and rows is non-empty
    out["pass@" + std::to_string(k)] = *p;
  }
  out["mean_score"] = score / num_samples;
  out["mean_response_tokens"] = static_cast<double>(tokens) / num_samples;
  out["generated_tokens"] = tokens;
  return out;
}

// The summary object: settings, the overall metrics, and the metrics of each data source.
nlohmann::ordered_json Report(const EvalSettings& s, const manager::PromptDataset& set,
                              const std::vector<std::vector<EvalSample>>& samples) {
  // A float setting as the decimal it was written as (0.6, not 0.6000000238): 6 significant
  // digits survive a decimal -> float -> decimal round trip.
  auto decimal = [](float x) { return std::strtod(Format("%g", x).c_str(), nullptr); };
  nlohmann::ordered_json out = {{"model", s.model},
                                {"data", s.data},
                                {"reward", s.reward_name},
                                {"n", s.n},
                                {"k", s.ks},
                                {"seed", s.sampling.seed},
                                {"temperature", decimal(s.sampling.temperature)},
                                {"top_p", decimal(s.sampling.top_p)},
                                {"top_k", s.sampling.top_k},
                                {"min_p", decimal(s.sampling.min_p)},
                                {"max_tokens", s.max_tokens},
                                {"stop", s.stop},
                                {"chat_format", s.chat_format},
                                {"correct_threshold", s.threshold}};
  std::map<std::string, std::vector<size_t>> by_source;
  std::vector<size_t> all(set.rows.size());
  for (size_t r = 0; r < set.rows.size(); ++r) {
    all[r] = r;
    by_source[set.rows[r].data_source].push_back(r);
  }
  out.update(Summarize(s, samples, all));
  nlohmann::ordered_json sources = nlohmann::ordered_json::object();
  for (const auto& [source, rows] : by_source) sources[source] = Summarize(s, samples, rows);
  out["by_data_source"] = std::move(sources);
  return out;
}

// One JSON line per sample, by row then sample index.
Status WriteSamples(const std::string& path, const manager::PromptDataset& set,
                    const std::vector<std::vector<EvalSample>>& samples, double threshold) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) return InvalidArgumentError("--output " + path + ": cannot write");
  for (size_t r = 0; r < set.rows.size(); ++r) {
    const manager::PromptRow& row = set.rows[r];
    for (size_t i = 0; i < samples[r].size(); ++i) {
      const EvalSample& e = samples[r][i];
      nlohmann::ordered_json j = {{"prompt_id", row.id},
                                  {"sample_index", i},
                                  {"data_source", row.data_source},
                                  {"ground_truth", row.ground_truth},
                                  {"response", e.text},
                                  {"num_tokens", e.ids.size()},
                                  {"finish_reason", e.finish_reason},
                                  {"score", e.score},
                                  {"correct", e.score >= threshold}};
      file << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
    }
  }
  file.close();
  if (!file) return InternalError("--output " + path + ": write failed");
  return OkStatus();
}

std::string Problems(int64_t n) { return std::to_string(n) + (n == 1 ? " problem" : " problems"); }

void PrintText(const EvalSettings& s, const nlohmann::ordered_json& report) {
  std::string out = "laminar eval: " + s.model + " on " + s.data + "\n";
  out += "  " + Problems(report["num_problems"].get<int64_t>()) + " x " + std::to_string(s.n) +
         (s.n == 1 ? " sample" : " samples") + ", seed " + std::to_string(s.sampling.seed) +
         ", temperature " + Format("%g", s.sampling.temperature) + ", top_p " +
         Format("%g", s.sampling.top_p) + ", max_tokens " + std::to_string(s.max_tokens) +
         ", reward " + s.reward_name + ", correct: score >= " + Format("%g", s.threshold) + "\n";
  auto metrics = [&s](const nlohmann::ordered_json& m, const std::string& indent) {
    std::string text;
    for (int64_t k : s.ks) {
      text += indent + "pass@" + std::to_string(k) + " " +
              Format("%.4f", m["pass@" + std::to_string(k)].get<double>()) + "\n";
    }
    text += indent + "mean score " + Format("%.4f", m["mean_score"].get<double>()) +
            ", mean response " + Format("%.1f", m["mean_response_tokens"].get<double>()) +
            " tokens\n";
    return text;
  };
  out += metrics(report, "  ");
  if (report["by_data_source"].size() > 1) {
    for (const auto& [source, m] : report["by_data_source"].items()) {
      out += "  " + source + " (" + Problems(m["num_problems"].get<int64_t>()) + "):\n" +
             metrics(m, "    ");
    }
  }
  out += "  " + std::to_string(report["generated_tokens"].get<int64_t>()) + " tokens in " +
         Format("%.2f", report["elapsed_s"].get<double>()) + " s (" +
         Format("%.0f", report["tokens_per_s"].get<double>()) + " tokens/s)\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

int Run(const EvalArgs& a, const CLI::App& app) {
  auto settings = ResolveSettings(a, app);
  if (!settings.ok()) return Fail(settings.status().message(), 2);
  EvalSettings& s = *settings;
  auto path = model::ResolveModelPath(s.model);
  if (!path.ok()) return Fail("--model: " + std::string(path.status().message()));
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail("--model: " + std::string(ckpt.status().message()));
  auto tok = model::LoadTokenizerForModel(*path, s.tokenizer);
  if (!tok.ok()) return Fail("--tokenizer: " + std::string(tok.status().message()));
  auto set = LoadEvalSet(s, *ckpt, **tok);
  if (!set.ok()) return Fail(set.status().message());
  auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu,
                                       *engine::ParseWeightFormat(s.weights));
  if (!lm.ok()) return Fail(lm.status().message());
  const auto start = std::chrono::steady_clock::now();
  auto samples = Generate(s, **lm, **tok, *set);
  if (!samples.ok()) return Fail(samples.status().message());
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string first_error;
  const int64_t errors = Score(s, *set, &*samples, &first_error);
  if (errors > 0) {
    std::fprintf(stderr,
                 "laminar eval: warning: %lld samples could not be scored (scored %g); first: "
                 "%s\n",
                 static_cast<long long>(errors), s.failure_score, first_error.c_str());
  }
  if (!a.output.empty()) {
    if (Status st = WriteSamples(a.output, *set, *samples, s.threshold); !st.ok()) {
      return Fail(st.message());
    }
  }
  nlohmann::ordered_json report = Report(s, *set, *samples);
  report["reward_errors"] = errors;
  report["elapsed_s"] = secs;
  report["tokens_per_s"] = secs > 0 ? report["generated_tokens"].get<double>() / secs : 0.0;
  if (a.json) {
    std::string text = report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", text.c_str());
  } else {
    PrintText(s, report);
  }
  return 0;
}

std::function<int()> SetupEval(CLI::App* app) {
  auto a = std::make_shared<EvalArgs>();
  app->add_option("--model", a->model, "checkpoint path or model name (default: model.path)");
  app->add_option("--tokenizer", a->tokenizer, "tokenizer file overriding the checkpoint's");
  app->add_option("--weights", a->weights, engine::kWeightFormatHelp)
      ->check(CLI::IsMember(engine::WeightFormatNames()));
  app->add_option("--data", a->data, "eval set, JSON Lines (default: data.path)");
  app->add_option("--prompt-key", a->prompt_key, "field holding the prompt");
  app->add_option("--ground-truth-key", a->ground_truth_key, "field holding the reference answer");
  app->add_option("--data-source-key", a->data_source_key, "field naming the data source");
  app->add_option("--default-data-source", a->default_data_source,
                  "data source of rows without one");
  app->add_option("--chat-format", a->chat_format,
                  "render prompts as a user turn: chatml, qwen2, smollm2, llama3, llama3.1, "
                  "llama2, or auto (the checkpoint's template); empty: plain text");
  app->add_option("--system-message", a->system_message, "system turn of chat prompts");
  app->add_option("--reward", a->reward,
                  "a name (gsm8k), a map '{name: format, pattern: \"####\"}' or a weighted list; "
                  "default: the recipe's, else each row's data_source chooses it as in verl");
  app->add_option("--n", a->n, "samples per prompt")->check(CLI::PositiveNumber);
  app->add_option("--k", a->k, "pass@k to report, e.g. 1,4,8 (each <= n; default 1 and n)");
  app->add_option("--temperature", a->temperature,
                  "sampling temperature (default: 0 when n = 1, else 1; or rollout.temperature)")
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--top-p", a->top_p, "nucleus mass (1 = off)")->check(CLI::Range(0.0, 1.0));
  app->add_option("--top-k", a->top_k, "0 = off")->check(CLI::NonNegativeNumber);
  app->add_option("--min-p", a->min_p, "0 = off")->check(CLI::Range(0.0, 1.0));
  app->add_option("--max-tokens", a->max_tokens, "new tokens per response at most")
      ->check(CLI::PositiveNumber);
  app->add_option("--stop", a->stop, "stop string (repeatable)")->allow_extra_args(false);
  app->add_option("--seed", a->seed,
                  "sampling seed; sample i of row r draws with a seed of "
                  "(seed, r, i) only")
      ->check(kNonNegative);
  app->add_option("--limit", a->limit, "evaluate the first L rows only (0: all)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--batch", a->batch, "sequences in flight at most")->check(CLI::PositiveNumber);
  app->add_option("--kv-cache-mb", a->kv_cache_mb, "KV cache size in MiB")
      ->check(CLI::PositiveNumber);
  app->add_option("--correct-threshold", a->threshold,
                  "a sample is correct when its score >= this (default 1)");
  app->add_option("--recipe", a->recipe,
                  "take model.*, data.*, reward.* and rollout sampling settings from a training "
                  "recipe; flags override them");
  app->add_option("overrides", a->overrides, "dotted recipe overrides, e.g. rollout.top_p=0.9");
  app->add_option("--output", a->output,
                  "JSONL of every sample: prompt_id, sample_index, response, score, correct");
  app->add_flag("--json", a->json, "print the summary as one JSON object");
  app->footer(
      "pass@k is the unbiased estimator of Chen et al. 2021 (§2.1): per problem with n samples "
      "of which c are correct, 1 - C(n-c, k)/C(n, k), averaged over problems (docs/eval.md).\n"
      "Exit codes: 0 ok, 1 error (a file, a row, the model), 2 usage (a flag or the recipe).");
  return [a, app] { return Run(*a, *app); };
}

LAMINAR_REGISTER_COMMAND("eval", "pass@1 and pass@k of a model on a JSONL set with fixed seeds",
                         SetupEval);

}  // namespace
}  // namespace laminar::cli
