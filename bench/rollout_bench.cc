// The rollout engine's throughput on a GRPO-shaped load, and llama-batched-bench as its peer.
#include "bench/rollout_bench.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "bench/model_bench.h"
#include "core/check.h"
#include "core/host.h"
#include "core/process.h"
#include "engine/sampler.h"

namespace laminar::bench {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string Join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

// The last `max_bytes` of a log file, for an error message.
std::string Tail(const std::string& path, size_t max_bytes = 1500) {
  std::ifstream f(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return s.size() > max_bytes ? "..." + s.substr(s.size() - max_bytes) : s;
}

// Removes a file when it goes out of scope.
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

}  // namespace

Status RolloutLoad::Validate() const {
  auto bad = [](const std::string& field, const std::string& value) {
    return InvalidArgumentError("rollout load: " + field + " must be >= 1, got " + value);
  };
  if (num_prompts < 1) return bad("num_prompts", std::to_string(num_prompts));
  if (n < 1) return bad("n", std::to_string(n));
  if (prompt_len < 1) return bad("prompt_len", std::to_string(prompt_len));
  if (max_tokens < 1) return bad("max_tokens", std::to_string(max_tokens));
  if (!(temperature >= 0)) {
    return InvalidArgumentError("rollout load: temperature must be >= 0, got " +
                                std::to_string(temperature));
  }
  return OkStatus();
}

std::vector<std::vector<int32_t>> BenchPrompts(const RolloutLoad& load, int64_t vocab_size) {
  LAMINAR_CHECK_GT(vocab_size, 0);
  engine::Xoshiro256 rng(load.seed);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(load.num_prompts));
  for (auto& p : prompts) {
    p.resize(static_cast<size_t>(load.prompt_len));
    for (int32_t& id : p) id = static_cast<int32_t>(rng.Next() % static_cast<uint64_t>(vocab_size));
  }
  return prompts;
}

int64_t BlocksForLoad(const RolloutLoad& load, int32_t block_size) {
  LAMINAR_CHECK_GT(block_size, 0);
  const int64_t positions = load.prompt_len + load.max_tokens - 1;
  return load.num_samples() * ((positions + block_size - 1) / block_size);
}

double DecodeKvBytesPerSample(const RolloutLoad& load, double kv_bytes_per_token) {
  // sum_{s=1}^{T-1} (P + s) = (T - 1) P + T (T - 1) / 2
  const double t = static_cast<double>(load.max_tokens), p = static_cast<double>(load.prompt_len);
  return ((t - 1) * p + t * (t - 1) / 2) * kv_bytes_per_token;
}

StatusOr<RolloutRun> RunLoad(rollout::RolloutEngine& engine, const RolloutLoad& load,
                             int64_t vocab_size) {
  LAMINAR_RETURN_IF_ERROR(load.Validate());
  LAMINAR_CHECK(engine.idle()) << "RunLoad needs an idle engine";
  const std::vector<std::vector<int32_t>> prompts = BenchPrompts(load, vocab_size);
  const int64_t preempted_before = engine.scheduler().stats().num_preemptions;
  RolloutRun run;
  run.num_samples = load.num_samples();
  std::vector<double> step_s;
  int64_t num_finished = 0;
  const double start = Now();
  for (size_t r = 0; r < prompts.size(); ++r) {
    rollout::RolloutRequest req;
    req.prompt_ids = prompts[r];
    req.sampling.temperature = load.temperature;
    req.sampling.seed = load.seed + r;
    req.stop.max_tokens = load.max_tokens;  // no stop ids or strings: only max_tokens ends it
    req.n = load.n;
    LAMINAR_RETURN_IF_ERROR(engine.Add(std::move(req)).status(),
                            "rollout bench prompt " + std::to_string(r));
  }
  while (!engine.idle()) {
    const double t0 = Now();
    LAMINAR_ASSIGN_OR_RETURN(std::vector<rollout::FinishedSample> done, engine.Step(),
                             "rollout bench step " + std::to_string(run.steps));
    step_s.push_back(Now() - t0);
    ++run.steps;
    run.peak_kv_blocks_used =
        std::max(run.peak_kv_blocks_used, engine.scheduler().stats().num_kv_blocks_used);
    for (const rollout::FinishedSample& s : done) {
      if (s.finish_reason != rollout::FinishReason::kLength ||
          static_cast<int64_t>(s.generated_ids.size()) != load.max_tokens) {
        return InternalError("rollout bench: sample " + std::to_string(s.sample_index) +
                             " of request " + std::to_string(s.request_id) + " finished with '" +
                             std::string(rollout::FinishReasonName(s.finish_reason)) + "' after " +
                             std::to_string(s.generated_ids.size()) +
                             " tokens, not 'length' after " + std::to_string(load.max_tokens));
      }
      run.generated_tokens += static_cast<int64_t>(s.generated_ids.size());
      ++num_finished;
    }
  }
  run.wall_s = Now() - start;
  if (num_finished != run.num_samples) {
    return InternalError("rollout bench: " + std::to_string(num_finished) + " samples finished, " +
                         std::to_string(run.num_samples) + " expected");
  }
  run.tokens_per_s = static_cast<double>(run.generated_tokens) / run.wall_s;
  run.median_step_s = Median(step_s);
  run.preemptions = engine.scheduler().stats().num_preemptions - preempted_before;
  return run;
}

StatusOr<RolloutBenchResult> BenchRollout(const engine::LlamaModel& model, const RolloutLoad& load,
                                          const rollout::RolloutEngineConfig& config,
                                          double dram_bytes_per_s) {
  LAMINAR_RETURN_IF_ERROR(load.Validate());
  LAMINAR_CHECK_GT(dram_bytes_per_s, 0);
  LAMINAR_ASSIGN_OR_RETURN(std::unique_ptr<rollout::RolloutEngine> engine,
                           rollout::RolloutEngine::Create(&model, config));
  const int64_t vocab = model.config().vocab_size;
  RolloutBenchResult r;
  r.kv_bytes_per_token = static_cast<double>(engine->kv_cache().bytes_per_token());
  r.weight_bytes_per_step = static_cast<double>(model.projection_bytes());
  auto dram_fraction = [&](const RolloutRun& run, const RolloutLoad& l) {
    const double bytes =
        static_cast<double>(run.steps) * r.weight_bytes_per_step +
        static_cast<double>(l.num_samples()) * DecodeKvBytesPerSample(l, r.kv_bytes_per_token);
    return bytes / run.wall_s / dram_bytes_per_s;
  };

  // Warm-up (untimed): the prompts' prefill and one decode step at the load's batch, so the
  // timed runs find the kernels' shapes and the cache's pages ready.
  RolloutLoad warm = load;
  warm.max_tokens = std::min(load.max_tokens, 2);
  LAMINAR_RETURN_IF_ERROR(RunLoad(*engine, warm, vocab).status(), "warm-up load");
  RolloutLoad prefill = load;
  prefill.max_tokens = 1;
  LAMINAR_ASSIGN_OR_RETURN(r.prefill, RunLoad(*engine, prefill, vocab), "prefill-only load");
  LAMINAR_ASSIGN_OR_RETURN(r.grpo, RunLoad(*engine, load, vocab), "GRPO load");
  r.decode_s = r.grpo.wall_s - r.prefill.wall_s;
  if (r.decode_s > 0 && load.max_tokens > 1) {
    r.decode_tokens_per_s =
        static_cast<double>(load.num_samples() * (load.max_tokens - 1)) / r.decode_s;
  }
  r.grpo_dram_fraction = dram_fraction(r.grpo, load);

  RolloutLoad one = load;
  one.num_prompts = 1;
  one.n = 1;
  LAMINAR_ASSIGN_OR_RETURN(r.batch1, RunLoad(*engine, one, vocab), "batch-1 load");
  r.batch1_decode_tokens_per_s = r.batch1.median_step_s > 0 ? 1.0 / r.batch1.median_step_s : 0;
  r.batch1_dram_fraction = dram_fraction(r.batch1, one);
  return r;
}

StatusOr<BatchedBenchRow> ParseBatchedBenchLine(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  const std::string quoted = "'" + std::string(line.substr(0, 200)) + "'";
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError("llama-batched-bench printed " + quoted + ", not a JSON object");
  }
  BatchedBenchRow row;
  try {
    row.pp = j.at("pp").get<int64_t>();
    row.tg = j.at("tg").get<int64_t>();
    row.npl = j.at("pl").get<int64_t>();
    row.flash_attn = j.at("flash_attn").get<int64_t>() == 1;
    row.t_pp_s = j.at("t_pp").get<double>();
    row.pp_tokens_per_s = j.at("speed_pp").get<double>();
    row.t_tg_s = j.at("t_tg").get<double>();
    row.tg_tokens_per_s = j.at("speed_tg").get<double>();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError("llama-batched-bench printed " + quoted + ": " + e.what());
  }
  return row;
}

StatusOr<std::vector<BatchedBenchRow>> RunLlamaCppBatchedBench(const LlamaCppPeerConfig& c) {
  LAMINAR_CHECK(!c.npl.empty()) << "the peer needs at least one npl";
  const std::string bin = c.bin_dir + "/llama-batched-bench";
  // Without a unified KV cache and with -pps, llama-batched-bench needs npl x (pp + tg) cells and
  // silently skips any row that does not fit its context.
  const int64_t max_npl = *std::max_element(c.npl.begin(), c.npl.end());
  const std::string log = (std::filesystem::temp_directory_path() /
                           ("laminar-llama-batched-bench-" + std::to_string(getpid()) + ".log"))
                              .string();
  RemoveOnExit remove_log{log};  // failures quote its tail
  LAMINAR_ASSIGN_OR_RETURN(
      Process proc,
      Process::Spawn(
          {bin, "-m", c.model, "-npp", std::to_string(c.prompt_len), "-ntg",
           std::to_string(c.max_tokens), "-npl", Join(c.npl), "-pps", "-t",
           std::to_string(c.threads), "-fa", c.flash_attn ? "on" : "off", "-c",
           std::to_string(max_npl * (c.prompt_len + c.max_tokens)), "--output-format", "jsonl"},
          log),
      "llama.cpp peer");
  const int64_t deadline_ms = SteadyNowMs() + int64_t{c.timeout_s} * 1000;
  std::vector<BatchedBenchRow> rows;
  while (true) {
    const int64_t left_ms = deadline_ms - SteadyNowMs();
    if (left_ms <= 0) {
      return DeadlineExceededError(bin + " ran past " + std::to_string(c.timeout_s) + " s");
    }
    StatusOr<std::string> line = proc.ReadLine(static_cast<int>(left_ms));
    if (!line.ok()) {
      if (line.status().code() == StatusCode::kUnavailable) break;  // it closed stdout
      return Status(line.status().code(), bin + ": " + line.status().message());
    }
    if (line->empty() || line->front() != '{') continue;  // the blank line it ends with
    LAMINAR_ASSIGN_OR_RETURN(BatchedBenchRow row, ParseBatchedBenchLine(*line));
    rows.push_back(row);
  }
  StatusOr<int> code = proc.Wait(10000);
  if (!code.ok() || *code != 0) {
    return InternalError(bin + " failed (exit " +
                         (code.ok() ? std::to_string(*code) : code.status().message()) +
                         "); its log ends with:\n" + Tail(log));
  }
  std::vector<BatchedBenchRow> ordered;
  for (int64_t npl : c.npl) {
    auto it = std::find_if(rows.begin(), rows.end(), [&](const BatchedBenchRow& r) {
      return r.npl == npl && r.pp == c.prompt_len && r.tg == c.max_tokens;
    });
    if (it == rows.end()) {
      return InternalError(bin + " printed no row for npl " + std::to_string(npl) + " (pp " +
                           std::to_string(c.prompt_len) + ", tg " + std::to_string(c.max_tokens) +
                           "); its log ends with:\n" + Tail(log));
    }
    ordered.push_back(*it);
  }
  return ordered;
}

std::string DefaultLlamaCppBinDir() {
  const char* peers = std::getenv("LAMINAR_PEERS");
  const char* home = std::getenv("HOME");
  const std::string root = peers && *peers
                               ? std::string(peers)
                               : std::string(home ? home : "/tmp") + "/.cache/laminar/peers";
  return root + "/llama.cpp/build/bin";
}

std::string PeerModelFor(const std::string& model_path) {
  namespace fs = std::filesystem;
  const fs::path p(model_path);
  if (p.extension() != ".gguf") return "";
  // "X.Q4_1.gguf" -> stem "X.Q4_1" -> "X"; "X.gguf" -> "X".
  fs::path stem = p.stem();
  if (stem.has_extension()) stem = stem.stem();
  const fs::path bf16 = p.parent_path() / (stem.string() + ".BF16.gguf");
  std::error_code ec;
  if (fs::is_regular_file(bf16, ec)) return bf16.string();
  return model_path;
}

}  // namespace laminar::bench
