// RolloutEngine on a tiny random f32 model: batching never changes a sample's tokens (greedy and
// seeded sampling), a GRPO group equals separate requests while storing its prompt once, and KV
// exhaustion preempts and still finishes every request with the same tokens.
// Kept in one file over ~600 lines: every case runs on the same tiny model and request builders.
#include "rollout/engine/rollout_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "model/gguf_model.h"
#include "model/llama2c.h"
#include "proto/codec.h"
#include "rollout/worker/wire.h"
#include "tests/model/random_weights.h"
#include "tests/test_util.h"

namespace laminar::rollout {
namespace {

using Key = std::pair<int64_t, int32_t>;  // (request id, sample index)

class RolloutEngineTest : public ::testing::TestWithParam<engine::Backend> {
 protected:
  void SetUp() override {
    config_ = testing::TinyLlamaConfig();
    weights_ = testing::RandomWeights(config_, 3, 0.5f);
    auto m = engine::LlamaModel::Create(config_, weights_, GetParam());
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
  }

  std::unique_ptr<RolloutEngine> NewEngine(int32_t block_size = 4, int32_t num_blocks = 128,
                                           int64_t token_budget = 64) {
    RolloutEngineConfig c;
    // Token i has the one-byte text 'A' + i.
    c.token_bytes = [](int32_t id) -> StatusOr<std::string> {
      return std::string(1, static_cast<char>('A' + id));
    };
    c.block_size = block_size;
    c.num_blocks = num_blocks;
    c.scheduler.max_num_batched_tokens = token_budget;
    c.weight_version = 7;
    auto e = RolloutEngine::Create(model_.get(), c);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  }

  static RolloutRequest Request(std::vector<int32_t> prompt, float temperature, uint64_t seed,
                                int32_t max_tokens = 10, int32_t n = 1) {
    RolloutRequest r;
    r.prompt_ids = std::move(prompt);
    r.sampling.temperature = temperature;
    r.sampling.top_k = temperature > 0 ? 12 : 0;
    r.sampling.top_p = temperature > 0 ? 0.95f : 1.f;
    r.sampling.seed = seed;
    r.stop.max_tokens = max_tokens;
    r.n = n;
    return r;
  }

  // Runs `requests` in one engine; results by (index into requests, sample index).
  std::map<Key, FinishedSample> Run(RolloutEngine& engine,
                                    const std::vector<RolloutRequest>& requests) {
    std::map<int64_t, int64_t> index_of;
    for (size_t i = 0; i < requests.size(); ++i) {
      auto id = engine.Add(requests[i]);
      EXPECT_TRUE(id.ok()) << id.status();
      index_of[*id] = static_cast<int64_t>(i);
    }
    auto done = engine.RunToCompletion();
    EXPECT_TRUE(done.ok()) << done.status();
    std::map<Key, FinishedSample> out;
    for (auto& f : *done) {
      EXPECT_EQ(f.version, 7);
      EXPECT_EQ(f.generated_ids.size(), f.logprobs.size());
      Key k{index_of.at(f.request_id), f.sample_index};
      EXPECT_FALSE(out.contains(k));
      out[k] = std::move(f);
    }
    EXPECT_TRUE(engine.idle());
    EXPECT_EQ(engine.scheduler().blocks().num_used_blocks(), 0);
    return out;
  }

  static void ExpectSame(const FinishedSample& got, const FinishedSample& want, Key k) {
    EXPECT_EQ(got.prompt_ids, want.prompt_ids) << k.first << "/" << k.second;
    EXPECT_EQ(got.generated_ids, want.generated_ids) << k.first << "/" << k.second;
    EXPECT_EQ(got.finish_reason, want.finish_reason) << k.first << "/" << k.second;
    // f32 kernels are batch-invariant (each row computed in an order that does not depend on the
    // other rows of the step), so batching changes no bit.
    ASSERT_EQ(got.logprobs.size(), want.logprobs.size());
    for (size_t i = 0; i < got.logprobs.size(); ++i) {
      EXPECT_EQ(got.logprobs[i], want.logprobs[i]) << k.first << "/" << k.second << " at " << i;
    }
  }

  static std::vector<RolloutRequest> MixedRequests(float temperature) {
    return {Request({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, temperature, 11, 9),
            Request({5}, temperature, 12, 12), Request({30, 2, 7}, temperature, 13, 5),
            Request({4, 4, 4, 4, 4, 4, 4}, temperature, 14, 10),
            Request({9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 31, 30, 29}, temperature, 15, 7)};
  }

  model::ModelConfig config_;
  model::WeightStore weights_;
  std::unique_ptr<engine::LlamaModel> model_;
};

TEST_P(RolloutEngineTest, GreedyBatchedEqualsOneAtATime) {
  auto requests = MixedRequests(0.f);
  // A small token budget chunks the prefills and mixes them with decodes.
  auto batched_engine = NewEngine(4, 128, 8);
  auto batched = Run(*batched_engine, requests);
  ASSERT_EQ(batched.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    auto alone_engine = NewEngine();
    auto alone = Run(*alone_engine, {requests[i]});
    Key k{static_cast<int64_t>(i), 0};
    ExpectSame(batched.at(k), alone.at({0, 0}), k);
    // Every prompt token and every sampled one but the last went through the model (drafts and
    // recomputation only add to it): the work the manager measures stragglers by.
    EXPECT_GE(
        alone_engine->tokens_forwarded(),
        static_cast<int64_t>(requests[i].prompt_ids.size()) + requests[i].stop.max_tokens - 1);
    EXPECT_EQ(batched.at(k).finish_reason, FinishReason::kLength);
    EXPECT_EQ(static_cast<int32_t>(batched.at(k).generated_ids.size()),
              requests[i].stop.max_tokens);
  }
}

TEST_P(RolloutEngineTest, SeededSampleIsTheSameAloneOrInAFullBatch) {
  auto requests = MixedRequests(1.f);
  auto batched_engine = NewEngine(2, 128, 16);
  auto batched = Run(*batched_engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto alone_engine = NewEngine(4, 64, 64);
    auto alone = Run(*alone_engine, {requests[i]});
    Key k{static_cast<int64_t>(i), 0};
    ExpectSame(batched.at(k), alone.at({0, 0}), k);
  }
  // Another seed gives another sample (the seed is used).
  auto other = requests[0];
  other.sampling.seed = 99;
  auto other_engine = NewEngine();
  auto o = Run(*other_engine, {other});
  EXPECT_NE(o.at({0, 0}).generated_ids, batched.at({0, 0}).generated_ids);
}

TEST_P(RolloutEngineTest, GroupEqualsSeparateRequestsAndStoresThePromptOnce) {
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};  // 2 full blocks + 2 tokens
  const uint64_t seed = 2024;
  auto group_engine = NewEngine(4, 64, 64);
  ASSERT_TRUE(group_engine->Add(Request(prompt, 1.f, seed, 8, 4)).ok());
  const auto& blocks = group_engine->scheduler().blocks();
  auto count_refs = [&](int32_t refs) {
    int n = 0;
    for (int32_t b = 0; b < blocks.num_total_blocks(); ++b) n += blocks.ref_count(b) == refs;
    return n;
  };
  // Step 1 prefills the prompt once and forks the group: its 3 blocks are held by all 4 samples.
  auto first = group_engine->Step();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(blocks.num_used_blocks(), 3);
  EXPECT_EQ(count_refs(4), 3);
  // Step 2 decodes 4 tokens into the partial last block: 3 samples copy it, the full blocks stay
  // shared.
  ASSERT_TRUE(group_engine->Step().ok());
  EXPECT_EQ(blocks.num_used_blocks(), 6);
  EXPECT_EQ(count_refs(4), 2);
  auto rest = group_engine->RunToCompletion();
  ASSERT_TRUE(rest.ok()) << rest.status();
  ASSERT_EQ(rest->size(), 4u);
  std::map<int32_t, FinishedSample> group;
  for (auto& f : *rest) group[f.sample_index] = f;

  std::vector<RolloutRequest> separate;
  for (int32_t i = 0; i < 4; ++i) separate.push_back(Request(prompt, 1.f, SampleSeed(seed, i), 8));
  auto separate_engine = NewEngine(4, 64, 64);
  for (const auto& r : separate) ASSERT_TRUE(separate_engine->Add(r).ok());
  ASSERT_TRUE(separate_engine->Step().ok());
  EXPECT_EQ(separate_engine->scheduler().blocks().num_used_blocks(), 12);  // no sharing
  auto sep = separate_engine->RunToCompletion();
  ASSERT_TRUE(sep.ok()) << sep.status();
  ASSERT_EQ(sep->size(), 4u);
  std::set<std::vector<int32_t>> distinct;
  for (const auto& f : *sep) {
    const int32_t i = static_cast<int32_t>(f.request_id);  // requests 0..3 in order
    ExpectSame(group.at(i), f, {0, i});
    distinct.insert(f.generated_ids);
  }
  EXPECT_GT(distinct.size(), 1u);  // per-sample seeds differ
}

TEST_P(RolloutEngineTest, KvExhaustionPreemptsAndFinishesWithTheSameTokens) {
  std::vector<RolloutRequest> requests;
  for (int32_t i = 0; i < 6; ++i) {
    requests.push_back(
        Request({i, i + 1, 2 * i, 3, 17, i + 9}, 1.f, static_cast<uint64_t>(100 + i), 12));
  }
  requests.push_back(Request({8, 8, 1, 2}, 1.f, 77, 6, 3));  // a group as well
  auto unconstrained_engine = NewEngine(2, 256, 64);
  auto want = Run(*unconstrained_engine, requests);
  EXPECT_EQ(unconstrained_engine->scheduler().stats().num_preemptions, 0);
  // Each request needs ceil((6 + 12 - 1) / 2) = 9 blocks; 12 blocks hold one and a bit.
  auto small_engine = NewEngine(2, 12, 64);
  auto got = Run(*small_engine, requests);
  EXPECT_GT(small_engine->scheduler().stats().num_preemptions, 0);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, w] : want) ExpectSame(got.at(k), w, k);
}

TEST_P(RolloutEngineTest, StopTokenEndsTheSampleAndStaysInTheResponse) {
  auto greedy = NewEngine();
  auto free_run = Run(*greedy, {Request({1, 2, 3}, 0.f, 0, 8)});
  const auto& ids = free_run.at({0, 0}).generated_ids;
  ASSERT_GE(ids.size(), 3u);
  RolloutRequest r = Request({1, 2, 3}, 0.f, 0, 8);
  r.stop.stop_token_ids = {ids[2]};
  auto engine = NewEngine();
  auto stopped = Run(*engine, {r});
  const auto& s = stopped.at({0, 0});
  EXPECT_EQ(s.finish_reason, FinishReason::kStop);
  ASSERT_FALSE(s.generated_ids.empty());
  EXPECT_EQ(s.generated_ids.back(), ids[2]);
  EXPECT_LE(s.generated_ids.size(), 3u);
}

TEST_P(RolloutEngineTest, StopStringSpanningTwoTokensEndsTheSample) {
  auto greedy = NewEngine();
  auto free_run = Run(*greedy, {Request({7, 1, 9}, 0.f, 0, 10)});
  const auto ids = free_run.at({0, 0}).generated_ids;
  ASSERT_GE(ids.size(), 4u);
  RolloutRequest r = Request({7, 1, 9}, 0.f, 0, 10);
  r.stop.stop_strings = {
      std::string{static_cast<char>('A' + ids[2]), static_cast<char>('A' + ids[3])}};
  auto engine = NewEngine();
  const auto stopped = Run(*engine, {r});
  const auto& s = stopped.at({0, 0});
  EXPECT_EQ(s.finish_reason, FinishReason::kStop);
  ASSERT_LE(s.generated_ids.size(), 4u);
  ASSERT_GE(s.generated_ids.size(), 2u);
  // A prefix of the free run that ends with the string's two tokens.
  EXPECT_TRUE(std::equal(s.generated_ids.begin(), s.generated_ids.end(), ids.begin()));
  EXPECT_EQ(s.generated_ids.back(), ids[3]);
  EXPECT_EQ(s.generated_ids[s.generated_ids.size() - 2], ids[2]);
}

TEST_P(RolloutEngineTest, RefusesBadRequests) {
  auto engine = NewEngine(4, 8, 64);
  EXPECT_FALSE(engine->Add(Request({}, 0.f, 0)).ok());
  EXPECT_FALSE(engine->Add(Request({1, 99}, 0.f, 0)).ok());
  EXPECT_FALSE(engine->Add(Request({1}, 0.f, 0, 4, 0)).ok());
  // 60 prompt tokens + 10 new ones exceed the 64-position context.
  auto too_long = engine->Add(Request(std::vector<int32_t>(60, 1), 0.f, 0, 10));
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("context of 64"), std::string::npos)
      << too_long.status();
  // 40 + 9 - 1 = 48 tokens need 12 blocks of 4; the cache has 8.
  auto too_big = engine->Add(Request(std::vector<int32_t>(40, 1), 0.f, 0, 9));
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted) << too_big.status();
  EXPECT_TRUE(engine->idle());
}

TEST_P(RolloutEngineTest, ExportImportMidGenerationContinuesIdentically) {
  auto requests = MixedRequests(1.f);
  requests.push_back(Request({8, 8, 1, 2}, 1.f, 77, 9, 3));  // a group
  requests.push_back(Request({2, 7, 1}, 0.f, 0, 11));        // greedy
  for (auto& r : requests) r.sampling.logprobs = 3;
  requests[0].stop.stop_token_ids = {5, 6};
  requests[1].stop.stop_strings = {"BC", "XY"};
  auto uninterrupted_engine = NewEngine(2, 128, 16);
  auto want = Run(*uninterrupted_engine, requests);

  // Migrate everything in flight after 3 steps (prefills done, a few tokens each), and the
  // migrated samples again after 2 more steps in the second engine.
  auto source = NewEngine(2, 128, 16);
  std::map<int64_t, int64_t> index_of;  // request id in `source` -> index into requests
  for (size_t i = 0; i < requests.size(); ++i) index_of[*source->Add(requests[i])] = int64_t(i);
  std::map<Key, FinishedSample> got;
  auto collect = [&](std::vector<FinishedSample> done, const std::map<int64_t, int64_t>& index) {
    for (auto& f : done) got[{index.at(f.request_id), f.sample_index}] = std::move(f);
  };
  for (int step = 0; step < 3; ++step) collect(*source->Step(), index_of);
  std::vector<SampleState> states = source->ExportAll();
  EXPECT_TRUE(source->idle());
  EXPECT_EQ(source->scheduler().stats().num_migrated, static_cast<int64_t>(states.size()));
  EXPECT_EQ(source->scheduler().stats().num_aborted, 0);
  EXPECT_EQ(source->scheduler().blocks().num_used_blocks(), 0);
  ASSERT_FALSE(states.empty());
  bool some_midway = false;
  for (const auto& st : states) some_midway |= !st.generated_ids.empty();
  EXPECT_TRUE(some_midway);

  auto middle = NewEngine(4, 64, 8);
  std::map<int64_t, int64_t> middle_index;
  for (auto& st : states) {
    const int64_t index = index_of.at(st.request_id);
    auto id = middle->Import(std::move(st));
    ASSERT_TRUE(id.ok()) << id.status();
    middle_index[*id] = index;
  }
  for (int step = 0; step < 2; ++step) collect(*middle->Step(), middle_index);
  auto dest = NewEngine(2, 128, 64);
  std::map<int64_t, int64_t> dest_index;
  for (auto& st : middle->ExportAll()) {
    const int64_t index = middle_index.at(st.request_id);
    dest_index[*dest->Import(std::move(st))] = index;
  }
  auto rest = dest->RunToCompletion();
  ASSERT_TRUE(rest.ok()) << rest.status();
  collect(std::move(*rest), dest_index);

  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, w] : want) {
    ExpectSame(got.at(k), w, k);
    ASSERT_EQ(got.at(k).top_logprobs.size(), w.generated_ids.size());
    for (size_t t = 0; t < w.top_logprobs.size(); ++t) {
      ASSERT_EQ(got.at(k).top_logprobs[t].size(), w.top_logprobs[t].size());
      for (size_t j = 0; j < w.top_logprobs[t].size(); ++j) {
        EXPECT_EQ(got.at(k).top_logprobs[t][j].id, w.top_logprobs[t][j].id);
        EXPECT_NEAR(got.at(k).top_logprobs[t][j].logprob, w.top_logprobs[t][j].logprob, 1e-4);
      }
    }
  }
}

TEST_P(RolloutEngineTest, MigratedSamplesSurviveTheWire) {
  auto r = Request({6, 2, 8, 3, 1}, 1.f, 31, 12, 2);
  r.sampling.logprobs = 2;
  r.stop.stop_strings = {"ZZ", "B"};
  r.stop.stop_token_ids = {9};
  auto uninterrupted_engine = NewEngine();
  auto want = Run(*uninterrupted_engine, {r});

  auto source = NewEngine();
  ASSERT_TRUE(source->Add(r).ok());
  std::map<Key, FinishedSample> got;
  for (int step = 0; step < 4; ++step) {
    auto done = source->Step();
    ASSERT_TRUE(done.ok()) << done.status();
    for (auto& f : *done) got[{0, f.sample_index}] = std::move(f);
  }
  auto dest = NewEngine(8, 32, 64);
  for (const SampleState& st : source->ExportAll()) {
    const std::string bytes = proto::Encode(ToProto(st, "gsm8k-17@0"));
    auto m = proto::Decode<proto::MigratedSample>(bytes, "rollout/1");
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->prompt_id(), "gsm8k-17@0");
    auto back = SampleStateFromProto(*m);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->generated_ids, st.generated_ids);
    EXPECT_EQ(back->rng, st.rng);
    EXPECT_EQ(back->stop.stop_strings, st.stop.stop_strings);
    EXPECT_EQ(back->matcher, st.matcher);
    ASSERT_TRUE(dest->Import(std::move(*back)).ok());
  }
  auto rest = dest->RunToCompletion();
  ASSERT_TRUE(rest.ok()) << rest.status();
  for (auto& f : *rest) got[{0, f.sample_index}] = std::move(f);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, w] : want) ExpectSame(got.at(k), w, k);

  // Broken messages are refused naming the field.
  proto::MigratedSample bad;
  bad.set_prompt_id("p");
  bad.add_prompt_ids(1);
  bad.add_response_ids(2);
  bad.mutable_sampling()->set_max_tokens(4);
  bad.mutable_rng_state()->Add(1);
  auto no_logprob = SampleStateFromProto(bad);
  EXPECT_NE(no_logprob.status().message().find("logprob"), std::string::npos)
      << no_logprob.status();
  bad.add_logprobs(-0.5f);
  auto short_rng = SampleStateFromProto(bad);
  EXPECT_NE(short_rng.status().message().find("rng_state has 1 words"), std::string::npos)
      << short_rng.status();
  bad.mutable_rng_state()->Add(2);
  bad.mutable_rng_state()->Add(3);
  bad.mutable_rng_state()->Add(4);
  EXPECT_TRUE(SampleStateFromProto(bad).ok());
  bad.mutable_sampling()->set_max_tokens(1);
  EXPECT_NE(SampleStateFromProto(bad).status().message().find("max_tokens 1"), std::string::npos);
}

TEST_P(RolloutEngineTest, TopLogprobsIncludeTheGreedyToken) {
  auto r = Request({1, 2, 3}, 0.f, 0, 6);
  r.sampling.logprobs = 4;
  auto engine = NewEngine();
  const auto s = Run(*engine, {r}).at({0, 0});
  ASSERT_EQ(s.top_logprobs.size(), s.generated_ids.size());
  for (size_t t = 0; t < s.generated_ids.size(); ++t) {
    ASSERT_EQ(s.top_logprobs[t].size(), 4u);
    EXPECT_EQ(s.top_logprobs[t][0].id, s.generated_ids[t]);
    EXPECT_EQ(s.top_logprobs[t][0].logprob, s.logprobs[t]);
    EXPECT_GE(s.top_logprobs[t][0].logprob, s.top_logprobs[t][3].logprob);
  }
}

TEST_P(RolloutEngineTest, ImportRefusesInconsistentStates) {
  auto source = NewEngine();
  auto r = Request({1, 2, 3}, 1.f, 5, 6);
  r.stop.stop_strings = {"QQQ"};
  ASSERT_TRUE(source->Add(r).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(source->Step().ok());
  auto states = source->Export(0);
  ASSERT_TRUE(states.ok()) << states.status();
  ASSERT_EQ(states->size(), 1u);
  const SampleState good = states->front();
  ASSERT_EQ(good.generated_ids.size(), 3u);  // the prefill step samples the first
  EXPECT_EQ(source->Export(0).status().code(), StatusCode::kNotFound);

  auto dest = NewEngine();
  auto refused = [&](SampleState st, StatusCode code, const std::string& words) {
    auto id = dest->Import(std::move(st));
    ASSERT_FALSE(id.ok());
    EXPECT_EQ(id.status().code(), code) << id.status();
    EXPECT_NE(id.status().message().find(words), std::string::npos) << id.status();
    EXPECT_TRUE(dest->idle());
  };
  SampleState st = good;
  st.version = 8;
  refused(st, StatusCode::kFailedPrecondition, "version 8");
  st = good;
  st.logprobs.pop_back();
  refused(st, StatusCode::kInvalidArgument, "2 logprobs for 3");
  st = good;
  st.generated_ids[1] = 1000;
  refused(st, StatusCode::kInvalidArgument, "generated token 1 has id 1000");
  st = good;
  st.stop.max_tokens = 3;
  refused(st, StatusCode::kInvalidArgument, "max_tokens 3");
  st = good;
  st.matcher.num_tokens = 1;
  refused(st, StatusCode::kInvalidArgument, "stop");
  st = good;
  st.prompt_ids.assign(62, 1);
  refused(st, StatusCode::kInvalidArgument, "context of 64");
  EXPECT_TRUE(dest->Import(good).ok());
}

TEST_P(RolloutEngineTest, SetWeightsSwapsThePolicyBetweenRequestsOnly) {
  auto other_weights = testing::RandomWeights(config_, 4, 0.5f);
  auto other = engine::LlamaModel::Create(config_, other_weights, GetParam());
  ASSERT_TRUE(other.ok()) << other.status();
  const auto r = Request({3, 1, 4, 1, 5}, 1.f, 9, 8);

  auto engine = NewEngine();
  const auto before = Run(*engine, {r}).at({0, 0});
  ASSERT_TRUE(engine->Add(r).ok());
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_EQ(engine->SetWeights(other->get(), 8).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine->RunToCompletion().ok());
  EXPECT_EQ(engine->SetWeights(other->get(), 7).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(engine->SetWeights(other->get(), 8).ok());
  EXPECT_EQ(engine->weight_version(), 8);
  ASSERT_TRUE(engine->Add(r).ok());
  auto after = engine->RunToCompletion();
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ(after->front().version, 8);
  EXPECT_NE(after->front().logprobs, before.logprobs);
  // The same as an engine created with the new weights.
  RolloutEngineConfig c;
  c.block_size = 4;
  c.num_blocks = 128;
  c.weight_version = 8;
  auto fresh = RolloutEngine::Create(other->get(), c);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE((*fresh)->Add(r).ok());
  auto want = (*fresh)->RunToCompletion();
  ASSERT_TRUE(want.ok());
  ExpectSame(after->front(), want->front(), {0, 0});

  auto wider_config = config_;
  wider_config.num_hidden_layers += 1;
  auto wider = engine::LlamaModel::Create(
      wider_config, testing::RandomWeights(wider_config, 5, 0.5f), GetParam());
  ASSERT_TRUE(wider.ok()) << wider.status();
  EXPECT_EQ(engine->SetWeights(wider->get(), 9).code(), StatusCode::kInvalidArgument);
}

// Weights that overflowed (a NaN in the final norm makes every logit NaN) end each sample with
// kNonFiniteLogits before the token they would have given: no token drawn from NaN logits is
// emitted, the KV blocks are freed, and the engine goes on with the next request.
TEST_P(RolloutEngineTest, NonFiniteLogitsEndTheSampleByName) {
  model::WeightStore nan_weights = testing::RandomWeights(config_, 3, 0.5f);
  auto norm = nan_weights.GetMutable("model.norm.weight");
  ASSERT_TRUE(norm.ok()) << norm.status();
  (*norm)->data_as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  auto m = engine::LlamaModel::Create(config_, nan_weights, GetParam());
  ASSERT_TRUE(m.ok()) << m.status();
  model_ = std::move(*m);
  for (float temperature : {0.f, 1.f}) {
    auto engine = NewEngine();
    RolloutRequest r = Request({1, 2, 3}, temperature, 5);
    r.n = 3;
    ASSERT_TRUE(engine->Add(r).ok());
    auto done = engine->RunToCompletion();
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->size(), 3u);
    for (const FinishedSample& f : *done) {
      EXPECT_EQ(f.finish_reason, FinishReason::kNonFiniteLogits);
      EXPECT_EQ(FinishReasonName(f.finish_reason), "non_finite_logits");
      EXPECT_TRUE(f.generated_ids.empty());
      EXPECT_TRUE(f.logprobs.empty());
      EXPECT_EQ(f.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
    }
    EXPECT_EQ(engine->scheduler().stats().num_kv_blocks_used, 0);
    engine->scheduler().CheckInvariants();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RolloutEngineTest,
                         ::testing::Values(engine::Backend::kReference, engine::Backend::kCpu));

// Two requests sharing a 24-token prompt prefix run one after the other in one engine: the second
// reuses the first's cached prompt blocks, prefills 24 fewer positions, and samples exactly what it
// samples in a fresh engine (reference backend: a position's KV does not depend on the chunking or
// the batch it was computed in, nor on which request computed it).
TEST(RolloutEnginePrefixCacheTest, SecondRequestReusesTheSharedPrefixWithIdenticalSamples) {
  const model::ModelConfig config = testing::TinyLlamaConfig();
  const model::WeightStore weights = testing::RandomWeights(config, 5, 0.5f);
  auto model = engine::LlamaModel::Create(config, weights, engine::Backend::kReference);
  ASSERT_TRUE(model.ok()) << model.status();
  auto new_engine = [&]() {
    RolloutEngineConfig c;
    c.block_size = 4;
    c.num_blocks = 64;
    c.scheduler.max_num_batched_tokens = 8;  // prefill in chunks of 8
    c.weight_version = 3;
    auto e = RolloutEngine::Create(model->get(), c);
    EXPECT_TRUE(e.ok()) << e.status();
    return std::move(*e);
  };
  // Steps `engine` until idle; the one finished sample and the number of steps.
  auto run = [](RolloutEngine& engine, const RolloutRequest& r, int* steps) {
    EXPECT_TRUE(engine.Add(r).ok());
    std::vector<FinishedSample> done;
    for (*steps = 0; !engine.idle() && *steps < 100; ++*steps) {
      auto finished = engine.Step();
      EXPECT_TRUE(finished.ok()) << finished.status();
      if (!finished.ok()) break;
      for (auto& f : *finished) done.push_back(std::move(f));
    }
    EXPECT_EQ(done.size(), 1u);
    return done.empty() ? FinishedSample{} : done[0];
  };
  auto request = [](std::vector<int32_t> tail, uint64_t seed) {
    RolloutRequest r;
    for (int32_t i = 0; i < 24; ++i) r.prompt_ids.push_back((7 * i + 3) % 32);  // 6 full blocks
    r.prompt_ids.insert(r.prompt_ids.end(), tail.begin(), tail.end());
    r.sampling.temperature = 1.f;
    r.sampling.seed = seed;
    r.stop.max_tokens = 8;
    return r;
  };
  const RolloutRequest first = request({1, 2, 3}, 5);
  const RolloutRequest second = request({9, 8, 7, 6, 5}, 6);  // 29 tokens

  auto cached_engine = new_engine();
  int steps = 0;
  run(*cached_engine, first, &steps);
  const SchedulerStats before = cached_engine->scheduler().stats();
  EXPECT_EQ(before.num_prompt_tokens_reused, 0);
  EXPECT_EQ(before.num_kv_blocks_cached, 6);
  int cached_steps = 0;
  const FinishedSample got = run(*cached_engine, second, &cached_steps);
  const SchedulerStats after = cached_engine->scheduler().stats();
  EXPECT_EQ(after.num_prompt_tokens_looked_up - before.num_prompt_tokens_looked_up, 29);
  EXPECT_EQ(after.num_prompt_tokens_reused, 24);

  auto fresh_engine = new_engine();
  int fresh_steps = 0;
  const FinishedSample want = run(*fresh_engine, second, &fresh_steps);
  EXPECT_EQ(fresh_engine->scheduler().stats().num_prompt_tokens_reused, 0);
  // Prefill chunks: 29 tokens take 4 steps, the 5 uncached ones 1; then 7 decodes each.
  EXPECT_EQ(fresh_steps, 11);
  EXPECT_EQ(cached_steps, 8);

  EXPECT_EQ(got.prompt_ids, second.prompt_ids);
  EXPECT_EQ(got.generated_ids, want.generated_ids);
  EXPECT_EQ(got.logprobs, want.logprobs);  // bitwise
  EXPECT_EQ(got.finish_reason, want.finish_reason);
  EXPECT_EQ(got.generated_ids.size(), 8u);
}

// KV cache sizing, shared by the recipe, `laminar generate`, `eval` and `bench`.
TEST(KvCacheSizeTest, BlocksForAMemoryBudget) {
  model::ModelConfig c;
  c.num_hidden_layers = 30;
  c.num_key_value_heads = 3;
  c.head_dim = 64;
  EXPECT_EQ(KvBytesPerToken(c), 2 * 30 * 3 * 64 * 4);  // SmolLM2-135M: 46,080 bytes
  auto blocks = KvBlocksFor(64, KvBytesPerToken(c), 16);
  ASSERT_TRUE(blocks.ok()) << blocks.status();
  EXPECT_EQ(*blocks, (64 << 20) / (46080 * 16));
  auto too_small = KvBlocksFor(1, 1 << 20, 16);
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("1 MiB holds no KV block of 16 tokens"),
            std::string::npos)
      << too_small.status();
  EXPECT_FALSE(KvBlocksFor(0, 100, 16).ok());
  EXPECT_FALSE(KvBlocksFor(8, 100, 0).ok());
  EXPECT_EQ(*KvBlocksFor(int64_t{1} << 40, 1, 1), int32_t{1} << 30);  // capped
}

// On a whole model (the synthetic tiny-llama, f32): a GRPO group's seeded samples are the same
// tokens and logprobs, bit for bit, alone or sharing every step with two other groups. Long
// responses, so a logit that moved by one ulp would flip a token at some CDF boundary (as it did
// when the matmul chose its kernel by the number of rows in the step).
TEST(RolloutEngineRealModelTest, SeededGroupIsBitIdenticalAloneOrInABatch) {
  const std::string bin = ::laminar::testing::TinyModel();
  model::ModelConfig config;
  model::WeightStore weights;
  ASSERT_TRUE(model::LoadGgufModel(bin, &config, &weights).ok());
  auto model = *engine::LlamaModel::Create(config, weights, engine::Backend::kCpu);
  auto request = [](std::vector<int32_t> prompt, uint64_t seed) {
    RolloutRequest r;
    r.prompt_ids = std::move(prompt);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.stop.max_tokens = 240;
    r.n = 8;
    return r;
  };
  auto run = [&](const std::vector<RolloutRequest>& reqs) {
    RolloutEngineConfig c;
    c.block_size = 16;
    c.num_blocks = 512;
    c.scheduler.max_num_batched_tokens = 96;  // chunked prefills next to decodes
    auto e = *RolloutEngine::Create(model.get(), c);
    std::vector<int64_t> ids;
    for (const auto& r : reqs) ids.push_back(*e->Add(r));
    auto done = *e->RunToCompletion();
    std::map<int32_t, FinishedSample> first;  // the first request's samples
    for (auto& f : done) {
      if (f.request_id == ids[0]) first[f.sample_index] = std::move(f);
    }
    return first;
  };
  const RolloutRequest group = request({1, 403, 407}, 3);
  const auto alone = run({group});
  const auto batched =
      run({group, request({1, 365, 2501 % 512, 263}, 4), request({1, 9, 10, 11, 12, 13}, 5)});
  ASSERT_EQ(alone.size(), 8u);
  ASSERT_EQ(batched.size(), 8u);
  for (const auto& [i, a] : alone) {
    const FinishedSample& b = batched.at(i);
    EXPECT_EQ(a.generated_ids, b.generated_ids) << "sample " << i;
    ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << "sample " << i;
    for (size_t t = 0; t < a.logprobs.size(); ++t) {
      ASSERT_EQ(a.logprobs[t], b.logprobs[t]) << "sample " << i << " token " << t;
    }
  }
}

}  // namespace
}  // namespace laminar::rollout
