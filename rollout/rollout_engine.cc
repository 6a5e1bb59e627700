// Rollout engine: one scheduler plan per step, executed as one packed paged forward, then
// per-sample sampling and stop rules.
#include "rollout/rollout_engine.h"

#include <string>
#include <utility>

#include "core/check.h"

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

Status RolloutEngineConfig::Validate() const {
  if (block_size <= 0) {
    return InvalidArgumentError("rollout engine config: block_size must be > 0, got " +
                                std::to_string(block_size));
  }
  if (num_blocks <= 0) {
    return InvalidArgumentError("rollout engine config: num_blocks must be > 0, got " +
                                std::to_string(num_blocks));
  }
  return scheduler.Validate();
}

StatusOr<std::unique_ptr<RolloutEngine>> RolloutEngine::Create(const engine::LlamaModel* model,
                                                               RolloutEngineConfig config) {
  LAMINAR_CHECK(model != nullptr) << "RolloutEngine needs a model";
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  if (!config.token_bytes) {
    config.token_bytes = [](int32_t) -> StatusOr<std::string> { return std::string(); };
  }
  return std::unique_ptr<RolloutEngine>(new RolloutEngine(model, std::move(config)));
}

RolloutEngine::RolloutEngine(const engine::LlamaModel* model, RolloutEngineConfig config)
    : model_(model),
      config_(std::move(config)),
      scheduler_(config_.scheduler, config_.block_size, config_.num_blocks),
      cache_(model->NewPagedCache(config_.num_blocks, config_.block_size)) {
  scheduler_.mutable_blocks().SetWeightVersion(config_.weight_version);
}

StatusOr<int64_t> RolloutEngine::Add(RolloutRequest request) {
  const auto& mc = model_->config();
  const int64_t num_prompt = static_cast<int64_t>(request.prompt_ids.size());
  if (num_prompt == 0) return InvalidArgumentError("request: the prompt has no token ids");
  for (int64_t i = 0; i < num_prompt; ++i) {
    if (request.prompt_ids[i] < 0 || request.prompt_ids[i] >= mc.vocab_size) {
      return InvalidArgumentError("request: prompt token " + std::to_string(i) + " has id " +
                                  std::to_string(request.prompt_ids[i]) +
                                  " outside the vocabulary of " + std::to_string(mc.vocab_size));
    }
  }
  if (request.n < 1) {
    return InvalidArgumentError("request: n must be >= 1, got " + std::to_string(request.n));
  }
  LAMINAR_ASSIGN_OR_RETURN(
      StopMatcher matcher,
      StopMatcher::Create(request.stop, config_.token_bytes, config_.strips_leading_space),
      "request");
  const int64_t max_tokens = request.stop.max_tokens;
  if (num_prompt + max_tokens - 1 > mc.max_position_embeddings) {
    return InvalidArgumentError("request: a prompt of " + std::to_string(num_prompt) +
                                " tokens with max_tokens " + std::to_string(max_tokens) +
                                " does not fit the model's context of " +
                                std::to_string(mc.max_position_embeddings) + " positions");
  }
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
                                .sampler = engine::Sampler(params),
                                .matcher = matcher});
  }
  return request_id;
}

FinishedSample RolloutEngine::Finish(RequestId id, FinishReason reason) {
  auto it = samples_.find(id);
  LAMINAR_CHECK(it != samples_.end()) << "finishing unknown sample " << id;
  Sample& s = it->second;
  FinishedSample out;
  out.request_id = s.request_id;
  out.sample_index = s.sample_index;
  out.prompt_ids.assign(s.tokens.begin(), s.tokens.begin() + s.num_prompt_tokens);
  out.generated_ids.assign(s.tokens.begin() + s.num_prompt_tokens, s.tokens.end());
  out.logprobs = std::move(s.logprobs);
  out.finish_reason = reason;
  out.version = config_.weight_version;
  samples_.erase(it);
  return out;
}

StatusOr<bool> RolloutEngine::SampleToken(RequestId id, std::span<const float> logits,
                                          std::vector<FinishedSample>* finished) {
  auto it = samples_.find(id);
  LAMINAR_CHECK(it != samples_.end()) << "the plan samples unknown sequence " << id;
  Sample& s = it->second;
  const engine::SampledToken token = s.sampler.Sample(logits);
  LAMINAR_ASSIGN_OR_RETURN(StopMatcher::Step stop, s.matcher.Push(token.id),
                           "sample " + std::to_string(id));
  s.tokens.push_back(token.id);
  s.logprobs.push_back(token.logprob);
  if (!stop.stop) return false;
  LAMINAR_RETURN_IF_ERROR(scheduler_.Finish(id));
  finished->push_back(Finish(id, stop.finish_reason));
  return true;
}

StatusOr<std::vector<FinishedSample>> RolloutEngine::Step() {
  LAMINAR_ASSIGN_OR_RETURN(Plan plan, scheduler_.Schedule());
  last_step_empty_ = plan.empty();
  std::vector<FinishedSample> finished;
  if (plan.empty()) {
    LAMINAR_RETURN_IF_ERROR(scheduler_.OnTokens({}).status());
    return finished;
  }
  for (const BlockCopy& copy : plan.copies) cache_.CopyBlock(copy.src, copy.dst);
  std::vector<int32_t> tokens;
  tokens.reserve(static_cast<size_t>(plan.num_batched_tokens));
  std::vector<engine::SequenceSpan> spans;
  std::vector<std::span<const int32_t>> tables;
  for (const ScheduledSeq& seq : plan.seqs) {
    const Sample& s = samples_.at(seq.id);
    LAMINAR_CHECK(seq.start + seq.num_tokens <= static_cast<int64_t>(s.tokens.size()))
        << "sequence " << seq.id << " scheduled past its " << s.tokens.size() << " tokens";
    tokens.insert(tokens.end(), s.tokens.begin() + seq.start,
                  s.tokens.begin() + seq.start + seq.num_tokens);
    spans.push_back({0, seq.start, seq.num_tokens});
    tables.emplace_back(seq.block_table);
  }
  std::vector<float> logits;
  LAMINAR_RETURN_IF_ERROR(model_->Forward(tokens, spans, tables, &cache_,
                                          engine::LogitsFor::kLastTokenOfEachSequence, &logits),
                          "rollout step");
  const int64_t v = model_->config().vocab_size;
  std::vector<RequestId> sampled;
  for (size_t b = 0; b < plan.seqs.size(); ++b) {
    const ScheduledSeq& seq = plan.seqs[b];
    if (!seq.samples) continue;
    std::span<const float> row(logits.data() + static_cast<int64_t>(b) * v, static_cast<size_t>(v));
    std::vector<RequestId> ids = {seq.id};
    ids.insert(ids.end(), seq.forked.begin(), seq.forked.end());
    for (RequestId id : ids) {
      LAMINAR_ASSIGN_OR_RETURN(bool done, SampleToken(id, row, &finished));
      if (!done) sampled.push_back(id);
    }
  }
  // The stop matcher ends a sample at max_tokens before the scheduler would; any id the scheduler
  // still finishes here reached its length.
  LAMINAR_ASSIGN_OR_RETURN(std::vector<RequestId> at_length, scheduler_.OnTokens(sampled));
  for (RequestId id : at_length) finished.push_back(Finish(id, FinishReason::kLength));
  return finished;
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
