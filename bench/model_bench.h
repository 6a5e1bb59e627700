// Decode and prefill throughput of the forward pass (`laminar bench decode|prefill`), reported
// against measured limits: decode as a fraction of DRAM read bandwidth (weight bytes per step /
// step time), prefill as a fraction of oneDNN's measured f32 GEMM peak (2 x params FLOPs/token).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/llama_model.h"

namespace laminar::bench {

struct ThroughputResult {
  std::string mode;     // "decode" or "prefill"
  int64_t batch = 0;    // sequences
  int64_t tokens = 0;   // tokens processed per timed repetition
  double median_s = 0;  // median time per repetition
  double spread_s = 0;  // max - min over repetitions
  double tokens_per_s = 0;
};

// Decodes `steps` tokens for each of `batch` sequences after a short prompt; times each step.
ThroughputResult BenchDecode(const engine::LlamaModel& model, int64_t batch, int64_t steps);
// Prefills one sequence of `prompt_tokens`, `repeats` times.
ThroughputResult BenchPrefill(const engine::LlamaModel& model, int64_t prompt_tokens, int repeats);

// Parameters touched per token (for FLOP counts): linear layers and the output head.
double MatmulParams(const model::ModelConfig& config);

}  // namespace laminar::bench
