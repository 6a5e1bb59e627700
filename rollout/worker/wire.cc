// Field-by-field conversions; see wire.h.
#include "rollout/worker/wire.h"

#include <utility>

#include "proto/codec.h"

namespace laminar::rollout {

proto::SamplingParams ToProto(const engine::SamplingParams& sampling, const StopOptions& stop) {
  proto::SamplingParams p;
  p.set_temperature(sampling.temperature);
  p.set_top_k(sampling.top_k);
  p.set_top_p(sampling.top_p);
  p.set_min_p(sampling.min_p);
  p.set_seed(sampling.seed);
  p.set_logprobs(sampling.logprobs);
  p.set_max_tokens(stop.max_tokens);
  for (const std::string& s : stop.stop_strings) p.add_stop(s);
  for (int32_t id : stop.stop_token_ids) p.add_stop_token_ids(id);
  p.set_include_stop_str_in_output(stop.include_stop_str_in_output);
  p.set_keep_special_tokens(!stop.skip_special_tokens);
  return p;
}

engine::SamplingParams SamplingFromProto(const proto::SamplingParams& p) {
  return {.temperature = p.temperature(),
          .top_k = p.top_k(),
          .top_p = p.top_p(),
          .min_p = p.min_p(),
          .seed = p.seed(),
          .logprobs = p.logprobs()};
}

StopOptions StopFromProto(const proto::SamplingParams& p) {
  StopOptions stop;
  stop.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  stop.stop_strings.assign(p.stop().begin(), p.stop().end());
  stop.max_tokens = p.max_tokens();
  stop.include_stop_str_in_output = p.include_stop_str_in_output();
  stop.skip_special_tokens = !p.keep_special_tokens();
  return stop;
}

proto::MigratedSample ToProto(const SampleState& state, const std::string& prompt_id) {
  proto::MigratedSample m;
  m.set_prompt_id(prompt_id);
  m.set_sample_index(state.sample_index);
  m.set_version(state.version);
  m.mutable_prompt_ids()->Add(state.prompt_ids.begin(), state.prompt_ids.end());
  m.mutable_response_ids()->Add(state.generated_ids.begin(), state.generated_ids.end());
  m.mutable_logprobs()->Add(state.logprobs.begin(), state.logprobs.end());
  for (const auto& top : state.top_logprobs) {
    proto::TopLogprobs* t = m.add_top_logprobs();
    for (const engine::TokenLogprob& e : top) {
      t->add_ids(e.id);
      t->add_logprobs(e.logprob);
    }
  }
  *m.mutable_sampling() = ToProto(state.sampling, state.stop);
  m.mutable_rng_state()->Add(state.rng.begin(), state.rng.end());
  m.set_stop_tail(state.matcher.tail);
  m.set_stop_text_bytes(state.matcher.text_bytes);
  m.set_stop_at_start(state.matcher.at_start);
  return m;
}

StatusOr<SampleState> SampleStateFromProto(const proto::MigratedSample& m) {
  LAMINAR_RETURN_IF_ERROR(proto::Validate(m), "MigratedSample");
  SampleState s;
  s.sample_index = m.sample_index();
  s.version = m.version();
  s.prompt_ids.assign(m.prompt_ids().begin(), m.prompt_ids().end());
  s.generated_ids.assign(m.response_ids().begin(), m.response_ids().end());
  s.logprobs.assign(m.logprobs().begin(), m.logprobs().end());
  for (const proto::TopLogprobs& t : m.top_logprobs()) {
    std::vector<engine::TokenLogprob> top;
    top.reserve(static_cast<size_t>(t.ids_size()));
    for (int i = 0; i < t.ids_size(); ++i) top.push_back({t.ids(i), t.logprobs(i)});
    s.top_logprobs.push_back(std::move(top));
  }
  s.sampling = SamplingFromProto(m.sampling());
  s.stop = StopFromProto(m.sampling());
  for (int i = 0; i < 4; ++i) s.rng[i] = m.rng_state(i);
  s.matcher.tail = m.stop_tail();
  s.matcher.num_tokens = m.response_ids_size();
  s.matcher.text_bytes = m.stop_text_bytes();
  s.matcher.at_start = m.stop_at_start();
  return s;
}

}  // namespace laminar::rollout
