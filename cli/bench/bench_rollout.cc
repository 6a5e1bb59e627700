// `laminar bench rollout`: the rollout engine on a GRPO-shaped load and at batch 1, for each weight
// format asked, against llama.cpp's llama-batched-bench on the same load in the same run
// (bench/rollout_bench.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/hw_limits.h"
#include "bench/rollout_bench.h"
#include "cli/bench/bench_command.h"
#include "engine/llama_model.h"
#include "kernels/cpu/cpu_features.h"
#include "model/checkpoint.h"
#include "model/model_path.h"

namespace laminar::cli {
namespace {

// The default weight format: the trainer's own precision, so the default run measures the policy
// the trainer computes (`--weights bf16,w8a8,w4a8,gguf` for the others).
constexpr const char* kRolloutWeights = "f32";

struct RolloutBenchArgs {
  std::string model = "smollm2-135m-instruct";
  std::vector<std::string> weights;  // engine::WeightFormat names; empty: kRolloutWeights
  int32_t prompts = 16;
  int32_t n = 8;
  int64_t prompt_len = 128;
  int32_t max_tokens = 256;
  float temperature = 1.0f;
  uint64_t seed = 0;
  int64_t kv_cache_mb = 0;  // 0: --num-blocks, else enough for the load
  int32_t num_blocks = 0;   // 0: enough for the whole load without preemption
  int32_t block_size = 16;
  int64_t max_num_seqs = 0;  // 0: every sample of the load at once
  int64_t max_num_batched_tokens = 2048;
  std::string peer_llamacpp;  // empty: DefaultLlamaCppBinDir() when present
  bool no_peer = false;
  std::string peer_model;  // empty: PeerModelFor(the model)
  std::vector<int64_t> peer_npl = {8, 32, 64};
  std::string peer_fa = "both";
  int64_t dram_mb = 1024;  // buffer of the DRAM bandwidth measurement
};

nlohmann::json RunJson(const bench::RolloutRun& r) {
  return {{"samples", r.num_samples},
          {"generated_tokens", r.generated_tokens},
          {"steps", r.steps},
          {"wall_s", r.wall_s},
          {"tokens_per_s", r.tokens_per_s},
          {"median_step_s", r.median_step_s},
          {"preemptions", r.preemptions},
          {"peak_kv_blocks_used", r.peak_kv_blocks_used}};
}

// {"npl": tokens/s, ...}.
nlohmann::json BestJson(const std::map<int64_t, double>& best) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [npl, tg] : best) j[std::to_string(npl)] = tg;
  return j;
}

// llama-batched-bench on the same load, once per flash-attention setting. Returns the "llama_cpp"
// JSON (with a "skipped" reason when there is no peer to run) and fills `best` with the best
// S_TG per npl over the settings.
StatusOr<nlohmann::json> RunRolloutPeer(const RolloutBenchArgs& a, const std::string& model_path,
                                        std::map<int64_t, double>* best) {
  if (a.no_peer) return nlohmann::json{{"skipped", "--no-peer"}};
  const std::string bin_dir =
      a.peer_llamacpp.empty() ? bench::DefaultLlamaCppBinDir() : a.peer_llamacpp;
  const std::string bin = bin_dir + "/llama-batched-bench";
  if (access(bin.c_str(), X_OK) != 0) {
    if (!a.peer_llamacpp.empty()) return NotFoundError("--peer-llamacpp: no " + bin);
    return nlohmann::json{{"skipped", bin + " not found (scripts/setup.sh --bench builds it)"}};
  }
  const std::string peer_model =
      a.peer_model.empty() ? bench::PeerModelFor(model_path) : a.peer_model;
  if (peer_model.empty()) {
    return nlohmann::json{{"skipped", model_path + " is not a GGUF; give the peer --peer-model"}};
  }
  bench::LlamaCppPeerConfig c;
  c.bin_dir = bin_dir;
  c.model = peer_model;
  c.prompt_len = a.prompt_len;
  c.max_tokens = a.max_tokens;
  c.npl = a.peer_npl;
  c.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  nlohmann::json runs = nlohmann::json::array();
  for (const bool fa : {true, false}) {
    if (a.peer_fa != "both" && (a.peer_fa == "on") != fa) continue;
    c.flash_attn = fa;
    LAMINAR_ASSIGN_OR_RETURN(std::vector<bench::BatchedBenchRow> rows,
                             bench::RunLlamaCppBatchedBench(c));
    nlohmann::json jrows = nlohmann::json::array();
    for (const bench::BatchedBenchRow& r : rows) {
      jrows.push_back({{"npl", r.npl},
                       {"t_pp_s", r.t_pp_s},
                       {"pp_tokens_per_s", r.pp_tokens_per_s},
                       {"t_tg_s", r.t_tg_s},
                       {"tg_tokens_per_s", r.tg_tokens_per_s}});
      (*best)[r.npl] = std::max((*best)[r.npl], r.tg_tokens_per_s);
      std::fprintf(stderr, "llama.cpp fa %-3s npl %3lld: %8.1f generated tok/s (S_TG)\n",
                   fa ? "on" : "off", static_cast<long long>(r.npl), r.tg_tokens_per_s);
    }
    runs.push_back({{"flash_attn", fa}, {"rows", jrows}});
  }
  return nlohmann::json{{"binary", bin},
                        {"model", peer_model},
                        {"threads", c.threads},
                        {"command", "llama-batched-bench -npp " + std::to_string(c.prompt_len) +
                                        " -ntg " + std::to_string(c.max_tokens) + " -pps"},
                        {"runs", runs},
                        {"best_tg_tokens_per_s", BestJson(*best)}};
}

// The engine sized by the flags: KV blocks from --num-blocks or --kv-cache-mb, else enough for the
// whole load; every sample running at once unless --max-num-seqs.
rollout::RolloutEngineConfig RolloutConfigFor(const RolloutBenchArgs& a,
                                              const bench::RolloutLoad& load,
                                              const model::ModelConfig& mc) {
  rollout::RolloutEngineConfig config;
  config.block_size = a.block_size;
  int64_t blocks = a.num_blocks > 0 ? a.num_blocks : bench::BlocksForLoad(load, a.block_size);
  if (a.kv_cache_mb > 0) {
    // A size too small for one block leaves one block: the engine then reports the load too big.
    auto fit = rollout::KvBlocksFor(a.kv_cache_mb, rollout::KvBytesPerToken(mc), a.block_size);
    blocks = fit.ok() ? *fit : 1;
  }
  config.num_blocks = static_cast<int32_t>(std::clamp<int64_t>(blocks, 1, int64_t{1} << 30));
  config.scheduler.max_num_seqs = a.max_num_seqs > 0 ? a.max_num_seqs : load.num_samples();
  config.scheduler.max_num_batched_tokens = a.max_num_batched_tokens;
  return config;
}

// One weight dtype's results as JSON, with its human lines on stderr.
nlohmann::json ReportRollout(const std::string& w, const bench::RolloutLoad& load,
                             int32_t num_blocks, const bench::RolloutBenchResult& r) {
  nlohmann::json grpo = RunJson(r.grpo);
  grpo["decode_s"] = r.decode_s;
  grpo["decode_tokens_per_s"] = r.decode_tokens_per_s;
  grpo["dram_fraction"] = r.grpo_dram_fraction;
  nlohmann::json batch1 = RunJson(r.batch1);
  batch1["decode_tokens_per_s"] = r.batch1_decode_tokens_per_s;
  batch1["dram_fraction"] = r.batch1_dram_fraction;
  std::fprintf(stderr,
               "rollout %-4s %dx%d, %lld+%d tokens: %8.1f generated tok/s (decode %.1f), %lld "
               "steps, %lld preemptions, peak %d/%d KV blocks, %.0f%% of DRAM bandwidth\n",
               w.c_str(), load.num_prompts, load.n, static_cast<long long>(load.prompt_len),
               load.max_tokens, r.grpo.tokens_per_s, r.decode_tokens_per_s,
               static_cast<long long>(r.grpo.steps), static_cast<long long>(r.grpo.preemptions),
               r.grpo.peak_kv_blocks_used, num_blocks, 100 * r.grpo_dram_fraction);
  std::fprintf(stderr,
               "rollout %-4s batch 1: %8.1f generated tok/s (decode %.1f), %.0f%% of DRAM "
               "bandwidth\n",
               w.c_str(), r.batch1.tokens_per_s, r.batch1_decode_tokens_per_s,
               100 * r.batch1_dram_fraction);
  return {{"weights", w},
          {"weight_bytes_per_step", r.weight_bytes_per_step},
          {"grpo", grpo},
          {"prefill_only", RunJson(r.prefill)},
          {"batch1", batch1}};
}

// Our generated tokens/s (whole load, and decode phase) over llama.cpp's best S_TG at npl 64 (the
// largest npl run when 64 is not among them), and per npl.
nlohmann::json RolloutRatios(const nlohmann::json& ours, const std::map<int64_t, double>& best) {
  const int64_t ref = best.contains(64) ? 64 : best.rbegin()->first;
  const double peer = best.at(ref);
  nlohmann::json ratios = nlohmann::json::array();
  for (const nlohmann::json& row : ours) {
    const double generated = row["grpo"]["tokens_per_s"].get<double>();
    const double decode = row["grpo"]["decode_tokens_per_s"].get<double>();
    nlohmann::json per_npl;
    for (const auto& [npl, tg] : best) per_npl[std::to_string(npl)] = generated / tg;
    ratios.push_back({{"weights", row["weights"]},
                      {"npl", ref},
                      {"generated", generated / peer},
                      {"decode", decode / peer},
                      {"generated_per_npl", per_npl}});
    std::fprintf(stderr,
                 "ratio %-4s: %.2fx llama.cpp's best S_TG at npl %lld (decode phase %.2fx)\n",
                 row["weights"].get<std::string>().c_str(), generated / peer,
                 static_cast<long long>(ref), decode / peer);
  }
  return ratios;
}

// The rollout engine on a GRPO-shaped load and at batch 1 (bench/rollout_bench.h), for each
// weight dtype asked, against llama-batched-bench in the same run.
int RunRollout(const RolloutBenchArgs& a) {
  if (a.kv_cache_mb > 0 && a.num_blocks > 0) {
    return CommandFail("bench", "give --kv-cache-mb or --num-blocks, not both", 2);
  }
  bench::RolloutLoad load{a.prompts, a.n, a.prompt_len, a.max_tokens, a.temperature, a.seed};
  auto path = model::ResolveModelPath(a.model);
  if (!path.ok()) return BenchFail(path.status());
  auto ckpt = model::LoadCheckpoint(*path);
  if (!ckpt.ok()) return BenchFail(ckpt.status());
  const rollout::RolloutEngineConfig config = RolloutConfigFor(a, load, ckpt->config);
  // Other work on the machine skews both sides (llama.cpp's spinning threads most): say how busy.
  const double load_before = LoadAverage1m();
  // The peer runs first, so a missing or failing peer is reported before minutes of our runs.
  std::map<int64_t, double> best;
  auto peer = RunRolloutPeer(a, *path, &best);
  if (!peer.ok()) return BenchFail(peer.status());
  const double bw = bench::MeasureDramReadBandwidth(a.dram_mb << 20);
  nlohmann::json out = {{"model", *path},
                        {"isa", kernels::cpu::IsaName(kernels::cpu::BestIsa())},
                        {"cores", std::thread::hardware_concurrency()},
                        {"dram_read_gb_per_s", bw / 1e9},
                        {"load",
                         {{"prompts", load.num_prompts},
                          {"n", load.n},
                          {"prompt_len", load.prompt_len},
                          {"max_tokens", load.max_tokens},
                          {"temperature", load.temperature},
                          {"seed", load.seed}}},
                        {"engine",
                         {{"block_size", config.block_size},
                          {"num_blocks", config.num_blocks},
                          {"max_num_seqs", config.scheduler.max_num_seqs},
                          {"max_num_batched_tokens", config.scheduler.max_num_batched_tokens},
                          {"kv_dtype", "f32"}}}};
  const std::vector<std::string> formats =
      a.weights.empty() ? std::vector<std::string>{kRolloutWeights} : a.weights;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& w : formats) {
    // What a rollout pays per pulled version: the model built from f32 tensors, quantized.
    const auto t0 = std::chrono::steady_clock::now();
    auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu,
                                         *engine::ParseWeightFormat(w));
    const double create_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!lm.ok()) return BenchFail(lm.status());
    auto r = bench::BenchRollout(**lm, load, config, bw);
    if (!r.ok()) return BenchFail(r.status());
    out["kv_bytes_per_token"] = r->kv_bytes_per_token;
    rows.push_back(ReportRollout(w, load, config.num_blocks, *r));
    rows.back()["model_create_s"] = create_s;
    std::fprintf(stderr, "rollout %-4s model built (quantized) in %.2f s\n", w.c_str(), create_s);
  }
  out["laminar"] = rows;
  out["llama_cpp"] = *peer;
  out["load_average_1m"] = {{"start", load_before}, {"end", LoadAverage1m()}};
  if (!best.empty()) {
    out["ratio_to_llama_cpp"] = RolloutRatios(rows, best);
  } else {
    std::fprintf(stderr, "llama.cpp peer skipped: %s\n",
                 (*peer)["skipped"].get<std::string>().c_str());
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::function<int()> SetupRollout(CLI::App* app) {
  auto a = std::make_shared<RolloutBenchArgs>();
  AddModelOption(app, &a->model);
  app->add_option("--weights", a->weights,
                  std::string(engine::kWeightFormatHelp) + "; a comma-separated list (default " +
                      std::string(kRolloutWeights) + ")")
      ->delimiter(',')
      ->check(CLI::IsMember(engine::WeightFormatNames()));
  app->add_option("--prompts", a->prompts, "prompts (GRPO groups)")->check(CLI::Range(1, 1 << 20));
  app->add_option("--n", a->n, "samples per prompt")->check(CLI::Range(1, 1 << 16));
  app->add_option("--prompt-len", a->prompt_len, "tokens per prompt")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--max-tokens", a->max_tokens, "tokens generated by every sample")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--temperature", a->temperature, "sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  app->add_option("--seed", a->seed, "prompt ids and sampling seed")->check(kNonNegative);
  app->add_option("--kv-cache-mb", a->kv_cache_mb, "KV pool in MiB (default: enough for the load)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app->add_option("--num-blocks", a->num_blocks, "KV blocks (default: enough for the whole load)")
      ->check(CLI::Range(1, 1 << 30));
  app->add_option("--block-size", a->block_size, "tokens per KV block")
      ->check(CLI::Range(1, 1 << 16));
  app->add_option("--max-num-seqs", a->max_num_seqs,
                  "running sequences at most (default: every sample)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app->add_option("--max-num-batched-tokens", a->max_num_batched_tokens,
                  "tokens per engine step at most")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app->add_option("--peer-llamacpp", a->peer_llamacpp,
                  "folder with llama-batched-bench (default: the one scripts/setup.sh --bench "
                  "builds, when present)");
  app->add_flag("--no-peer", a->no_peer, "skip the llama.cpp peer");
  app->add_option("--peer-model", a->peer_model,
                  "GGUF for the peer (default: the model's .BF16.gguf sibling if present, else the "
                  "model)")
      ->check(CLI::ExistingFile);
  app->add_option("--peer-npl", a->peer_npl, "the peer's parallel sequence counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app->add_option("--peer-fa", a->peer_fa, "the peer's flash attention: on, off or both")
      ->check(CLI::IsMember({"on", "off", "both"}));
  app->add_option("--dram-mb", a->dram_mb,
                  "MiB read by the DRAM bandwidth measurement (far above the LLC)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  return [a] { return RunRollout(*a); };
}

}  // namespace

LAMINAR_REGISTER_BENCH("rollout", "the rollout engine on a GRPO load vs llama-batched-bench",
                       SetupRollout);

}  // namespace laminar::cli
