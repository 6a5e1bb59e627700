// `laminar bench rollout`: generated tokens/s of the rollout engine on a GRPO-shaped load
// (P prompts x n samples, every sample running to max_tokens) and for batch-1 decode, KV bytes per
// token and the fraction of measured DRAM bandwidth; and the peer measured in the same run,
// llama.cpp's llama-batched-bench (its -pps mode: one prompt prefilled, shared by npl sequences).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/llama_model.h"
#include "rollout/engine/rollout_engine.h"

namespace laminar::bench {

// The generation load. Sampling has no stop ids or strings, so every sample generates exactly
// max_tokens tokens (EOS does not end it): the same work as llama-batched-bench's -ntg.
struct RolloutLoad {
  int32_t num_prompts = 16;
  int32_t n = 8;             // samples per prompt (one GRPO group)
  int64_t prompt_len = 128;  // tokens per prompt
  int32_t max_tokens = 256;  // tokens generated per sample
  float temperature = 1.0f;
  uint64_t seed = 0;  // prompt ids and sampling; request r samples with seed + r
  int64_t num_samples() const { return int64_t{num_prompts} * n; }
  // InvalidArgument naming the field unless every count is >= 1 and temperature >= 0.
  Status Validate() const;
};

// `load.num_prompts` prompts of exactly `load.prompt_len` ids, pseudo-random in [0, vocab_size)
// from xoshiro256** seeded with load.seed (the same for every run with the same load).
std::vector<std::vector<int32_t>> BenchPrompts(const RolloutLoad& load, int64_t vocab_size);

// KV blocks of `block_size` (> 0) tokens with which `load` runs without preemption: each sample
// holding its whole sequence (prompt_len + max_tokens - 1 positions, the last token needs no slot)
// in blocks of its own, as if no prompt block were shared.
int64_t BlocksForLoad(const RolloutLoad& load, int32_t block_size);

// Logical bytes of K and V the decode steps of one sample read: the decode step that feeds
// generated token s (s = 1 .. max_tokens - 1) attends over prompt_len + s positions. Prefill
// attention (compute-bound) and re-prefill after preemption are not counted.
double DecodeKvBytesPerSample(const RolloutLoad& load, double kv_bytes_per_token);

// One timed run of a load through an engine.
struct RolloutRun {
  int64_t num_samples = 0;
  int64_t generated_tokens = 0;  // summed over samples (num_samples x max_tokens when checked)
  int64_t steps = 0;             // engine steps
  double wall_s = 0;             // from the first Add to the last finished sample
  double tokens_per_s = 0;       // generated_tokens / wall_s
  double median_step_s = 0;      // median engine step
  int64_t preemptions = 0;
  // Most KV blocks in use after any step (the blocks of samples that finished in that step are
  // already freed, so a run whose samples all finish in one step shows 0).
  int32_t peak_kv_blocks_used = 0;
};

// Runs `load` (one request of n samples per prompt of BenchPrompts(load, vocab_size)) to
// completion on `engine`, which must be idle and run a model of `vocab_size` tokens, timing each
// Step. Errors: InvalidArgument for a bad load; the engine's (Add, Step); Internal when a sample
// did not finish by length with exactly max_tokens tokens (the load's correctness check).
StatusOr<RolloutRun> RunLoad(rollout::RolloutEngine& engine, const RolloutLoad& load,
                             int64_t vocab_size);

struct RolloutBenchResult {
  RolloutRun grpo;     // the whole load
  RolloutRun prefill;  // the same load with max_tokens 1: prompts prefilled, first tokens sampled
  // grpo.wall_s - prefill.wall_s, and num_samples x (max_tokens - 1) tokens over it: the decode
  // phase, comparable to llama-batched-bench's S_TG (which excludes its prompt phase).
  double decode_s = 0;
  double decode_tokens_per_s = 0;
  RolloutRun batch1;                      // one request of the first prompt, n = 1
  double batch1_decode_tokens_per_s = 0;  // 1 / batch1.median_step_s
  double kv_bytes_per_token = 0;          // 2 x L x Hkv x D x bytes per cache element
  double weight_bytes_per_step = 0;       // LlamaModel::projection_bytes(), in its weight format
  // (steps x weight_bytes_per_step + decode KV bytes) / wall_s / dram_bytes_per_s, per run.
  double grpo_dram_fraction = 0;
  double batch1_dram_fraction = 0;
};

// Creates one engine with `config` (its scheduler's max_num_seqs and token budget, block size and
// count) and runs, in order: a warm-up (the load with max_tokens 2, untimed), the prefill-only
// load, `load`, and batch 1.
// `dram_bytes_per_s` > 0 from MeasureDramReadBandwidth. Errors: the config's, RunLoad's.
StatusOr<RolloutBenchResult> BenchRollout(const engine::LlamaModel& model, const RolloutLoad& load,
                                          const rollout::RolloutEngineConfig& config,
                                          double dram_bytes_per_s);

// ---- the llama.cpp peer ----

// One row of llama-batched-bench's output (its --output-format jsonl line).
struct BatchedBenchRow {
  int64_t pp = 0;   // prompt tokens
  int64_t tg = 0;   // generated tokens per sequence
  int64_t npl = 0;  // parallel sequences
  bool flash_attn = false;
  double t_pp_s = 0, pp_tokens_per_s = 0;  // prompt phase (with -pps, one shared prompt)
  double t_tg_s = 0, tg_tokens_per_s = 0;  // S_TG: npl x tg / t_tg
};

// Parses one jsonl line ({"pp": .., "tg": .., "pl": .., "flash_attn": .., "t_pp": ..,
// "speed_pp": .., "t_tg": .., "speed_tg": ..}). InvalidArgument quoting the line when it is not
// such an object.
StatusOr<BatchedBenchRow> ParseBatchedBenchLine(std::string_view line);

struct LlamaCppPeerConfig {
  std::string bin_dir;  // holds llama-batched-bench
  std::string model;    // GGUF file
  int64_t prompt_len = 128;
  int64_t max_tokens = 256;
  std::vector<int64_t> npl = {8, 32, 64};
  int threads = 1;
  bool flash_attn = true;
  int timeout_s = 3600;  // for the whole peer run
};

// Runs `llama-batched-bench -m model -npp prompt_len -ntg max_tokens -npl <npl> -pps -t threads
// -fa on|off -c <max npl x (prompt_len + max_tokens)> --output-format jsonl` (the context is sized
// so that no row is skipped) and returns its rows in npl order. Its stderr goes to a temporary log,
// removed on return. Errors: Unavailable when the binary cannot start; Internal naming the exit
// code and quoting the log's tail when it fails or a requested npl has no row; DeadlineExceeded
// after timeout_s (the child is killed).
StatusOr<std::vector<BatchedBenchRow>> RunLlamaCppBatchedBench(const LlamaCppPeerConfig& config);

// $LAMINAR_PEERS/llama.cpp/build/bin, else $HOME/.cache/laminar/peers/llama.cpp/build/bin (where
// bench/setup_llamacpp.sh builds it).
std::string DefaultLlamaCppBinDir();

// The GGUF the peer runs for our `model_path`: its BF16 sibling "<stem>.BF16.gguf" (stem: the file
// name up to its quantization suffix, "X.Q4_1.gguf" -> "X.BF16.gguf", which bench/setup_llamacpp.sh
// writes) when that file exists, else `model_path` itself when it is a GGUF, else "".
std::string PeerModelFor(const std::string& model_path);

}  // namespace laminar::bench
