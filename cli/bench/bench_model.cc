// `laminar bench hw|decode|prefill`: the machine's measured limits (DRAM read bandwidth, oneDNN's
// GEMM peak), and the model's decode and prefill against them (bench/hw_limits.h,
// bench/model_bench.h).
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/hw_limits.h"
#include "bench/model_bench.h"
#include "cli/bench/bench_command.h"
#include "engine/llama_model.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/cpu_features.h"
#include "model/checkpoint.h"
#include "model/model_path.h"

namespace laminar::cli {
namespace {

struct ModelBenchArgs {
  std::string what;  // hw, decode or prefill
  std::string model = "smollm2-135m-instruct";
  std::string weights = "f32";                    // engine::WeightFormat name
  std::vector<int64_t> batches = {1, 8, 32, 64};  // decode
  int64_t steps = 16;                             // decode
  int64_t prompt_tokens = 512;                    // prefill
  int repeats = 3;                                // prefill
};

// Decode at each batch size: tokens/s and the weights read per token against DRAM bandwidth `bw`
// (a fraction above 1 means some stayed cached between tokens).
nlohmann::json DecodeRows(const ModelBenchArgs& a, const engine::LlamaModel& lm, double bw,
                          nlohmann::json* out) {
  const double step_bytes = static_cast<double>(lm.projection_bytes());
  (*out)["weight_bytes_per_token"] = step_bytes;
  (*out)["last_level_cache_bytes"] = bench::LastLevelCacheBytes();
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t b : a.batches) {
    auto r = bench::BenchDecode(lm, b, a.steps);
    double frac = step_bytes / r.median_s / bw;
    rows.push_back({{"batch", b},
                    {"tokens_per_s", r.tokens_per_s},
                    {"median_step_s", r.median_s},
                    {"spread_s", r.spread_s},
                    {"dram_fraction", frac}});
    std::fprintf(stderr, "decode batch %3lld: %8.1f tok/s  (%.0f%% of DRAM bandwidth)\n",
                 static_cast<long long>(b), r.tokens_per_s, 100 * frac);
  }
  return rows;
}

// Prefill of a.prompt_tokens against the GEMM peak `gemm` (bf16 weights: oneDNN's bf16 peak where
// the CPU has bf16 dot products; gemm_peak_dtype says which).
nlohmann::json PrefillRows(const ModelBenchArgs& a, const engine::LlamaModel& lm,
                           const model::ModelConfig& config, double gemm, nlohmann::json* out) {
  auto r = bench::BenchPrefill(lm, a.prompt_tokens, a.repeats);
  double flops = 2.0 * bench::MatmulParams(config) * double(r.tokens) / r.median_s;
  double peak = gemm;
  std::string peak_dtype = "f32";
  if (a.weights == "bf16" && kernels::cpu::HasBF16Dot()) {  // else bf16 weights widen to f32
    if (const double bf16 = bench::MeasureGemmPeakBF16(); bf16 > 0) {
      peak = bf16;
      peak_dtype = "bf16";
      (*out)["gemm_bf16_gflop_per_s"] = bf16 / 1e9;
    }
  }
  std::fprintf(stderr, "prefill %lld tokens: %8.1f tok/s  (%.0f%% of the %s GEMM peak)\n",
               static_cast<long long>(a.prompt_tokens), r.tokens_per_s, 100 * flops / peak,
               peak_dtype.c_str());
  return nlohmann::json::array({{{"prompt_tokens", a.prompt_tokens},
                                 {"tokens_per_s", r.tokens_per_s},
                                 {"median_s", r.median_s},
                                 {"spread_s", r.spread_s},
                                 {"gemm_peak_fraction", flops / peak},
                                 {"gemm_peak_dtype", peak_dtype}}});
}

int RunModelBench(const ModelBenchArgs& a) {
  nlohmann::json out;
  out["isa"] = kernels::cpu::IsaName(kernels::cpu::BestIsa());
  const double bw = bench::MeasureDramReadBandwidth();
  const double gemm = bench::MeasureGemmPeakF32();
  out["dram_read_gb_per_s"] = bw / 1e9;
  out["gemm_f32_gflop_per_s"] = gemm / 1e9;
  if (a.what != "hw") {
    auto path = model::ResolveModelPath(a.model);
    if (!path.ok()) return BenchFail(path.status());
    auto ckpt = model::LoadCheckpoint(*path);
    if (!ckpt.ok()) return BenchFail(ckpt.status());
    if (a.what == "prefill" && a.prompt_tokens > ckpt->config.max_position_embeddings) {
      return CommandFail("bench",
                         "--prompt-tokens " + std::to_string(a.prompt_tokens) +
                             " is longer than the model's context of " +
                             std::to_string(ckpt->config.max_position_embeddings) + " positions",
                         2);
    }
    auto lm = engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu,
                                         *engine::ParseWeightFormat(a.weights));
    if (!lm.ok()) return BenchFail(lm.status());
    out["model"] = a.model;
    out["weights_dtype"] = a.weights;
    out[a.what] = a.what == "decode" ? DecodeRows(a, **lm, bw, &out)
                                     : PrefillRows(a, **lm, ckpt->config, gemm, &out);
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// The options of decode and prefill (hw has none).
std::shared_ptr<ModelBenchArgs> AddModelBenchOptions(CLI::App* app, const std::string& what) {
  auto a = std::make_shared<ModelBenchArgs>();
  a->what = what;
  if (what == "hw") return a;
  AddModelOption(app, &a->model);
  app->add_option("--weights", a->weights, std::string(engine::kWeightFormatHelp))
      ->check(CLI::IsMember(engine::WeightFormatNames()));
  if (what == "decode") {
    app->add_option("--batch", a->batches, "decode batch sizes")->check(CLI::Range(1, 4096));
    app->add_option("--steps", a->steps, "decode steps timed per batch size")
        ->check(CLI::Range(1, 100000));
  } else {
    app->add_option("--prompt-tokens", a->prompt_tokens, "prefill length")
        ->check(CLI::Range(1, 1 << 20));
    app->add_option("--repeats", a->repeats, "prefill repetitions")->check(CLI::Range(1, 1000));
  }
  return a;
}

template <const char* kWhat>
std::function<int()> Setup(CLI::App* app) {
  auto a = AddModelBenchOptions(app, kWhat);
  return [a] { return RunModelBench(*a); };
}

constexpr char kHw[] = "hw", kDecode[] = "decode", kPrefill[] = "prefill";

}  // namespace

LAMINAR_REGISTER_BENCH(kHw, "the machine's limits: DRAM read bandwidth and oneDNN's f32 GEMM peak",
                       Setup<kHw>);
LAMINAR_REGISTER_BENCH(kDecode, "decode tokens/s per batch size vs the DRAM bandwidth",
                       Setup<kDecode>);
LAMINAR_REGISTER_BENCH(kPrefill, "prefill tokens/s vs the GEMM peak", Setup<kPrefill>);

}  // namespace laminar::cli
