// Times LlamaGraph<float> forward + backward on a packed batch.
#include "bench/train_bench.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "bench/model_bench.h"
#include "core/process.h"
#include "trainer/llama_graph.h"
#include "trainer/parameters.h"

namespace laminar::bench {

StatusOr<TrainBenchResult> BenchTrain(const model::ModelConfig& config,
                                      const model::WeightStore& weights,
                                      const TrainBenchConfig& bench) {
  LAMINAR_ASSIGN_OR_RETURN(trainer::ParameterSet params,
                           trainer::ParameterSet::FromWeights(config, weights));
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  ThreadPool pool(std::max(1, threads - 1));
  trainer::GraphOptions options;
  options.bf16_compute = bench.bf16_compute;
  options.recompute_activations = bench.recompute;
  trainer::LlamaGraph<float> graph(config, params.params(), options, &pool);
  trainer::TrainBatch batch;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(config.vocab_size - 1));
  for (int64_t s = 0; s < bench.num_seqs; ++s) {
    batch.seq_offsets.push_back(static_cast<int64_t>(batch.tokens.size()));
    for (int64_t i = 0; i < bench.seq_len; ++i) batch.tokens.push_back(id(rng));
    for (int64_t i = 0; i + 1 < bench.seq_len; ++i) {
      batch.targets.push_back(batch.tokens[batch.tokens.size() - bench.seq_len + i + 1]);
    }
    batch.targets.push_back(-1);
  }
  batch.seq_offsets.push_back(static_cast<int64_t>(batch.tokens.size()));
  const int64_t t = batch.num_tokens();
  std::vector<float> lp, ent, g_lp(static_cast<size_t>(t), -1.f / static_cast<float>(t));
  TrainBenchResult r;
  r.tokens = t;
  std::vector<double> times;
  for (int rep = 0; rep <= bench.repeats; ++rep) {
    auto start = std::chrono::steady_clock::now();
    LAMINAR_RETURN_IF_ERROR(graph.Forward(batch, params.values(), &lp, &ent));
    r.activation_bytes = graph.activation_bytes();
    LAMINAR_RETURN_IF_ERROR(graph.Backward(g_lp, {}, params.grads()));
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep > 0) times.push_back(s);  // the first is a warm-up
  }
  std::sort(times.begin(), times.end());
  r.median_s = times[times.size() / 2];
  r.spread_s = times.back() - times.front();
  r.tokens_per_s = static_cast<double>(t) / r.median_s;
  // 6 FLOPs per parameter per token for the projections and head; attention's QKᵀ and PV cost
  // 2 · 2 · S · D · H per token forward (S the mean causal prefix), three times with backward.
  const double attention =
      3.0 * 4.0 * (static_cast<double>(bench.seq_len) / 2) *
      static_cast<double>(config.head_dim * config.num_attention_heads * config.num_hidden_layers);
  r.model_flop_per_s =
      (6.0 * MatmulParams(config) + attention) * static_cast<double>(t) / r.median_s;
  return r;
}

StatusOr<double> RunTorchTrainPeer(const std::string& python, const model::ModelConfig& config,
                                   const TrainBenchConfig& bench) {
  nlohmann::json dims = {{"vocab_size", config.vocab_size},
                         {"hidden_size", config.hidden_size},
                         {"intermediate_size", config.intermediate_size},
                         {"num_hidden_layers", config.num_hidden_layers},
                         {"num_attention_heads", config.num_attention_heads},
                         {"num_key_value_heads", config.num_key_value_heads},
                         {"head_dim", config.head_dim},
                         {"max_position_embeddings", config.max_position_embeddings},
                         {"rms_norm_eps", config.rms_norm_eps},
                         {"rope_theta", config.rope_theta},
                         {"tie_word_embeddings", config.tie_word_embeddings},
                         {"attention_bias", config.attention_bias}};
  const std::string script = std::string(LAMINAR_SOURCE_DIR) + "/bench/train_torch.py";
  LAMINAR_ASSIGN_OR_RETURN(
      Process proc,
      Process::Spawn({python, script, "--config", dims.dump(), "--seq-len",
                      std::to_string(bench.seq_len), "--seqs", std::to_string(bench.num_seqs),
                      "--dtype", bench.bf16_compute ? "bf16" : "f32", "--repeats",
                      std::to_string(bench.repeats), "--threads",
                      std::to_string(std::thread::hardware_concurrency())}));
  auto line = proc.ReadLine(30 * 60 * 1000);
  auto code = proc.Wait(10000);
  if (!line.ok()) {
    return InternalError(script + " printed no result (exit " +
                         (code.ok() ? std::to_string(*code) : std::string("unknown")) +
                         "): " + line.status().message());
  }
  try {
    return nlohmann::json::parse(*line).at("tokens_per_s").get<double>();
  } catch (const nlohmann::json::exception& e) {
    return InternalError(script + " printed '" + *line + "', not its JSON result: " + e.what());
  }
}

}  // namespace laminar::bench
