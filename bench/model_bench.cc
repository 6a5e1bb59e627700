// Decode and prefill benchmarks of the forward pass.
#include "bench/model_bench.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace laminar::bench {
namespace {

ThroughputResult Summarize(std::string mode, int64_t batch, int64_t tokens,
                           std::vector<double> times) {
  std::sort(times.begin(), times.end());
  ThroughputResult r;
  r.mode = std::move(mode);
  r.batch = batch;
  r.tokens = tokens;
  r.median_s = times[times.size() / 2];
  r.spread_s = times.back() - times.front();
  r.tokens_per_s = double(tokens) / r.median_s;
  return r;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double MatmulParams(const model::ModelConfig& c) {
  double q = double(c.num_attention_heads * c.head_dim),
         kv = double(c.num_key_value_heads * c.head_dim);
  double per_layer = double(c.hidden_size) * (q + 2 * kv) + q * double(c.hidden_size) +
                     3.0 * double(c.hidden_size) * double(c.intermediate_size);
  return per_layer * double(c.num_hidden_layers) + double(c.vocab_size) * double(c.hidden_size);
}

ThroughputResult BenchDecode(const engine::LlamaModel& model, int64_t batch, int64_t steps) {
  const int64_t prompt = 8;
  engine::KvCache cache = model.NewCache(batch, prompt + steps + 1);
  std::vector<engine::SequenceSpan> spans;
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < batch; ++b) {
    spans.push_back({b, 0, prompt});
    for (int64_t i = 0; i < prompt; ++i)
      ids.push_back(static_cast<int32_t>((b * 31 + i * 7) % model.config().vocab_size));
  }
  std::vector<float> logits;
  LAMINAR_CHECK_OK(
      model.Forward(ids, spans, &cache, engine::LogitsFor::kLastTokenOfEachSequence, &logits));
  std::vector<double> times;
  for (int64_t s = 0; s < steps; ++s) {
    ids.assign(static_cast<size_t>(batch), 0);
    for (int64_t b = 0; b < batch; ++b) {
      const float* row = &logits[b * model.config().vocab_size];
      ids[b] = static_cast<int32_t>(std::max_element(row, row + model.config().vocab_size) - row);
      spans[b] = {b, prompt + s, 1};
    }
    double t0 = Now();
    LAMINAR_CHECK_OK(
        model.Forward(ids, spans, &cache, engine::LogitsFor::kLastTokenOfEachSequence, &logits));
    times.push_back(Now() - t0);
  }
  return Summarize("decode", batch, batch, times);
}

ThroughputResult BenchPrefill(const engine::LlamaModel& model, int64_t prompt_tokens, int repeats) {
  engine::KvCache cache = model.NewCache(1, prompt_tokens);
  std::vector<int32_t> ids(static_cast<size_t>(prompt_tokens));
  for (int64_t i = 0; i < prompt_tokens; ++i)
    ids[i] = static_cast<int32_t>((i * 13 + 5) % model.config().vocab_size);
  engine::SequenceSpan span{0, 0, prompt_tokens};
  std::vector<float> logits;
  std::vector<double> times;
  for (int r = 0; r < repeats + 1; ++r) {
    double t0 = Now();
    LAMINAR_CHECK_OK(model.Forward(ids, {&span, 1}, &cache,
                                   engine::LogitsFor::kLastTokenOfEachSequence, &logits));
    if (r > 0) times.push_back(Now() - t0);  // the first run warms up
  }
  return Summarize("prefill", 1, prompt_tokens, times);
}

}  // namespace laminar::bench
