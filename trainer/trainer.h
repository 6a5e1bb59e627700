// Trainer: the policy update of one actor rank (docs/architecture.md). Given completed trajectories
// it computes advantages, recomputes pi_old under the current weights, and runs the configured
// mini-batch updates (gradient accumulation over token-budgeted micro-batches, gradients
// all-reduced across data-parallel ranks, AdamW), then bumps the policy version. Also computes
// response logprobs (pi_old, the lr = 0 check), saves/loads checkpoints and exports HF folders.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model_config.h"
#include "model/weight_store.h"
#include "trainer/advantages.h"
#include "trainer/collective.h"
#include "trainer/llama_graph.h"
#include "trainer/losses.h"
#include "trainer/optimizer.h"
#include "trainer/parameters.h"

namespace laminar::trainer {

// One finished trajectory. Its logprob targets are the response tokens; the prompt is context.
struct TrainSample {
  std::vector<int32_t> prompt_ids;       // >= 1 token
  std::vector<int32_t> response_ids;     // may be empty (contributes nothing)
  std::vector<float> behavior_logprobs;  // [response] log mu from the rollout, or empty
  double score = 0;                      // sequence reward
  int64_t group_id = 0;                  // GRPO group (prompt) of the sample
  std::string source;                    // where it came from ("data.jsonl:9"), for errors
};

struct TrainerConfig {
  GraphOptions graph;
  OptimizerConfig optimizer;
  PolicyLossConfig loss;
  AdvantageConfig advantage;
  // Samples per optimizer step on this rank (verl's ppo_mini_batch_size / world size); 0 = all of
  // a step's samples in one update. Every rank must get the same number of mini-batches.
  int64_t mini_batch_size = 0;
  // Tokens per forward/backward (prompt + response, a shared prompt counted once); a longer
  // sample runs alone.
  int64_t micro_batch_tokens = 8192;
  // Consecutive samples with the same prompt (a GRPO group) share one forward and backward of the
  // prompt (llama_graph.h TrainBatch::seq_prefix): the same loss and gradient as packing each
  // sample whole, for a fraction of the prompt tokens' compute.
  bool share_prompts = true;
  int ppo_epochs = 1;
  bool shuffle = false;  // reorder samples before each epoch (seeded; saved in checkpoints)
  uint64_t seed = 1;
  // ZeRO stage of the data-parallel ranks: 0, every rank keeps the whole optimizer state; 1
  // (ZeRO-1, Rajbhandari et al. 2020), each of N ranks keeps the state of 1/N of the parameters
  // and updates only those, and the ranks then broadcast their updated shards to each other. The
  // same update either way; checkpoints hold the whole state (gathered to rank 0), so a run
  // resumes with any N and either stage. No effect on one rank.
  int zero_stage = 0;
};

// Owns the parameters, optimizer, graph and collective. Not thread-safe; one per rank.
class Trainer {
 public:
  // Errors: invalid configs (naming the field), weights that do not fit `model` (naming the
  // tensor). The collective decides the rank; nullptr means a single rank.
  static StatusOr<std::unique_ptr<Trainer>> Create(const model::ModelConfig& model,
                                                   const model::WeightStore& weights,
                                                   const TrainerConfig& config,
                                                   std::unique_ptr<Collective> collective);

  // One global step over this rank's samples. Returns verl-named metrics (actor/pg_loss,
  // actor/pg_clipfrac, actor/ppo_kl, actor/entropy, actor/grad_norm, actor/lr, rollout_corr/kl,
  // rollout_corr/abs_logprob_diff_{mean,max} (|pi_old − mu| per response token, over all ranks),
  // rollout_corr/ppl_ratio (per sequence exp(mean(log mu − log pi_old)), the trainer's perplexity
  // over the rollout's, averaged over sequences), critic/score/mean, critic/rewards/mean (equal to
  // the score: the KL term is in the loss), critic/advantages/{mean,max,min}, response_length/mean,
  // timing_s/{old_log_prob,update_actor}, perf/throughput, actor/skipped_steps). An update whose
  // loss or gradient is not finite is skipped and counted, and the version still advances.
  // Errors: InvalidArgument naming the sample (empty prompt, ids outside the vocabulary,
  // behaviour logprobs of the wrong length), a collective's error.
  StatusOr<std::map<std::string, double>> Step(std::span<const TrainSample> samples);

  // The checks Step makes on samples, without training: a non-empty prompt, ids inside the
  // vocabulary, prompt + response within the model's context, behaviour logprobs for every
  // response token (all samples have them or none) that are finite and <= 0. Errors name the
  // sample's index and source.
  Status ValidateSamples(std::span<const TrainSample> samples) const;

  // Fails unless every rank is at the same global step and version (after a resume, say):
  // FailedPrecondition naming this rank's step.
  Status CheckRanksAgree();

  // Logprobs of each sample's response tokens under the current weights, [B][response].
  StatusOr<std::vector<std::vector<float>>> ResponseLogprobs(std::span<const TrainSample> samples);

  // Rank 0 writes DIR/step_<global_step> (trainer/checkpoint.h; atomic), `user` stored as given;
  // every rank waits for it. Returns the folder.
  StatusOr<std::string> SaveCheckpoint(const std::string& dir, const nlohmann::json& user,
                                       int keep_last = 2);
  // Every rank loads DIR's latest checkpoint: weights, optimizer, step, version, shuffle RNG.
  // Returns the saved `user` JSON. Errors as LoadTrainingCheckpoint (nothing changed on error).
  StatusOr<nlohmann::json> LoadCheckpoint(const std::string& dir);
  // Rank 0 writes a Hugging Face folder of the current policy; every rank waits for it.
  Status ExportHuggingFace(const std::string& dir,
                           const std::map<std::string, std::string>& tokenizer_files, DType dtype,
                           bool overwrite = false);

  int64_t global_step() const { return global_step_; }
  // Updates skipped for a non-finite loss or gradient (actor/skipped_steps), since the run began.
  int64_t skipped_steps() const;
  int64_t policy_version() const { return policy_version_; }
  const ParameterSet& params() const { return params_; }
  const model::ModelConfig& model_config() const { return model_; }
  int rank() const { return collective_->rank(); }
  int world_size() const { return collective_->world_size(); }
  // The ranks' collective, for a caller's own messages between steps (the same ordering rules).
  Collective& collective() { return *collective_; }
  const Collective& collective() const { return *collective_; }

 private:
  // Tokens of a set of samples packed for the graph, with per-token loss inputs.
  // A micro-batch: per-token arrays in the batch's layout; a shared prompt's sequence holds
  // no sample (its tokens have mask 0) and its samples hold the rest of their tokens.
  struct Packed {
    TrainBatch batch;
    std::vector<float> mask, advantages, behavior, old_logprobs, ref_logprobs;
    std::vector<size_t> samples;       // which samples, in order
    std::vector<int64_t> sample_seq;   // [samples]: the batch sequence holding each
    std::vector<int64_t> sample_skip;  // [samples]: its leading tokens held by a shared prompt
  };
  Trainer() = default;
  // Packs samples[idx...] (with the per-sample token arrays in all_) into micro-batches of at
  // most micro_batch_tokens tokens.
  std::vector<Packed> MicroBatches(std::span<const TrainSample> samples,
                                   std::span<const size_t> idx) const;
  // Copies per-token values of a packed batch (its layout) into dst (the step's layout, all_).
  void ScatterToSamples(const Packed& p, std::span<const float> packed,
                        std::vector<float>& dst) const;
  // Logprobs at every position of a packed batch under `values`.
  Status Logprobs(const Packed& p, std::span<const float> values, std::vector<float>* logprobs);
  // One optimizer update on samples[idx...]. `old_from_forward`: the step's only update, whose
  // forward pass also fills pi_old (all_.old_logprobs) before the loss reads it.
  StatusOr<std::map<std::string, double>> Update(std::span<const TrainSample> samples,
                                                 std::span<const size_t> idx,
                                                 bool old_from_forward);
  // --- a step's phases (Step) ---
  // all_'s token layout, loss mask and advantages for `samples`.
  Status LayOutStep(std::span<const TrainSample> samples);
  // pi_old (unless the step's only update computes it: old_from_forward) and pi_ref into all_.
  Status OldLogprobs(std::span<const TrainSample> samples, std::span<const size_t> idx,
                     bool old_from_forward);
  // FailedPrecondition unless every rank runs as many mini-batches, with behaviour logprobs on
  // all ranks or none (a collective).
  Status CheckRanksAgree(size_t num_minibatches, bool with_mu);
  // ppo_epochs passes of mini-batches of `mb` samples (shuffled when configured); each metric is
  // the mean over the updates that report it.
  StatusOr<std::map<std::string, double>> RunUpdates(std::span<const TrainSample> samples,
                                                     std::vector<size_t>& idx, size_t mb,
                                                     bool old_from_forward);
  // rollout_corr/*: the behaviour logprobs against pi_old (a collective).
  Status AddRolloutMismatch(std::span<const TrainSample> samples,
                            std::map<std::string, double>& metrics);
  // critic/* and response_length/mean of the step's batch, over all ranks (collectives).
  Status AddBatchMetrics(std::span<const TrainSample> samples,
                         std::map<std::string, double>& metrics);
  // Each value's maximum over the ranks (a collective; world_size values each).
  StatusOr<std::vector<double>> MaxOverRanks(const std::vector<double>& local);
  // ZeRO-1: the elements [begin, end) of the parameters whose optimizer state rank `r` keeps.
  std::pair<size_t, size_t> ShardOf(int r) const;
  bool sharded() const { return config_.zero_stage == 1 && world_size() > 1; }
  // ZeRO-1, after an applied update: every rank's shard of the values broadcast by its owner.
  Status GatherUpdatedShards();
  // ZeRO-1: an unsharded optimizer holding the whole state (on rank 0; the others take part in
  // the broadcasts and get null), for SaveCheckpoint.
  StatusOr<std::unique_ptr<Optimizer>> GatherOptimizerState();

  model::ModelConfig model_;
  TrainerConfig config_;
  std::unique_ptr<Collective> collective_;
  std::unique_ptr<ThreadPool> pool_;
  ParameterSet params_;
  std::vector<float> ref_values_;  // frozen initial policy, only when kl_coef != 0
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LlamaGraph<float>> graph_;
  std::mt19937_64 rng_;
  int64_t global_step_ = 0;
  int64_t policy_version_ = 0;
  // Per-step token arrays of every sample, indexed by sample: start offset into the arrays below.
  struct StepTokens {
    std::vector<int64_t> start;  // [B+1]
    std::vector<float> mask, advantages, old_logprobs, ref_logprobs;
  } all_;
};

}  // namespace laminar::trainer
