// Trainer: advantages, pi_old, mini-batch updates with gradient accumulation and all-reduce.
#include "trainer/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <thread>

#include "core/logging.h"
#include "trainer/checkpoint.h"

namespace laminar::trainer {
namespace {

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

constexpr const char* kShuffleRng = "shuffle";

}  // namespace

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const model::ModelConfig& model,
                                                   const model::WeightStore& weights,
                                                   const TrainerConfig& config,
                                                   std::unique_ptr<Collective> collective) {
  LAMINAR_RETURN_IF_ERROR(config.optimizer.Validate(), "trainer.optimizer");
  LAMINAR_RETURN_IF_ERROR(ValidatePolicyLossConfig(config.loss), "trainer.loss");
  LAMINAR_RETURN_IF_ERROR(FindAdvantageEstimator(config.advantage.estimator).status(),
                          "trainer.advantage");
  if (config.advantage.estimator == "gae") {
    return InvalidArgumentError(
        "trainer.advantage: gae needs a critic's values, and the trainer has no value head yet");
  }
  if (config.micro_batch_tokens <= 0) {
    return InvalidArgumentError("trainer.micro_batch_tokens must be positive, got " +
                                std::to_string(config.micro_batch_tokens));
  }
  if (config.mini_batch_size < 0) {
    return InvalidArgumentError("trainer.mini_batch_size must be >= 0 (0 = the whole step)");
  }
  if (config.ppo_epochs < 1) {
    return InvalidArgumentError("trainer.ppo_epochs must be >= 1, got " +
                                std::to_string(config.ppo_epochs));
  }
  if (config.zero_stage != 0 && config.zero_stage != 1) {
    return InvalidArgumentError("trainer.zero_stage must be 0 or 1, got " +
                                std::to_string(config.zero_stage));
  }
  std::unique_ptr<Trainer> t(new Trainer());
  t->model_ = model;
  t->config_ = config;
  t->collective_ = collective ? std::move(collective) : std::make_unique<LocalCollective>();
  LAMINAR_ASSIGN_OR_RETURN(t->params_, ParameterSet::FromWeights(model, weights));
  const int threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads > 1) t->pool_ = std::make_unique<ThreadPool>(threads - 1);
  // ZeRO-1: the rank's shard of the state, never the whole of it.
  const auto [shard_begin, shard_end] =
      t->sharded() ? t->ShardOf(t->rank()) : std::pair<size_t, size_t>(0, SIZE_MAX);
  LAMINAR_ASSIGN_OR_RETURN(
      t->optimizer_, CreateOptimizer(config.optimizer, t->params_.num_elements(), t->pool_.get(),
                                     shard_begin, shard_end));
  t->graph_ =
      std::make_unique<LlamaGraph<float>>(model, t->params_.params(), config.graph, t->pool_.get());
  t->rng_.seed(config.seed);
  if (config.loss.kl_coef != 0) {
    t->ref_values_.assign(t->params_.values().begin(), t->params_.values().end());
  }
  return t;
}

namespace {

// Whether the step's samples carry behaviour logprobs (any of them; Validate checks all do).
bool HasBehaviorLogprobs(std::span<const TrainSample> samples) {
  for (const auto& s : samples) {
    if (!s.behavior_logprobs.empty()) return true;
  }
  return false;
}

}  // namespace

Status Trainer::ValidateSamples(std::span<const TrainSample> samples) const {
  if (samples.empty()) return InvalidArgumentError("a training step needs at least one sample");
  const bool with_mu = HasBehaviorLogprobs(samples);
  for (size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    const std::string where =
        "sample " + std::to_string(i) + (s.source.empty() ? "" : " (" + s.source + ")");
    if (s.prompt_ids.empty()) return InvalidArgumentError(where + ": empty prompt");
    for (const auto* ids : {&s.prompt_ids, &s.response_ids}) {
      for (int32_t id : *ids) {
        if (id < 0 || id >= model_.vocab_size) {
          return InvalidArgumentError(where + ": token id " + std::to_string(id) +
                                      " outside the vocabulary of " +
                                      std::to_string(model_.vocab_size));
        }
      }
    }
    const size_t len = s.prompt_ids.size() + s.response_ids.size();
    if (model_.max_position_embeddings > 0 &&
        len > static_cast<size_t>(model_.max_position_embeddings)) {
      return InvalidArgumentError(where + " has " + std::to_string(len) +
                                  " tokens, beyond the model's context of " +
                                  std::to_string(model_.max_position_embeddings));
    }
    if (with_mu && s.behavior_logprobs.size() != s.response_ids.size()) {
      return InvalidArgumentError(where + " has " + std::to_string(s.behavior_logprobs.size()) +
                                  " behaviour logprobs for " +
                                  std::to_string(s.response_ids.size()) +
                                  " response tokens (every sample of a step has them, or none)");
    }
    for (float lp : s.behavior_logprobs) {
      if (!std::isfinite(lp) || lp > 1e-4f) {
        return InvalidArgumentError(where + ": behaviour logprob " + std::to_string(lp) +
                                    " is not a log-probability (finite, <= 0)");
      }
    }
  }
  return OkStatus();
}

Status Trainer::CheckRanksAgree() {
  // All W values are equal exactly when (Σx)² = W·Σx², so every rank reaches the same verdict.
  const double step = static_cast<double>(global_step_);
  const double version = static_cast<double>(policy_version_);
  std::vector<double> v{step, step * step, version, version * version};
  LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<double>(v)));
  const double w = world_size();
  if (v[0] * v[0] != w * v[1] || v[2] * v[2] != w * v[3]) {
    return FailedPreconditionError(
        "data-parallel ranks are at different steps (rank " + std::to_string(rank()) +
        " is at step " + std::to_string(global_step_) + ", the mean is " +
        std::to_string(v[0] / w) + "): every rank must resume from the same checkpoint");
  }
  return OkStatus();
}

// Kept whole: one packing pass (first-fit by tokens, shared prompts placed with their samples)
// whose bookkeeping every branch updates together.
std::vector<Trainer::Packed> Trainer::MicroBatches(std::span<const TrainSample> samples,
                                                   std::span<const size_t> idx) const {
  std::vector<Packed> out;
  const bool with_mu = HasBehaviorLogprobs(samples);
  // Whether `n` more tokens fit the current micro-batch (an empty one takes anything).
  auto fits = [&](int64_t n) {
    return !out.empty() && (out.back().batch.num_tokens() == 0 ||
                            out.back().batch.num_tokens() + n <= config_.micro_batch_tokens);
  };
  auto start_batch = [&] {
    out.emplace_back();
    out.back().batch.seq_offsets.push_back(0);
  };
  // Per-token arrays of the step (all_) for tokens [from, from + n) of sample i, or n zeros
  // (i < 0: a shared prompt, which no loss term reads).
  auto append_arrays = [&](Packed& p, int64_t i, int64_t from, int64_t n) {
    auto append = [&](std::vector<float>& dst, const std::vector<float>& src) {
      if (src.empty()) return;
      if (i < 0) {
        dst.insert(dst.end(), static_cast<size_t>(n), 0.f);
      } else {
        const auto a = src.begin() + all_.start[i] + from;
        dst.insert(dst.end(), a, a + n);
      }
    };
    append(p.mask, all_.mask);
    append(p.advantages, all_.advantages);
    append(p.old_logprobs, all_.old_logprobs);
    append(p.ref_logprobs, all_.ref_logprobs);
  };
  // Sample i's tokens [from, len) as a sequence continuing `prefix` (-1: none).
  auto add_sample = [&](size_t i, int64_t from, int64_t prefix) {
    const auto& s = samples[i];
    Packed& p = out.back();
    auto& b = p.batch;
    const int64_t plen = static_cast<int64_t>(s.prompt_ids.size());
    const int64_t len = plen + static_cast<int64_t>(s.response_ids.size());
    p.samples.push_back(i);
    p.sample_seq.push_back(static_cast<int64_t>(b.seq_offsets.size()) - 1);
    p.sample_skip.push_back(from);
    for (int64_t j = from; j < len; ++j) {
      b.tokens.push_back(j < plen ? s.prompt_ids[j] : s.response_ids[j - plen]);
      const bool target = j >= plen - 1 && j + 1 < len;
      b.targets.push_back(target ? s.response_ids[j + 1 - plen] : -1);
      p.behavior.push_back(with_mu && target ? s.behavior_logprobs[j + 1 - plen] : 0.f);
    }
    b.seq_offsets.push_back(b.num_tokens());
    b.seq_prefix.push_back(prefix);
    append_arrays(p, static_cast<int64_t>(i), from, len - from);
  };
  // The first n prompt tokens of sample i as a shared prefix; returns its sequence index.
  auto add_prefix = [&](size_t i, int64_t n) {
    Packed& p = out.back();
    auto& b = p.batch;
    const auto& prompt = samples[i].prompt_ids;
    b.tokens.insert(b.tokens.end(), prompt.begin(), prompt.begin() + n);
    b.targets.insert(b.targets.end(), static_cast<size_t>(n), -1);
    p.behavior.insert(p.behavior.end(), static_cast<size_t>(n), 0.f);
    b.seq_offsets.push_back(b.num_tokens());
    b.seq_prefix.push_back(-1);
    append_arrays(p, -1, 0, n);
    return static_cast<int64_t>(b.seq_offsets.size()) - 2;
  };
  for (size_t a = 0; a < idx.size();) {
    // A run of samples with one prompt: all but its last token are computed once (the last
    // prompt token predicts each sample's first response token, so each sample keeps it).
    const auto& prompt = samples[idx[a]].prompt_ids;
    size_t e = a + 1;
    while (config_.share_prompts && e < idx.size() && samples[idx[e]].prompt_ids == prompt) ++e;
    const int64_t shared =
        e - a >= 2 && prompt.size() >= 2 ? static_cast<int64_t>(prompt.size()) - 1 : 0;
    int64_t prefix = -1;  // the run's prefix sequence in the current micro-batch
    for (size_t j = a; j < e; ++j) {
      const auto& s = samples[idx[j]];
      const int64_t len = static_cast<int64_t>(s.prompt_ids.size() + s.response_ids.size());
      if (shared == 0) {
        if (!fits(len)) start_batch();
        add_sample(idx[j], 0, -1);
        continue;
      }
      if (prefix >= 0 && !fits(len - shared)) {
        start_batch();  // the rest of the run shares a new copy of the prompt
        prefix = -1;
      }
      if (prefix < 0) {
        if (!fits(len)) start_batch();
        prefix = add_prefix(idx[j], shared);
      }
      add_sample(idx[j], shared, prefix);
    }
    a = e;
  }
  if (!with_mu) {
    for (auto& p : out) p.behavior.clear();
  }
  return out;
}

void Trainer::ScatterToSamples(const Packed& p, std::span<const float> packed,
                               std::vector<float>& dst) const {
  for (size_t k = 0; k < p.samples.size(); ++k) {
    const int64_t seq = p.sample_seq[k];
    const int64_t from = p.batch.seq_offsets[seq], n = p.batch.seq_offsets[seq + 1] - from;
    std::copy_n(packed.begin() + from, n,
                dst.begin() + all_.start[p.samples[k]] + p.sample_skip[k]);
  }
}

Status Trainer::Logprobs(const Packed& p, std::span<const float> values,
                         std::vector<float>* logprobs) {
  std::vector<float> entropy;
  return graph_->Forward(p.batch, values, logprobs, &entropy);
}

StatusOr<std::vector<std::vector<float>>> Trainer::ResponseLogprobs(
    std::span<const TrainSample> samples) {
  LAMINAR_RETURN_IF_ERROR(ValidateSamples(samples));
  all_ = StepTokens{};
  all_.start.push_back(0);
  for (const auto& s : samples) {
    all_.start.push_back(all_.start.back() +
                         static_cast<int64_t>(s.prompt_ids.size() + s.response_ids.size()));
  }
  std::vector<size_t> idx(samples.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<std::vector<float>> out(samples.size());
  std::vector<float> lp;
  for (const Packed& p : MicroBatches(samples, idx)) {
    LAMINAR_RETURN_IF_ERROR(Logprobs(p, params_.values(), &lp));
    for (size_t k = 0; k < p.samples.size(); ++k) {
      const auto& s = samples[p.samples[k]];
      const int64_t off = p.batch.seq_offsets[p.sample_seq[k]] +
                          static_cast<int64_t>(s.prompt_ids.size()) - 1 - p.sample_skip[k];
      out[p.samples[k]].assign(lp.begin() + off, lp.begin() + off + s.response_ids.size());
    }
  }
  return out;
}

// Kept whole: one optimizer update (micro-batches, all-reduce, step) whose metrics every part adds
// to.
StatusOr<std::map<std::string, double>> Trainer::Update(std::span<const TrainSample> samples,
                                                        std::span<const size_t> idx,
                                                        bool old_from_forward) {
  std::vector<Packed> micro = MicroBatches(samples, idx);
  // Global normalizers: masked tokens and sequences with one, over this mini-batch on all ranks.
  std::vector<double> counts(2, 0.0);
  for (const Packed& p : micro) {
    for (size_t k = 0; k + 1 < p.batch.seq_offsets.size(); ++k) {
      double n = 0;
      for (int64_t j = p.batch.seq_offsets[k]; j < p.batch.seq_offsets[k + 1]; ++j) n += p.mask[j];
      counts[0] += n;
      counts[1] += n > 0 ? 1 : 0;
    }
  }
  LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<double>(counts)));
  params_.ZeroGrad();
  std::map<std::string, double> sums;
  double loss = 0;
  std::vector<float> lp, ent;
  const bool entropy_bonus = config_.loss.entropy_coef != 0;
  // A non-finite logprob or entropy (weights that overflowed) makes this rank's loss NaN: every
  // rank still joins the all-reduces below, and the optimizer skips the step everywhere.
  bool finite = true;
  for (Packed& p : micro) {
    if (!finite) break;
    LAMINAR_RETURN_IF_ERROR(graph_->Forward(p.batch, params_.values(), &lp, &ent));
    if (old_from_forward) {
      // The only update of the step runs under the weights the step starts from: its own
      // logprobs are pi_old (the PPO ratio is exactly 1 with the gradient of log pi).
      p.old_logprobs = lp;
      ScatterToSamples(p, lp, all_.old_logprobs);
    }
    for (size_t j = 0; j < lp.size() && finite; ++j) {
      finite = p.mask[j] == 0 || (std::isfinite(lp[j]) && std::isfinite(ent[j]));
    }
    if (!finite) {
      loss = std::numeric_limits<double>::quiet_NaN();
      break;
    }
    PolicyLossInput in;
    in.logprobs = lp;
    in.old_logprobs = p.old_logprobs;
    in.behavior_logprobs = p.behavior;
    in.ref_logprobs = p.ref_logprobs;
    in.entropy = ent;
    in.advantages = p.advantages;
    in.loss_mask = p.mask;
    in.seq_offsets = p.batch.seq_offsets;
    in.global_num_tokens = counts[0];
    in.global_num_sequences = counts[1];
    LAMINAR_ASSIGN_OR_RETURN(PolicyLossOutput out, ComputePolicyLoss(in, config_.loss));
    LAMINAR_RETURN_IF_ERROR(graph_->Backward(
        out.grad_logprobs,
        entropy_bonus ? std::span<const float>(out.grad_entropy) : std::span<const float>(),
        params_.grads()));
    loss += out.loss;
    for (const auto& [k, v] : out.metrics) sums[k] += v;
  }
  // The loss first: when any rank's is not finite every rank skips the rest together.
  std::vector<double> global_loss{loss};
  LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<double>(global_loss)));
  if (std::isfinite(global_loss[0])) {
    // Then the metrics (every rank has the same keys: same config) and the gradients.
    std::vector<double> reduced;
    reduced.reserve(sums.size());
    for (const auto& [k, v] : sums) reduced.push_back(v);
    LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<double>(reduced)));
    size_t i = 0;
    for (auto& [k, v] : sums) v = reduced[i++];
    if (collective_->world_size() > 1) {
      LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(params_.grads()));
    }
  } else {
    sums.clear();
  }
  StepResult step = optimizer_->Step(&params_, global_step_, global_loss[0]);
  if (step.applied && sharded()) LAMINAR_RETURN_IF_ERROR(GatherUpdatedShards());
  if (!step.applied) {
    LAMINAR_LOG(WARN, TRAINER) << "update skipped: the loss (" << global_loss[0]
                               << ") or the gradient norm (" << step.grad_norm
                               << ") is not finite; the weights are unchanged ("
                               << optimizer_->skipped_steps()
                               << " skipped so far, actor/skipped_steps)";
  }
  sums["actor/loss"] = global_loss[0];
  sums["actor/grad_norm"] = step.grad_norm;
  sums["actor/lr"] = step.lr;
  sums["actor/update_applied"] = step.applied ? 1.0 : 0.0;
  return sums;
}

Status Trainer::LayOutStep(std::span<const TrainSample> samples) {
  // Token layout of the whole step: sample i owns [start[i], start[i+1]).
  all_ = StepTokens{};
  all_.start.push_back(0);
  std::vector<float> scores;
  std::vector<int64_t> groups;
  for (const auto& s : samples) {
    const int64_t plen = static_cast<int64_t>(s.prompt_ids.size());
    const int64_t len = plen + static_cast<int64_t>(s.response_ids.size());
    for (int64_t j = 0; j < len; ++j) all_.mask.push_back(j >= plen - 1 && j + 1 < len ? 1.f : 0.f);
    all_.start.push_back(all_.start.back() + len);
    scores.push_back(static_cast<float>(s.score));
    groups.push_back(s.group_id);
  }
  AdvantageInput adv_in;
  adv_in.scores = scores;
  adv_in.group_ids = groups;
  adv_in.loss_mask = all_.mask;
  adv_in.seq_offsets = all_.start;
  LAMINAR_ASSIGN_OR_RETURN(AdvantageOutput adv, ComputeAdvantages(adv_in, config_.advantage));
  all_.advantages = std::move(adv.advantages);
  return OkStatus();
}

Status Trainer::OldLogprobs(std::span<const TrainSample> samples, std::span<const size_t> idx,
                            bool old_from_forward) {
  all_.old_logprobs.assign(all_.mask.size(), 0.f);
  if (!ref_values_.empty()) all_.ref_logprobs.assign(all_.mask.size(), 0.f);
  std::vector<float> lp;
  const bool logprob_pass = !old_from_forward || !ref_values_.empty();
  for (const Packed& p : logprob_pass ? MicroBatches(samples, idx) : std::vector<Packed>()) {
    if (!old_from_forward) {
      LAMINAR_RETURN_IF_ERROR(Logprobs(p, params_.values(), &lp));
      ScatterToSamples(p, lp, all_.old_logprobs);
    }
    if (!ref_values_.empty()) {
      LAMINAR_RETURN_IF_ERROR(Logprobs(p, ref_values_, &lp));
      ScatterToSamples(p, lp, all_.ref_logprobs);
    }
  }
  return OkStatus();
}

Status Trainer::CheckRanksAgree(size_t num_minibatches, bool with_mu) {
  // Every rank must run the same collectives: as many mini-batches, and the same metric keys
  // (which depend on whether the samples carry behaviour logprobs).
  const double mu = with_mu ? 1.0 : 0.0;
  std::vector<double> check{static_cast<double>(num_minibatches), mu};
  LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<double>(check)));
  const double w = world_size();
  if (check[0] != static_cast<double>(num_minibatches) * w) {
    return FailedPreconditionError("ranks have different numbers of mini-batches this step (rank " +
                                   std::to_string(rank()) + " has " +
                                   std::to_string(num_minibatches) + ")");
  }
  if (check[1] != mu * w) {
    return FailedPreconditionError(
        "some ranks' samples carry behaviour logprobs and some do not (rank " +
        std::to_string(rank()) + (with_mu ? " has them)" : " has none)"));
  }
  return OkStatus();
}

StatusOr<std::map<std::string, double>> Trainer::RunUpdates(std::span<const TrainSample> samples,
                                                            std::vector<size_t>& idx, size_t mb,
                                                            bool old_from_forward) {
  const size_t num_minibatches = (samples.size() + mb - 1) / mb;
  // Each metric is the mean over the updates that report it (a skipped update reports only
  // actor/loss, actor/grad_norm, actor/lr and actor/update_applied).
  std::map<std::string, double> metrics;
  std::map<std::string, int> reported;
  for (int epoch = 0; epoch < config_.ppo_epochs; ++epoch) {
    if (config_.shuffle) std::shuffle(idx.begin(), idx.end(), rng_);
    for (size_t m = 0; m < num_minibatches; ++m) {
      std::span<const size_t> part(idx.data() + m * mb, std::min(mb, idx.size() - m * mb));
      LAMINAR_ASSIGN_OR_RETURN(auto mini, Update(samples, part, old_from_forward));
      for (const auto& [k, v] : mini) {
        metrics[k] += v;
        ++reported[k];
      }
    }
  }
  for (auto& [k, v] : metrics) v /= reported[k];
  return metrics;
}

Status Trainer::AddRolloutMismatch(std::span<const TrainSample> samples,
                                   std::map<std::string, double>& metrics) {
  // The rollout-vs-trainer mismatch of the behaviour logprobs under pi_old, over all ranks. diff:
  // {sum |pi_old - mu|, tokens, sum of per-sequence perplexity ratios, sequences}.
  std::vector<double> diff{0.0, 0.0, 0.0, 0.0};
  double diff_max = 0;
  if (HasBehaviorLogprobs(samples)) {
    for (size_t i = 0; i < samples.size(); ++i) {
      const auto& s = samples[i];
      const int64_t first = all_.start[i] + static_cast<int64_t>(s.prompt_ids.size()) - 1;
      double log_ratio = 0;  // sum over the response of log mu - log pi_old
      for (size_t j = 0; j < s.response_ids.size(); ++j) {
        const double old = all_.old_logprobs[first + j];
        const double d = std::abs(old - s.behavior_logprobs[j]);
        diff[0] += d;
        diff[1] += 1;
        diff_max = std::max(diff_max, d);
        log_ratio += s.behavior_logprobs[j] - old;
      }
      if (!s.response_ids.empty()) {
        // The trainer's perplexity over the rollout's: exp(mean(-log pi_old)) / exp(mean(-log mu)).
        diff[2] += std::exp(log_ratio / static_cast<double>(s.response_ids.size()));
        diff[3] += 1;
      }
    }
  }
  LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<double>(diff)));
  LAMINAR_ASSIGN_OR_RETURN(std::vector<double> max, MaxOverRanks({diff_max}));
  if (diff[1] > 0) {
    metrics["rollout_corr/abs_logprob_diff_mean"] = diff[0] / diff[1];
    metrics["rollout_corr/abs_logprob_diff_max"] = max[0];
  }
  if (diff[3] > 0) metrics["rollout_corr/ppl_ratio"] = diff[2] / diff[3];
  return OkStatus();
}

StatusOr<std::vector<double>> Trainer::MaxOverRanks(const std::vector<double>& local) {
  if (world_size() == 1) return local;
  // One slot per rank: the sum of a slot is its rank's value.
  const size_t k = local.size();
  std::vector<double> slots(k * static_cast<size_t>(world_size()), 0.0);
  std::copy(local.begin(), local.end(), slots.begin() + static_cast<std::ptrdiff_t>(k * rank()));
  LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<double>(slots)));
  std::vector<double> out(local.size(), -std::numeric_limits<double>::infinity());
  for (size_t r = 0; r < static_cast<size_t>(world_size()); ++r) {
    for (size_t i = 0; i < k; ++i) out[i] = std::max(out[i], slots[r * k + i]);
  }
  return out;
}

Status Trainer::AddBatchMetrics(std::span<const TrainSample> samples,
                                std::map<std::string, double>& metrics) {
  double adv_sum = 0, adv_max = -1e300, adv_min = 1e300, masked = 0;
  for (size_t j = 0; j < all_.mask.size(); ++j) {
    if (all_.mask[j] == 0) continue;
    adv_sum += all_.advantages[j];
    adv_max = std::max<double>(adv_max, all_.advantages[j]);
    adv_min = std::min<double>(adv_min, all_.advantages[j]);
    masked += 1;
  }
  double score_sum = 0, response_tokens = 0;
  for (const TrainSample& s : samples) {
    score_sum += static_cast<float>(s.score);
    response_tokens += static_cast<double>(s.response_ids.size());
  }
  std::vector<double> sums{adv_sum, masked, score_sum, response_tokens,
                           static_cast<double>(samples.size())};
  LAMINAR_RETURN_IF_ERROR(collective_->AllReduceSum(std::span<double>(sums)));
  LAMINAR_ASSIGN_OR_RETURN(std::vector<double> max, MaxOverRanks({adv_max, -adv_min}));
  masked = sums[1];
  const double n = sums[4];
  metrics["critic/score/mean"] = sums[2] / n;
  // verl's sequence reward after any in-reward KL penalty; the KL term here is in the loss
  // (kl_coef), so it equals the score.
  metrics["critic/rewards/mean"] = metrics["critic/score/mean"];
  metrics["critic/advantages/mean"] = masked > 0 ? sums[0] / masked : 0;
  metrics["critic/advantages/max"] = masked > 0 ? max[0] : 0;
  metrics["critic/advantages/min"] = masked > 0 ? -max[1] : 0;
  metrics["response_length/mean"] = sums[3] / n;
  return OkStatus();
}

StatusOr<std::map<std::string, double>> Trainer::Step(std::span<const TrainSample> samples) {
  LAMINAR_RETURN_IF_ERROR(ValidateSamples(samples));
  const auto step_start = std::chrono::steady_clock::now();
  LAMINAR_RETURN_IF_ERROR(LayOutStep(samples));
  // pi_old (and pi_ref) under the weights this step starts from. With one update per step (one
  // mini-batch, one epoch) that update's forward pass gives pi_old, so no separate pass runs for
  // it (verl recomputes it; the result is the same, a third of the compute is saved).
  const size_t mb =
      config_.mini_batch_size > 0 ? static_cast<size_t>(config_.mini_batch_size) : samples.size();
  const size_t num_minibatches = (samples.size() + mb - 1) / mb;
  const bool old_from_forward = num_minibatches == 1 && config_.ppo_epochs == 1;
  std::vector<size_t> idx(samples.size());
  std::iota(idx.begin(), idx.end(), 0);
  const auto old_start = std::chrono::steady_clock::now();
  LAMINAR_RETURN_IF_ERROR(OldLogprobs(samples, idx, old_from_forward));
  const double old_s = Since(old_start);

  const auto update_start = std::chrono::steady_clock::now();
  LAMINAR_RETURN_IF_ERROR(CheckRanksAgree(num_minibatches, HasBehaviorLogprobs(samples)));
  LAMINAR_ASSIGN_OR_RETURN(auto metrics, RunUpdates(samples, idx, mb, old_from_forward));
  const double update_s = Since(update_start);
  LAMINAR_RETURN_IF_ERROR(AddRolloutMismatch(samples, metrics));
  ++global_step_;
  ++policy_version_;
  LAMINAR_RETURN_IF_ERROR(AddBatchMetrics(samples, metrics));
  metrics["timing_s/old_log_prob"] = old_s;
  metrics["timing_s/update_actor"] = update_s;
  metrics["timing_s/step"] = Since(step_start);
  metrics["perf/throughput"] =
      static_cast<double>(all_.mask.size()) * config_.ppo_epochs / std::max(update_s, 1e-9);
  metrics["actor/skipped_steps"] = static_cast<double>(optimizer_->skipped_steps());
  metrics["actor/activation_bytes"] = static_cast<double>(graph_->activation_bytes());
  // Per rank: the largest shard's optimizer state (all of it without ZeRO-1), and with the f32
  // values and gradients every rank holds, the rank's training state.
  size_t state_elements = params_.num_elements();
  if (sharded()) {
    const auto [begin, end] = ShardOf(world_size() - 1);  // the last shard is the largest
    state_elements = end - begin;
  }
  const double optimizer_bytes =
      static_cast<double>(state_elements * optimizer_->buffer_names().size() * sizeof(float));
  metrics["actor/optimizer_state_bytes"] = optimizer_bytes;
  metrics["actor/rank_state_bytes"] =
      optimizer_bytes + static_cast<double>(2 * params_.num_elements() * sizeof(float));
  metrics["actor/policy_version"] = static_cast<double>(policy_version_);
  return metrics;
}

StatusOr<std::string> Trainer::SaveCheckpoint(const std::string& dir, const nlohmann::json& user,
                                              int keep_last) {
  std::string path = dir + "/step_" + std::to_string(global_step_);
  std::unique_ptr<Optimizer> whole;  // ZeRO-1: the gathered state, on rank 0
  if (sharded()) {
    LAMINAR_ASSIGN_OR_RETURN(whole, GatherOptimizerState());
  }
  if (rank() == 0) {
    TrainingState state;
    state.global_step = global_step_;
    state.policy_version = policy_version_;
    std::ostringstream rng;
    rng << rng_;
    state.rng_states[kShuffleRng] = rng.str();
    state.user = user;
    CheckpointSaveOptions options;
    options.keep_last = keep_last;
    auto saved = SaveTrainingCheckpoint(dir, params_, whole ? *whole : *optimizer_, state, options);
    // The other ranks wait at the barrier whether or not the save succeeded.
    LAMINAR_RETURN_IF_ERROR(collective_->Barrier());
    return saved;
  }
  LAMINAR_RETURN_IF_ERROR(collective_->Barrier());
  return path;
}

StatusOr<nlohmann::json> Trainer::LoadCheckpoint(const std::string& dir) {
  // ZeRO-1: the whole state is loaded, and this rank keeps its shard.
  std::unique_ptr<Optimizer> whole;
  if (sharded()) {
    LAMINAR_ASSIGN_OR_RETURN(
        whole, CreateOptimizer(config_.optimizer, params_.num_elements(), pool_.get()));
  }
  LAMINAR_ASSIGN_OR_RETURN(
      LoadedCheckpoint loaded,
      LoadTrainingCheckpoint(dir, &params_, whole ? whole.get() : optimizer_.get()));
  if (whole) {
    const size_t begin = optimizer_->shard_begin(), end = optimizer_->shard_end();
    for (const std::string& name : optimizer_->buffer_names()) {
      std::span<const float> all = whole->buffer(name);
      std::copy(all.begin() + static_cast<ptrdiff_t>(begin),
                all.begin() + static_cast<ptrdiff_t>(end),
                optimizer_->mutable_buffer(name).begin());
    }
    optimizer_->RestoreCounters(whole->step(), whole->skipped_steps());
  }
  global_step_ = loaded.state.global_step;
  policy_version_ = loaded.state.policy_version;
  auto it = loaded.state.rng_states.find(kShuffleRng);
  if (it != loaded.state.rng_states.end()) {
    std::istringstream in(it->second);
    in >> rng_;
    if (!in) return DataLossError(loaded.path + ": unreadable shuffle RNG state");
  }
  return loaded.state.user;
}

Status Trainer::ExportHuggingFace(const std::string& dir,
                                  const std::map<std::string, std::string>& tokenizer_files,
                                  DType dtype, bool overwrite) {
  Status exported = OkStatus();
  if (rank() == 0) {
    exported = trainer::ExportHuggingFace(dir, model_, params_, tokenizer_files, dtype, overwrite);
  }
  // The other ranks wait at the barrier whether or not the export succeeded.
  LAMINAR_RETURN_IF_ERROR(collective_->Barrier());
  return exported;
}

int64_t Trainer::skipped_steps() const { return optimizer_->skipped_steps(); }

std::pair<size_t, size_t> Trainer::ShardOf(int r) const {
  const size_t n = params_.num_elements();
  const auto w = static_cast<size_t>(world_size());
  const auto ur = static_cast<size_t>(r);
  return {n * ur / w, n * (ur + 1) / w};
}

Status Trainer::GatherUpdatedShards() {
  std::span<float> values = params_.values();
  for (int r = 0; r < world_size(); ++r) {
    const auto [begin, end] = ShardOf(r);
    LAMINAR_RETURN_IF_ERROR(collective_->Broadcast(values.subspan(begin, end - begin), r),
                            "ZeRO-1: rank " + std::to_string(r) + "'s updated parameters");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Optimizer>> Trainer::GatherOptimizerState() {
  std::unique_ptr<Optimizer> whole;
  if (rank() == 0) {
    LAMINAR_ASSIGN_OR_RETURN(whole,
                             CreateOptimizer(config_.optimizer, params_.num_elements(), nullptr));
    whole->RestoreCounters(optimizer_->step(), optimizer_->skipped_steps());
  }
  std::vector<float> shard;
  for (const std::string& name : optimizer_->buffer_names()) {
    for (int r = 0; r < world_size(); ++r) {
      const auto [begin, end] = ShardOf(r);
      // The owner's shard travels in place; the others receive into `shard`.
      std::span<float> data;
      if (r == rank()) {
        data = optimizer_->mutable_buffer(name);
      } else {
        shard.assign(end - begin, 0.f);
        data = shard;
      }
      LAMINAR_RETURN_IF_ERROR(collective_->Broadcast(data, r),
                              "ZeRO-1: rank " + std::to_string(r) + "'s " + name);
      if (whole) {
        std::copy(data.begin(), data.end(),
                  whole->mutable_buffer(name).begin() + static_cast<ptrdiff_t>(begin));
      }
    }
  }
  return whole;
}

}  // namespace laminar::trainer
