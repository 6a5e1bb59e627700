// `laminar bench gemm`: every weight format's decode-shape matmuls next to oneDNN s8 / bf16
// (bench/gemm_bench.h).
#include <cstdio>
#include <memory>
#include <vector>

#include "bench/gemm_bench.h"
#include "bench/hw_limits.h"
#include "cli/bench/bench_command.h"

namespace laminar::cli {
namespace {

struct GemmArgs {
  std::vector<int64_t> batches = {1, 8, 32, 64};  // the M rows
  int64_t dram_mb = 1024;                         // buffer of the DRAM bandwidth measurement
};

std::function<int()> SetupGemm(CLI::App* app) {
  auto a = std::make_shared<GemmArgs>();
  app->add_option("--batch", a->batches, "the matmuls' M rows")->check(CLI::Range(1, 4096));
  app->add_option("--dram-mb", a->dram_mb,
                  "MiB read by the DRAM bandwidth measurement (far above the LLC)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  return [a] {
    const double bw = bench::MeasureDramReadBandwidth(a->dram_mb << 20);
    auto out = bench::BenchGemm(bench::SmolLM2GemmShapes(), a->batches, bw);
    if (!out.ok()) return BenchFail(out.status());
    std::printf("%s\n", out->dump(2).c_str());
    return 0;
  };
}

}  // namespace

LAMINAR_REGISTER_BENCH("gemm", "every weight format's matmuls vs oneDNN s8/bf16", SetupGemm);

}  // namespace laminar::cli
