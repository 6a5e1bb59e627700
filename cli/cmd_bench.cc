// `laminar bench hw|decode|prefill`: throughput with JSON output, reported against measured
// hardware limits (bench/hw_limits.h).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/hw_limits.h"
#include "bench/model_bench.h"
#include "cli/command.h"
#include "engine/llama_model.h"
#include "kernels/cpu/cpu_features.h"
#include "model/checkpoint.h"
#include "model/model_path.h"

namespace laminar::cli {
namespace {

struct BenchArgs {
  std::string what = "hw";
  std::string model = "smollm2-135m-instruct";
  std::vector<int64_t> batches = {1, 8, 32, 64};
  int64_t steps = 16;
  int64_t prompt_tokens = 512;
  int repeats = 3;
  std::string weights = "f32";
};

int RunBench(const BenchArgs& a) {
  nlohmann::json out;
  out["isa"] = kernels::cpu::IsaName(kernels::cpu::BestIsa());
  double bw = bench::MeasureDramReadBandwidth();
  double gemm = bench::MeasureGemmPeakF32();
  out["dram_read_gb_per_s"] = bw / 1e9;
  out["gemm_f32_gflop_per_s"] = gemm / 1e9;
  if (a.what != "hw") {
    auto path = model::ResolveModelPath(a.model);
    if (!path.ok()) {
      std::fprintf(stderr, "laminar bench: %s\n", path.status().ToString().c_str());
      return 1;
    }
    auto ckpt = model::LoadCheckpoint(*path);
    if (!ckpt.ok()) {
      std::fprintf(stderr, "laminar bench: %s\n", ckpt.status().ToString().c_str());
      return 1;
    }
    DType wdtype = a.weights == "bf16" ? DType::kBF16 : DType::kF32;
    auto lm =
        engine::LlamaModel::Create(ckpt->config, ckpt->weights, engine::Backend::kCpu, wdtype);
    if (!lm.ok()) {
      std::fprintf(stderr, "laminar bench: %s\n", lm.status().ToString().c_str());
      return 1;
    }
    out["model"] = a.model;
    out["weights_dtype"] = a.weights;
    double step_bytes = bench::WeightBytesPerStep(ckpt->config, wdtype == DType::kBF16 ? 2.0 : 4.0);
    nlohmann::json rows = nlohmann::json::array();
    if (a.what == "decode") {
      for (int64_t b : a.batches) {
        auto r = bench::BenchDecode(**lm, b, a.steps);
        double frac = step_bytes / r.median_s / bw;
        rows.push_back({{"batch", b},
                        {"tokens_per_s", r.tokens_per_s},
                        {"median_step_s", r.median_s},
                        {"spread_s", r.spread_s},
                        {"dram_fraction", frac}});
        std::fprintf(stderr, "decode batch %3lld: %8.1f tok/s  (%.0f%% of DRAM bandwidth)\n",
                     static_cast<long long>(b), r.tokens_per_s, 100 * frac);
      }
    } else {
      auto r = bench::BenchPrefill(**lm, a.prompt_tokens, a.repeats);
      double flops = 2.0 * bench::MatmulParams(ckpt->config) * double(r.tokens) / r.median_s;
      rows.push_back({{"prompt_tokens", a.prompt_tokens},
                      {"tokens_per_s", r.tokens_per_s},
                      {"median_s", r.median_s},
                      {"spread_s", r.spread_s},
                      {"gemm_peak_fraction", flops / gemm}});
      std::fprintf(stderr, "prefill %lld tokens: %8.1f tok/s  (%.0f%% of GEMM peak)\n",
                   static_cast<long long>(a.prompt_tokens), r.tokens_per_s, 100 * flops / gemm);
    }
    out[a.what] = rows;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::function<int()> SetupBench(CLI::App* app) {
  auto a = std::make_shared<BenchArgs>();
  app->add_option("what", a->what, "hw (limits only), decode or prefill")
      ->check(CLI::IsMember({"hw", "decode", "prefill"}));
  app->add_option("--model", a->model, "checkpoint path or model name");
  app->add_option("--batch", a->batches, "decode batch sizes")->check(CLI::Range(1, 4096));
  app->add_option("--steps", a->steps, "decode steps timed per batch size")
      ->check(CLI::Range(1, 100000));
  app->add_option("--prompt-tokens", a->prompt_tokens, "prefill length")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--repeats", a->repeats, "prefill repetitions")->check(CLI::Range(1, 1000));
  app->add_option("--weights", a->weights, "projection weights in f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}));
  return [a] { return RunBench(*a); };
}
LAMINAR_REGISTER_COMMAND("bench", "benchmarks with JSON output: hw, decode, prefill", SetupBench);

}  // namespace
}  // namespace laminar::cli
