// `laminar bench hw`: the measured hardware limits other benchmarks are reported against.
#include <cstdio>

#include "bench/hw_limits.h"
#include "cli/command.h"
#include "kernels/cpu/cpu_features.h"

namespace laminar::cli {
namespace {

std::function<int()> SetupBench(CLI::App* app) {
  auto what = std::make_shared<std::string>("hw");
  app->add_option("what", *what, "hw: DRAM bandwidth and GEMM peak")->check(CLI::IsMember({"hw"}));
  return [what] {
    double bw = bench::MeasureDramReadBandwidth();
    double gemm = bench::MeasureGemmPeakF32();
    std::printf("{\"isa\": \"%s\", \"dram_read_gb_per_s\": %.2f, \"gemm_f32_gflop_per_s\": %.1f}\n",
                kernels::cpu::IsaName(kernels::cpu::BestIsa()).c_str(), bw / 1e9, gemm / 1e9);
    return 0;
  };
}
LAMINAR_REGISTER_COMMAND("bench", "benchmarks with JSON output (hw)", SetupBench);

}  // namespace
}  // namespace laminar::cli
