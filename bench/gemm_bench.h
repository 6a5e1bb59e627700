// `laminar bench gemm`: the decode-shape matmuls of every weight format (f32, bf16, w8a8, w4a8,
// GGUF q4_1 and q8_0) next to oneDNN's s8 and bf16 matmuls measured in the same run, in GOP/s and,
// for M = 1, as a fraction of the measured DRAM read bandwidth (weight bytes per second).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace laminar::bench {

struct GemmShape {
  std::string name;  // "q_proj", "lm_head", ...
  int64_t n = 0, k = 0;
};

// The projections of SmolLM2-135M (q/o 576x576, k/v 192x576, gate/up 1536x576, down 576x1536) and
// its 49152-row output head.
std::vector<GemmShape> SmolLM2GemmShapes();

// For each shape and each M in `ms`: every format's seconds per call (best of 3 rounds of at
// least `min_seconds`, activation quantization included), GOP/s (2·M·N·K per call) and, at M = 1,
// weight bytes per second over `dram_bytes_per_s`. Weights cycle through enough copies (>= 96 MiB
// per format) that M = 1 reads them from DRAM, not the cache. A oneDNN peer that this CPU cannot
// create is reported with its error instead of numbers. Runs on `num_threads` (0: all) threads.
StatusOr<nlohmann::json> BenchGemm(const std::vector<GemmShape>& shapes,
                                   const std::vector<int64_t>& ms, double dram_bytes_per_s,
                                   double min_seconds = 0.2, int num_threads = 0);

}  // namespace laminar::bench
