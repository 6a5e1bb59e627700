// Training throughput of the trainer's graph (`laminar bench train`): forward and backward of a
// packed batch, reported as tokens/s and as a fraction of oneDNN's measured f32 GEMM peak
// (training costs about 6 × parameters FLOPs per token, plus attention).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace laminar::bench {

struct TrainBenchConfig {
  int64_t seq_len = 512;
  int64_t num_seqs = 8;
  bool bf16_compute = false;
  bool recompute = false;
  int repeats = 3;
};

struct TrainBenchResult {
  int64_t tokens = 0;   // per step
  double median_s = 0;  // forward + backward, median over repeats (after one warm-up)
  double spread_s = 0;
  double tokens_per_s = 0;
  double model_flop_per_s = 0;  // (6 · params per token + attention) · tokens / median_s
  size_t activation_bytes = 0;
};

// Random token ids (fixed seed), every position with a next-token target, as in language-model
// training; gradients of the mean logprob.
StatusOr<TrainBenchResult> BenchTrain(const model::ModelConfig& config,
                                      const model::WeightStore& weights,
                                      const TrainBenchConfig& bench);

// Runs bench/train_torch.py with `python` (which must have torch and transformers) on the same
// shape and returns PyTorch's tokens/s. Errors name the script's failure (Internal) or a missing
// JSON line.
StatusOr<double> RunTorchTrainPeer(const std::string& python, const model::ModelConfig& config,
                                   const TrainBenchConfig& bench);

}  // namespace laminar::bench
