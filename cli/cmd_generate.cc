// `laminar generate`: streams a continuation of a prompt to stdout. `--sampler llama2c` reproduces
// llama2.c's run.c exactly (its xorshift64* sampler, its -n step count that includes the prompt
// positions, and its piece printing) so its published goldens can be checked.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/check.h"
#include "engine/llama2c_sampler.h"
#include "engine/llama_model.h"
#include "engine/sampler.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "rollout/engine/rollout_engine.h"

namespace laminar::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string tokenizer;
  std::string prompt;
  bool chat = false;
  std::string chat_format;
  std::string system;
  int64_t max_tokens = 256;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  float min_p = 0.0f;
  uint64_t seed = 0;
  std::string sampler = "default";
  int64_t steps = 256;
  bool json = false;
  std::string weights = "f32";
  std::string input;   // JSONL of {"prompt": text, "id": any}; batch mode when set
  std::string output;  // batch output JSONL; stdout when empty
  int32_t n = 1;       // samples per prompt (batch mode)
  int64_t kv_cache_mb = 256;
  int32_t top_logprobs = 0;  // batch mode: top logprobs recorded per token
};

int Fail(const std::string& message, int code = 1) {
  return CommandFail("generate", message, code);
}

void Emit(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

// run.c's generate(): the prompt tokens are forced, then sampled; stops at `steps` positions or
// when BOS is sampled; prints each piece, dropping the space after BOS and unprintable bytes.
int RunLlama2c(const engine::LlamaModel& lm, const model::Tokenizer& tok, const GenerateArgs& a) {
  auto prompt = tok.Encode(a.prompt, {.add_special = true, .parse_special = false});
  if (!prompt.ok()) return Fail("prompt: " + prompt.status().message());
  if (prompt->empty() || (*prompt)[0] != tok.bos_id())
    prompt->insert(prompt->begin(), tok.bos_id());
  int64_t steps = a.steps;
  const int64_t ctx = lm.config().max_position_embeddings;
  if (steps <= 0 || steps > ctx) steps = ctx;
  if (static_cast<int64_t>(prompt->size()) > steps) {
    return Fail("prompt of " + std::to_string(prompt->size()) + " tokens is longer than --steps " +
                std::to_string(steps));
  }
  engine::KvCache cache = lm.NewCache(1, steps);
  if (!std::isfinite(a.temperature) || !(a.top_p >= 0.0f && a.top_p <= 1.0f)) {
    return Fail("--temperature must be finite and --top-p in [0, 1]", 2);
  }
  // run.c replaces a seed <= 0 with time(NULL); a zero xorshift state would draw 0 forever.
  const uint64_t seed = a.seed > 0 ? a.seed : static_cast<uint64_t>(std::time(nullptr));
  engine::Llama2cSampler sampler(a.temperature, a.top_p, seed);
  int32_t token = (*prompt)[0];
  std::vector<float> logits;
  for (int64_t pos = 0; pos < steps; ++pos) {
    engine::SequenceSpan span{0, pos, 1};
    Status st = lm.Forward({&token, 1}, {&span, 1}, &cache, engine::LogitsFor::kAllTokens, &logits);
    if (!st.ok()) return Fail(st.message());
    int32_t next = pos + 1 < static_cast<int64_t>(prompt->size()) ? (*prompt)[pos + 1]
                                                                  : sampler.Sample(logits);
    if (next == tok.bos_id()) break;
    auto piece = tok.TokenBytes(next, /*skip_special=*/false);
    if (!piece.ok()) return Fail(piece.status().message());
    std::string p = *piece;
    if (token == tok.bos_id() && !p.empty() && p[0] == ' ') p.erase(0, 1);
    bool unprintable = p.size() == 1 && !(std::isprint(static_cast<unsigned char>(p[0])) ||
                                          std::isspace(static_cast<unsigned char>(p[0])));
    if (!unprintable) Emit(p);
    token = next;
  }
  Emit("\n");
  return 0;
}

StatusOr<std::vector<int32_t>> PromptIds(const model::Checkpoint& ckpt, const model::Tokenizer& tok,
                                         const GenerateArgs& a) {
  if (!a.chat) return tok.Encode(a.prompt, {.add_special = true, .parse_special = true});
  model::ChatFormat format;
  if (!a.chat_format.empty()) {
    LAMINAR_ASSIGN_OR_RETURN(format, model::ChatFormatFromName(a.chat_format));
  } else if (!ckpt.chat_template.empty()) {
    LAMINAR_ASSIGN_OR_RETURN(format, model::DetectChatFormat(ckpt.chat_template), ckpt.path);
  } else {
    return InvalidArgumentError(ckpt.path + " has no chat template; choose one with --chat-format");
  }
  std::vector<model::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  messages.push_back({"user", a.prompt});
  LAMINAR_ASSIGN_OR_RETURN(std::string text, model::RenderChat(format, messages, true));
  // The rendered text carries any BOS itself, as Hugging Face's apply_chat_template does.
  return tok.Encode(text, {.add_special = false, .parse_special = true});
}

int RunDefault(const model::Checkpoint& ckpt, const engine::LlamaModel& lm,
               const model::Tokenizer& tok, const GenerateArgs& a) {
  auto prompt = PromptIds(ckpt, tok, a);
  if (!prompt.ok()) return Fail(prompt.status().message());
  const int64_t ctx = lm.config().max_position_embeddings, n = static_cast<int64_t>(prompt->size());
  if (n == 0) return Fail("the prompt encodes to no tokens; give --prompt text");
  if (n >= ctx) {
    return Fail("prompt of " + std::to_string(n) + " tokens does not fit the model's context of " +
                std::to_string(ctx));
  }
  const int64_t max_new = std::min(a.max_tokens, ctx - n);
  std::vector<int64_t> stop_ids = lm.config().eos_token_ids;
  if (tok.eos_id() >= 0) stop_ids.push_back(tok.eos_id());
  engine::KvCache cache = lm.NewCache(1, n + max_new);
  const engine::SamplingParams params{a.temperature, a.top_k, a.top_p, a.min_p, a.seed};
  if (Status st = params.Validate(); !st.ok()) return Fail(st.message(), 2);
  engine::Sampler sampler(params);
  auto decoder = tok.NewStreamingDecoder(/*skip_special=*/true);
  std::vector<int32_t> ids;
  std::vector<float> logprobs, logits;
  std::vector<int32_t> input = *prompt;
  int64_t pos = 0;
  std::string finish = "length";
  while (static_cast<int64_t>(ids.size()) < max_new) {
    engine::SequenceSpan span{0, pos, static_cast<int64_t>(input.size())};
    Status st =
        lm.Forward(input, {&span, 1}, &cache, engine::LogitsFor::kLastTokenOfEachSequence, &logits);
    if (!st.ok()) return Fail(st.message());
    pos += static_cast<int64_t>(input.size());
    engine::SampledToken t = sampler.Sample(logits);
    ids.push_back(t.id);
    logprobs.push_back(t.logprob);
    if (std::find(stop_ids.begin(), stop_ids.end(), t.id) != stop_ids.end()) {
      finish = "stop";
      break;
    }
    if (!a.json) {
      auto text = decoder.Next(t.id);
      if (!text.ok()) return Fail(text.status().message());
      Emit(*text);
    }
    input.assign(1, t.id);
  }
  if (!a.json) {
    Emit(decoder.Finish() + "\n");
    if (ids.size() == 1 && finish == "stop") {  // an instruct model given a bare prompt, usually
      std::cerr << "(the model ended at once: its first token was end-of-sequence"
                << (a.chat ? "" : "; instruct models usually want --chat") << ")\n";
    }
    return 0;
  }
  auto text = tok.Decode(ids, /*skip_special=*/true);
  nlohmann::json out = {{"prompt_ids", *prompt},
                        {"ids", ids},
                        {"logprobs", logprobs},
                        {"text", text.ok() ? *text : ""},
                        {"finish_reason", finish}};
  Emit(out.dump() + "\n");
  return 0;
}

// Kept whole: the batched path of `laminar generate`, read top to bottom as the steps it runs
// (requests, engine loop, output lines); its parts share the request table.
// Batch mode: every prompt of `a.input` (one JSON object a line; blank lines skipped) becomes one
// RolloutRequest of a.n samples with seed a.seed + the prompt's 0-based index, stopping on the
// model's EOS ids; all run together through the RolloutEngine. One JSON line per finished sample
// (in finishing order) goes to a.output or stdout: prompt_id (the line's "id", else its 1-based
// line number), sample_index, text (decoded, special tokens skipped), token_ids (the sampled ids,
// stop token included), logprobs (natural log, one per id), finish_reason ("stop" / "length") and
// version; with a.top_logprobs > 0 also top_logprobs (per token, [id, logprob] pairs of the
// distribution sampled from, most likely first). The KV pool holds a.kv_cache_mb MiB of f32 K and
// V. A progress line goes to stderr when it is a terminal. Errors (exit 1) name the input file and
// line.
int RunBatch(const model::Checkpoint& ckpt, const engine::LlamaModel& lm,
             const model::Tokenizer& tok, const GenerateArgs& a) {
  std::ifstream in(a.input);
  if (!in) return Fail("cannot open --input " + a.input);
  const model::ModelConfig& cfg = lm.config();
  const int64_t ctx = cfg.max_position_embeddings;
  rollout::RolloutEngineConfig config;
  auto blocks =
      rollout::KvBlocksFor(a.kv_cache_mb, rollout::KvBytesPerToken(cfg), config.block_size);
  if (!blocks.ok()) return Fail("--kv-cache-mb: " + std::string(blocks.status().message()));
  config.num_blocks = *blocks;
  auto engine = rollout::RolloutEngine::Create(&lm, config);
  if (!engine.ok()) return Fail(engine.status().message());
  std::vector<int32_t> stop_ids;
  for (int64_t id : cfg.eos_token_ids) stop_ids.push_back(static_cast<int32_t>(id));
  if (tok.eos_id() >= 0) stop_ids.push_back(tok.eos_id());

  std::vector<nlohmann::json> prompt_ids;  // by request id
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    const std::string where = a.input + ":" + std::to_string(line_number) + ": ";
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Fail(where + "malformed JSON");
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string())
      return Fail(where + "expected an object with a string \"prompt\"");
    GenerateArgs one = a;
    one.prompt = j["prompt"].get<std::string>();
    auto ids = PromptIds(ckpt, tok, one);
    if (!ids.ok()) return Fail(where + ids.status().message());
    const int64_t len = static_cast<int64_t>(ids->size());
    if (len == 0) return Fail(where + "the prompt encodes to no tokens");
    if (len >= ctx) {
      return Fail(where + "prompt of " + std::to_string(len) +
                  " tokens does not fit the model's context of " + std::to_string(ctx));
    }
    rollout::RolloutRequest req;
    req.prompt_ids = std::move(*ids);
    req.sampling = {a.temperature, a.top_k, a.top_p, a.min_p, a.seed + prompt_ids.size(),
                    a.top_logprobs};
    req.stop.stop_token_ids = stop_ids;
    req.stop.max_tokens = static_cast<int32_t>(std::min(a.max_tokens, ctx - len));
    req.n = a.n;
    auto id = (*engine)->Add(std::move(req));
    if (!id.ok()) {
      return Fail(
          where + id.status().message() +
          (id.status().code() == StatusCode::kResourceExhausted ? " (raise --kv-cache-mb)" : ""));
    }
    LAMINAR_CHECK(*id == static_cast<int64_t>(prompt_ids.size()));
    prompt_ids.push_back(j.contains("id") ? j["id"] : nlohmann::json(line_number));
  }

  std::ofstream file;
  if (!a.output.empty()) {
    file.open(a.output, std::ios::binary | std::ios::trunc);
    if (!file) return Fail("cannot write --output " + a.output);
  }
  const bool progress = isatty(STDERR_FILENO) == 1;
  const int64_t total = static_cast<int64_t>(prompt_ids.size()) * a.n;
  int64_t done = 0, tokens = 0;
  const auto start = std::chrono::steady_clock::now();
  while (!(*engine)->idle()) {
    auto finished = (*engine)->Step();
    if (!finished.ok()) return Fail(finished.status().message());
    for (const rollout::FinishedSample& s : *finished) {
      auto text = tok.Decode(s.generated_ids, /*skip_special=*/true);
      if (!text.ok()) return Fail(text.status().message());
      nlohmann::json out = {{"prompt_id", prompt_ids[s.request_id]},
                            {"sample_index", s.sample_index},
                            {"text", *text},
                            {"token_ids", s.generated_ids},
                            {"logprobs", s.logprobs},
                            {"finish_reason", rollout::FinishReasonName(s.finish_reason)},
                            {"version", s.version}};
      if (a.top_logprobs > 0) {
        nlohmann::json top = nlohmann::json::array();
        for (const auto& per_token : s.top_logprobs) {
          nlohmann::json row = nlohmann::json::array();
          for (const engine::TokenLogprob& t : per_token) row.push_back({t.id, t.logprob});
          top.push_back(std::move(row));
        }
        out["top_logprobs"] = std::move(top);
      }
      // Invalid UTF-8 in the text becomes U+FFFD rather than an exception.
      std::string dumped = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      if (a.output.empty()) {
        Emit(dumped + "\n");
      } else {
        file << dumped << '\n';
      }
      ++done;
      tokens += static_cast<int64_t>(s.generated_ids.size());
    }
    if (progress && !finished->empty()) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "\r%lld/%lld samples, %.1f tok/s", static_cast<long long>(done),
                   static_cast<long long>(total), secs > 0 ? tokens / secs : 0.0);
    }
  }
  if (progress) std::fprintf(stderr, "\n");
  if (file.is_open()) {
    file.close();
    if (!file) return Fail("writing --output " + a.output + " failed");
  }
  return 0;
}

int Run(const GenerateArgs& a) {
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return Fail(path.status().message());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return Fail(ckpt.status().message());
  auto tok = model::LoadTokenizerForModel(*path, a.tokenizer);
  if (!tok.ok()) return Fail(tok.status().message());
  if ((*tok)->vocab_size() > ckpt->config.vocab_size) {
    return Fail("the tokenizer has " + std::to_string((*tok)->vocab_size()) +
                " tokens but the model only " + std::to_string(ckpt->config.vocab_size));
  }
  auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu,
                                       *engine::ParseWeightFormat(a.weights));
  if (!lm.ok()) return Fail(lm.status().message());
  if (!a.input.empty()) {
    if (a.sampler == "llama2c") return Fail("--sampler llama2c has no batch mode (--input)", 2);
    return RunBatch(*ckpt, **lm, **tok, a);
  }
  if (a.sampler == "llama2c") return RunLlama2c(**lm, **tok, a);
  return RunDefault(*ckpt, **lm, **tok, a);
}

std::function<int()> SetupGenerate(CLI::App* app) {
  auto a = std::make_shared<GenerateArgs>();
  app->add_option("--model", a->model, "checkpoint path or model name")->required();
  app->add_option("--tokenizer", a->tokenizer, "tokenizer file overriding the checkpoint's");
  app->add_option("--prompt", a->prompt, "prompt text");
  app->add_flag("--chat", a->chat, "wrap the prompt as a user turn in the model's chat format");
  app->add_option("--chat-format", a->chat_format,
                  "chatml, qwen2, smollm2, llama3, llama3.1, llama2");
  app->add_option("--system", a->system, "system message (with --chat)");
  app->add_option("--max-tokens", a->max_tokens, "new tokens at most")->check(CLI::PositiveNumber);
  app->add_option("--temperature", a->temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  app->add_option("--top-p", a->top_p, "nucleus mass (1 = off)")->check(CLI::Range(0.0, 1.0));
  app->add_option("--top-k", a->top_k, "0 = off")->check(CLI::NonNegativeNumber);
  app->add_option("--min-p", a->min_p, "0 = off")->check(CLI::Range(0.0, 1.0));
  app->add_option("--seed", a->seed, "sampling seed")->check(kNonNegative);
  app->add_option("--sampler", a->sampler, "default, or llama2c (run.c's sampler and output)")
      ->check(CLI::IsMember({"default", "llama2c"}));
  app->add_option("--steps", a->steps, "llama2c: total positions including the prompt (run.c -n)");
  app->add_option("--weights", a->weights, engine::kWeightFormatHelp)
      ->check(CLI::IsMember(engine::WeightFormatNames()));
  app->add_flag("--json", a->json,
                "print one JSON line: prompt_ids, ids, logprobs, text, finish_reason");
  app->add_option("--input", a->input,
                  "JSONL of {\"prompt\": text, \"id\": any}: generate --n samples of each prompt "
                  "in one batch, one JSON line per sample");
  app->add_option("--output", a->output, "batch output JSONL (default stdout)");
  app->add_option("--n", a->n, "samples per prompt (with --input)")->check(CLI::PositiveNumber);
  app->add_option("--logprobs", a->top_logprobs,
                  "with --input: also record the K most likely tokens' logprobs per token")
      ->check(CLI::Range(0, 20));
  app->add_option("--kv-cache-mb", a->kv_cache_mb, "KV cache size in MiB (with --input)")
      ->check(CLI::PositiveNumber);
  return [a] { return Run(*a); };
}
LAMINAR_REGISTER_COMMAND("generate", "stream a continuation of a prompt, or batch-generate a JSONL",
                         SetupGenerate);

}  // namespace
}  // namespace laminar::cli
