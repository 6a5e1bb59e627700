// Rollout engine: one scheduler plan per step, executed as one packed paged forward, then
// per-sample sampling and stop rules.
#include "rollout/engine/rollout_engine.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "core/check.h"
#include "core/logging.h"

namespace laminar::rollout {

uint64_t SampleSeed(uint64_t request_seed, int32_t sample_index) {
  if (sample_index == 0) return request_seed;
  // SplitMix64 (Steele et al., OOPSLA 2014) of the seed offset by the index: distinct, well mixed
  // streams for the samples of one group.
  uint64_t z = request_seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(sample_index) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t KvBytesPerToken(const model::ModelConfig& model) {
  return 2 * model.num_hidden_layers * model.num_key_value_heads * model.head_dim *
         static_cast<int64_t>(sizeof(float));
}

StatusOr<int32_t> KvBlocksFor(int64_t megabytes, int64_t bytes_per_token, int32_t block_size) {
  if (megabytes <= 0 || bytes_per_token <= 0 || block_size <= 0) {
    return InvalidArgumentError("KV cache: " + std::to_string(megabytes) + " MiB, " +
                                std::to_string(bytes_per_token) + " bytes per token, blocks of " +
                                std::to_string(block_size) + " tokens: each must be > 0");
  }
  const int64_t blocks = (megabytes << 20) / (bytes_per_token * block_size);
  if (blocks < 1) {
    return InvalidArgumentError(std::to_string(megabytes) + " MiB holds no KV block of " +
                                std::to_string(block_size) + " tokens (" +
                                std::to_string(bytes_per_token * block_size) + " bytes)");
  }
  return static_cast<int32_t>(std::min<int64_t>(blocks, int64_t{1} << 30));
}

Status RolloutEngineConfig::Validate() const {
  if (block_size <= 0) {
    return InvalidArgumentError("rollout engine config: block_size must be > 0, got " +
                                std::to_string(block_size));
  }
  if (num_blocks <= 0) {
    return InvalidArgumentError("rollout engine config: num_blocks must be > 0, got " +
                                std::to_string(num_blocks));
  }
  LAMINAR_RETURN_IF_ERROR(speculative.Validate());
  return scheduler.Validate();
}

StatusOr<std::unique_ptr<RolloutEngine>> RolloutEngine::Create(const engine::LlamaModel* model,
                                                               RolloutEngineConfig config) {
  LAMINAR_CHECK(model != nullptr) << "RolloutEngine needs a model";
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  if (!config.token_bytes) {
    config.token_bytes = [](int32_t) -> StatusOr<std::string> { return std::string(); };
  }
  LAMINAR_ASSIGN_OR_RETURN(std::unique_ptr<Drafter> drafter, MakeDrafter(config.speculative));
  if (drafter != nullptr) LAMINAR_RETURN_IF_ERROR(drafter->OnWeights(model), "speculative drafter");
  std::unique_ptr<RolloutEngine> engine(new RolloutEngine(model, std::move(config)));
  if (drafter != nullptr) engine->costs_.set_forward_per_depth(drafter->runs_model());
  engine->drafter_ = std::move(drafter);
  return engine;
}

RolloutEngine::RolloutEngine(const engine::LlamaModel* model, RolloutEngineConfig config)
    : model_(model),
      config_(std::move(config)),
      scheduler_(config_.scheduler, config_.block_size, config_.num_blocks),
      cache_(model->NewPagedCache(config_.num_blocks, config_.block_size)) {
  scheduler_.mutable_blocks().SetWeightVersion(config_.weight_version);
}

Status RolloutEngine::CheckIds(std::span<const int32_t> ids, const std::string& what) const {
  const int64_t v = model_->config().vocab_size;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= v) {
      return InvalidArgumentError(what + " token " + std::to_string(i) + " has id " +
                                  std::to_string(ids[i]) + " outside the vocabulary of " +
                                  std::to_string(v));
    }
  }
  return OkStatus();
}

Status RolloutEngine::CheckContext(int64_t num_prompt, int64_t max_tokens) const {
  const int64_t context = model_->config().max_position_embeddings;
  if (num_prompt + max_tokens - 1 > context) {
    return InvalidArgumentError("a prompt of " + std::to_string(num_prompt) +
                                " tokens with max_tokens " + std::to_string(max_tokens) +
                                " does not fit the model's context of " + std::to_string(context) +
                                " positions");
  }
  return OkStatus();
}

StatusOr<int64_t> RolloutEngine::Add(RolloutRequest request) {
  const int64_t num_prompt = static_cast<int64_t>(request.prompt_ids.size());
  if (num_prompt == 0) return InvalidArgumentError("request: the prompt has no token ids");
  LAMINAR_RETURN_IF_ERROR(CheckIds(request.prompt_ids, "prompt"), "request");
  if (request.n < 1) {
    return InvalidArgumentError("request: n must be >= 1, got " + std::to_string(request.n));
  }
  LAMINAR_RETURN_IF_ERROR(request.sampling.Validate(), "request");
  LAMINAR_ASSIGN_OR_RETURN(
      StopMatcher matcher,
      StopMatcher::Create(request.stop, config_.token_bytes, config_.strips_leading_space),
      "request");
  const int64_t max_tokens = request.stop.max_tokens;
  LAMINAR_RETURN_IF_ERROR(CheckContext(num_prompt, max_tokens), "request");
  const RequestId first = next_seq_id_;
  // Every sample needs the same blocks, so if the first fits the empty cache all do.
  LAMINAR_RETURN_IF_ERROR(scheduler_.Add(first, request.prompt_ids, max_tokens), "request");
  const int64_t request_id = next_request_id_++;
  for (int32_t i = 0; i < request.n; ++i) {
    const RequestId id = next_seq_id_++;
    if (i > 0) LAMINAR_CHECK_OK(scheduler_.Add(id, request.prompt_ids, max_tokens, first));
    engine::SamplingParams params = request.sampling;
    params.seed = SampleSeed(request.sampling.seed, i);
    samples_.emplace(id, Sample{.request_id = request_id,
                                .sample_index = i,
                                .num_prompt_tokens = num_prompt,
                                .tokens = request.prompt_ids,
                                .logprobs = {},
                                .top_logprobs = {},
                                .sampler = engine::Sampler(params),
                                .matcher = matcher,
                                .acceptance = {},
                                .steps_without_draft = 0,
                                .exploring = false,
                                .verifications = 0});
  }
  return request_id;
}

// The ids, prompt/generated split and logprobs of `s`, moved into a FinishedSample or SampleState.
template <typename Out>
void RolloutEngine::MoveTokens(Sample& s, Out* out) {
  out->request_id = s.request_id;
  out->sample_index = s.sample_index;
  out->prompt_ids.assign(s.tokens.begin(), s.tokens.begin() + s.num_prompt_tokens);
  out->generated_ids.assign(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
  out->logprobs = std::move(s.logprobs);
  out->top_logprobs = std::move(s.top_logprobs);
}

void RolloutEngine::EndSample(RequestId id, const Sample& s) {
  if (drafter_ != nullptr) drafter_->OnSequenceEnd(id, s.request_id, s.tokens, s.num_prompt_tokens);
}

FinishedSample RolloutEngine::Finish(RequestId id, FinishReason reason) {
  auto it = samples_.find(id);
  LAMINAR_CHECK(it != samples_.end()) << "finishing unknown sample " << id;
  EndSample(id, it->second);
  FinishedSample out;
  MoveTokens(it->second, &out);
  out.finish_reason = reason;
  out.version = config_.weight_version;
  samples_.erase(it);
  return out;
}

StatusOr<bool> RolloutEngine::Append(RequestId id, engine::SampledToken token,
                                     std::vector<FinishedSample>* finished) {
  Sample& s = samples_.at(id);
  if (!std::isfinite(token.logprob)) {
    // The sampler found a NaN or +inf logit (engine::Sampler::Distribution): nothing drawn from
    // them is emitted, and the sample ends here with what it has. The first few say so in full.
    if (++non_finite_finishes_ <= 5) {
      LAMINAR_LOG(WARN, ROLLOUT) << "sample " << s.sample_index << " of request " << s.request_id
                                 << ": the policy's logits at position " << s.tokens.size()
                                 << " are not finite (weight version " << config_.weight_version
                                 << "): its weights or activations overflowed; the sample ends "
                                    "there (non_finite_logits)";
    }
    LAMINAR_RETURN_IF_ERROR(scheduler_.Finish(id));
    finished->push_back(Finish(id, FinishReason::kNonFiniteLogits));
    return true;
  }
  LAMINAR_ASSIGN_OR_RETURN(StopMatcher::Step stop, s.matcher.Push(token.id),
                           "sample " + std::to_string(id));
  s.tokens.push_back(token.id);
  s.logprobs.push_back(token.logprob);
  if (s.sampler.params().logprobs > 0) s.top_logprobs.push_back(std::move(token.top));
  if (!stop.stop) return false;
  LAMINAR_RETURN_IF_ERROR(scheduler_.Finish(id));
  finished->push_back(Finish(id, stop.finish_reason));
  return true;
}

Status RolloutEngine::SetWeights(const engine::LlamaModel* model, int64_t version,
                                 const engine::LlamaModel* draft) {
  LAMINAR_CHECK(model != nullptr) << "SetWeights needs a model";
  if (!idle()) {
    return FailedPreconditionError("rollout engine: cannot swap weights with " +
                                   std::to_string(samples_.size()) + " samples in flight");
  }
  if (version <= config_.weight_version) {
    return InvalidArgumentError("rollout engine: new weight version " + std::to_string(version) +
                                " is not above the current " +
                                std::to_string(config_.weight_version));
  }
  const model::ModelConfig& a = model_->config();
  const model::ModelConfig& b = model->config();
  const bool same_shapes = a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
                           a.num_hidden_layers == b.num_hidden_layers &&
                           a.num_key_value_heads == b.num_key_value_heads &&
                           a.head_dim == b.head_dim &&
                           a.max_position_embeddings == b.max_position_embeddings;
  if (!same_shapes) {
    return InvalidArgumentError(
        "rollout engine: the new weights' shapes (vocab, hidden, layers, kv heads, head dim, "
        "context) differ from the engine's");
  }
  MutexLock drafter_lock(&drafter_mu_);
  if (drafter_ != nullptr) {
    LAMINAR_RETURN_IF_ERROR(drafter_->OnWeights(model, draft),
                            "rollout engine: speculative drafter");
  }
  if (draft != nullptr) config_.speculative.draft_model = draft;
  model_ = model;
  config_.weight_version = version;
  scheduler_.mutable_blocks().SetWeightVersion(version);
  return OkStatus();
}

StatusOr<std::vector<SampleState>> RolloutEngine::Export(int64_t request_id) {
  MutexLock drafter_lock(&drafter_mu_);
  std::vector<RequestId> ids;
  for (const auto& [id, s] : samples_) {
    if (s.request_id == request_id) ids.push_back(id);
  }
  if (ids.empty()) {
    return NotFoundError("rollout engine: request " + std::to_string(request_id) +
                         " has no sample in flight");
  }
  std::sort(ids.begin(), ids.end(), [&](RequestId x, RequestId y) {
    return samples_.at(x).sample_index < samples_.at(y).sample_index;
  });
  std::vector<SampleState> out;
  for (RequestId id : ids) {
    Sample& s = samples_.at(id);
    LAMINAR_CHECK_OK(scheduler_.Migrate(id));
    SampleState st;
    MoveTokens(s, &st);
    st.sampling = s.sampler.params();
    st.rng = s.sampler.rng_state();
    st.stop = s.matcher.options();
    st.matcher = s.matcher.Export();
    st.version = config_.weight_version;
    EndSample(id, s);
    out.push_back(std::move(st));
    samples_.erase(id);
  }
  return out;
}

std::vector<SampleState> RolloutEngine::ExportAll() {
  std::set<int64_t> requests;
  for (const auto& [id, s] : samples_) requests.insert(s.request_id);
  std::vector<SampleState> out;
  for (int64_t r : requests) {
    auto states = Export(r);
    LAMINAR_CHECK_OK(states.status());
    for (auto& st : *states) out.push_back(std::move(st));
  }
  return out;
}

StatusOr<int64_t> RolloutEngine::Import(SampleState state) {
  if (state.version != config_.weight_version) {
    return FailedPreconditionError("import: the sample was generated under weight version " +
                                   std::to_string(state.version) + ", this engine holds " +
                                   std::to_string(config_.weight_version));
  }
  const int64_t num_prompt = static_cast<int64_t>(state.prompt_ids.size());
  const int64_t num_generated = static_cast<int64_t>(state.generated_ids.size());
  if (num_prompt == 0) return InvalidArgumentError("import: the prompt has no token ids");
  LAMINAR_RETURN_IF_ERROR(CheckIds(state.prompt_ids, "prompt"), "import");
  LAMINAR_RETURN_IF_ERROR(CheckIds(state.generated_ids, "generated"), "import");
  if (static_cast<int64_t>(state.logprobs.size()) != num_generated) {
    return InvalidArgumentError("import: " + std::to_string(state.logprobs.size()) +
                                " logprobs for " + std::to_string(num_generated) +
                                " generated tokens");
  }
  const bool wants_top = state.sampling.logprobs > 0;
  if (static_cast<int64_t>(state.top_logprobs.size()) != (wants_top ? num_generated : 0)) {
    return InvalidArgumentError("import: " + std::to_string(state.top_logprobs.size()) +
                                " top-logprob lists for " + std::to_string(num_generated) +
                                " generated tokens");
  }
  const int64_t max_tokens = state.stop.max_tokens;
  if (num_generated >= max_tokens) {
    return InvalidArgumentError("import: the sample already has " + std::to_string(num_generated) +
                                " tokens of max_tokens " + std::to_string(max_tokens));
  }
  LAMINAR_ASSIGN_OR_RETURN(
      StopMatcher matcher,
      StopMatcher::Create(state.stop, config_.token_bytes, config_.strips_leading_space), "import");
  LAMINAR_RETURN_IF_ERROR(matcher.Restore(state.matcher), "import");
  if (matcher.num_tokens() != num_generated || matcher.finished()) {
    return InvalidArgumentError("import: the stop state covers " +
                                std::to_string(matcher.num_tokens()) + " tokens" +
                                (matcher.finished() ? " and has stopped" : "") +
                                ", the sample has " + std::to_string(num_generated) + " running");
  }
  LAMINAR_RETURN_IF_ERROR(CheckContext(num_prompt, max_tokens), "import");
  // The prompt and generated tokens are prefilled as one prompt; the next sampled token is the
  // sample's next.
  std::vector<int32_t> tokens = std::move(state.prompt_ids);
  tokens.insert(tokens.end(), state.generated_ids.begin(), state.generated_ids.end());
  const RequestId id = next_seq_id_;
  LAMINAR_RETURN_IF_ERROR(scheduler_.Add(id, tokens, max_tokens - num_generated), "import");
  ++next_seq_id_;
  const int64_t request_id = next_request_id_++;
  samples_.emplace(id, Sample{.request_id = request_id,
                              .sample_index = state.sample_index,
                              .num_prompt_tokens = num_prompt,
                              .tokens = std::move(tokens),
                              .logprobs = std::move(state.logprobs),
                              .top_logprobs = std::move(state.top_logprobs),
                              .sampler = engine::Sampler(state.sampling, state.rng),
                              .matcher = std::move(matcher),
                              .acceptance = {},
                              .steps_without_draft = 0,
                              .exploring = false,
                              .verifications = 0});
  return request_id;
}

std::vector<RolloutEngine::InFlightSample> RolloutEngine::InFlight() const {
  std::vector<InFlightSample> out;
  out.reserve(samples_.size());
  for (const auto& [id, s] : samples_) {
    out.push_back({.request_id = s.request_id,
                   .sample_index = s.sample_index,
                   .num_tokens = static_cast<int64_t>(s.tokens.size()),
                   .generated_ids = std::span<const int32_t>(s.tokens).subspan(
                       static_cast<size_t>(s.num_prompt_tokens)),
                   .logprobs = s.logprobs});
  }
  std::sort(out.begin(), out.end(), [](const InFlightSample& a, const InFlightSample& b) {
    return a.request_id != b.request_id ? a.request_id < b.request_id
                                        : a.sample_index < b.sample_index;
  });
  return out;
}

StatusOr<std::vector<FinishedSample>> RolloutEngine::RunToCompletion() {
  std::vector<FinishedSample> all;
  int64_t empty_steps = 0;
  while (!idle()) {
    LAMINAR_ASSIGN_OR_RETURN(std::vector<FinishedSample> done, Step());
    for (auto& f : done) all.push_back(std::move(f));
    empty_steps = last_step_empty_ ? empty_steps + 1 : 0;
    if (empty_steps > 1) {
      return InternalError("rollout engine: no progress with " + std::to_string(samples_.size()) +
                           " samples left");
    }
  }
  return all;
}

}  // namespace laminar::rollout
