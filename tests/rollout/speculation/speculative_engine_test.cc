// Speculation in the rollout engine: greedy decoding equals speculation off (also across an
// export / import and a weight swap), sampled tokens and logprobs are the policy's, no KV block
// leaks under random operations, and bad speculative configurations are refused.
#include <gtest/gtest.h>

#include "tests/rollout/speculation/speculation_test_util.h"

namespace laminar::rollout {
namespace {

using namespace spec_test;  // NOLINT(google-build-using-namespace): the tests' own helpers

using EngineParam = std::tuple<engine::Backend, std::string>;

// On a tiny random model: the reference backend and the CPU one, each drafter. The draft_model
// drafter runs a model with other random weights (it is often wrong: many rejections).
class SpeculativeEngineTest : public ::testing::TestWithParam<EngineParam> {
 protected:
  void SetUp() override {
    config_ = testing::TinyLlamaConfig();
    weights_ = testing::RandomWeights(config_, 3, 0.5f);
    weights2_ = testing::RandomWeights(config_, 4, 0.5f);
    const engine::Backend backend = std::get<0>(GetParam());
    model_ = *engine::LlamaModel::Create(config_, weights_, backend);
    model2_ = *engine::LlamaModel::Create(config_, weights2_, backend);
    drafter_ = std::get<1>(GetParam());
  }
  RolloutEngineConfig Spec(int32_t block_size = 4) const {
    return EngineConfig(drafter_, block_size, model2_.get());
  }
  model::ModelConfig config_;
  model::WeightStore weights_, weights2_;
  std::unique_ptr<engine::LlamaModel> model_, model2_;
  std::string drafter_;
};

TEST_P(SpeculativeEngineTest, GreedyEqualsSpeculationOffAcrossAWeightSwap) {
  auto off = *RolloutEngine::Create(model_.get(), EngineConfig("off"));
  auto spec = *RolloutEngine::Create(model_.get(), Spec(3));
  ExpectSameGreedy(RunAll(*spec, GreedyRequests(24)), RunAll(*off, GreedyRequests(24)));
  const SpecStats st = spec->spec_stats();
  EXPECT_GT(st.verify_steps, 0);
  EXPECT_GT(st.accepted_tokens, 0);
  EXPECT_LT(st.accepted_tokens, st.drafted_tokens);  // some drafts rejected too
  // New weights: the drafter still remembers responses of the old policy (suffix) or drafts with
  // other weights (draft_model); verification keeps the output that of the new policy.
  ASSERT_TRUE(off->SetWeights(model2_.get(), 8).ok());
  ASSERT_TRUE(spec->SetWeights(model2_.get(), 8).ok());
  ExpectSameGreedy(RunAll(*spec, GreedyRequests(20)), RunAll(*off, GreedyRequests(20)));
}

TEST_P(SpeculativeEngineTest, AdaptiveBudgetsStayExactAndDraftWhileTheyPay) {
  auto off = *RolloutEngine::Create(model_.get(), EngineConfig("off"));
  RolloutEngineConfig c = Spec();
  c.speculative.adaptive = true;
  auto spec = *RolloutEngine::Create(model_.get(), c);
  ExpectSameGreedy(RunAll(*spec, GreedyRequests(40)), RunAll(*off, GreedyRequests(40)));
  const SpecStats st = spec->spec_stats();
  EXPECT_GT(st.verify_steps, 0);
  EXPECT_TRUE(spec->step_costs().ready());
}

TEST_P(SpeculativeEngineTest, SampledTokensAreTheEnginesAndLogprobsThePolicys) {
  // Sampling with speculation: every recorded logprob is the policy's for that token (recomputed
  // by a plain forward over prompt + response), never the drafter's.
  RolloutEngineConfig c = Spec();
  auto spec = *RolloutEngine::Create(model_.get(), c);
  std::vector<RolloutRequest> reqs = GreedyRequests(16);
  for (RolloutRequest& r : reqs) {
    r.sampling.temperature = 0.8f;
    r.sampling.seed = 5;
  }
  const auto out = RunAll(*spec, reqs);
  EXPECT_GT(spec->spec_stats().verify_steps, 0);
  for (const auto& [k, f] : out) {
    std::vector<int32_t> all = f.prompt_ids;
    all.insert(all.end(), f.generated_ids.begin(), f.generated_ids.end());
    engine::KvCache kv = model_->NewCache(1, std::ssize(all));
    const engine::SequenceSpan span(0, 0, std::ssize(all));
    std::vector<float> logits;
    ASSERT_TRUE(model_->Forward(all, {&span, 1}, &kv, engine::LogitsFor::kAllTokens, &logits).ok());
    engine::SamplingParams p = reqs[0].sampling;
    for (size_t i = 0; i < f.generated_ids.size(); ++i) {
      const size_t row = f.prompt_ids.size() - 1 + i;
      const auto d = Dist(
          p, std::span<const float>(logits).subspan(row * config_.vocab_size, config_.vocab_size));
      ASSERT_GT(d.Prob(f.generated_ids[i]), 0) << "a token outside the policy's support";
      EXPECT_NEAR(f.logprobs[i], std::log(d.Prob(f.generated_ids[i])), 2e-4);
    }
  }
}

TEST_P(SpeculativeEngineTest, ExportMidSpeculationImportsAndContinuesIdentically) {
  auto off = *RolloutEngine::Create(model_.get(), EngineConfig("off"));
  const auto want = RunAll(*off, GreedyRequests(24));
  auto a = *RolloutEngine::Create(model_.get(), Spec());
  auto b = *RolloutEngine::Create(model_.get(), Spec());
  for (auto& r : GreedyRequests(24)) ASSERT_TRUE(a->Add(r).ok());
  std::map<std::pair<int64_t, int32_t>, FinishedSample> got;
  for (int i = 0; i < 6; ++i) {
    auto done = a->Step();
    ASSERT_TRUE(done.ok());
    for (auto& f : *done) got[{f.request_id, f.sample_index}] = std::move(f);
  }
  EXPECT_GT(a->spec_stats().verify_steps, 0);
  std::map<int64_t, int64_t> original;  // b's request id -> a's
  for (SampleState& st : a->ExportAll()) {
    const int64_t from = st.request_id;
    auto id = b->Import(std::move(st));
    ASSERT_TRUE(id.ok()) << id.status();
    original[*id] = from;
  }
  EXPECT_EQ(a->scheduler().stats().num_kv_blocks_used, 0);
  auto rest = b->RunToCompletion();
  ASSERT_TRUE(rest.ok());
  for (auto& f : *rest) got[{original.at(f.request_id), f.sample_index}] = std::move(f);
  EXPECT_EQ(b->scheduler().stats().num_kv_blocks_used, 0);
  ExpectSameGreedy(got, want);
}

// Random operations with speculation always on and a drafter that is often wrong (random
// accept/reject patterns, trees cut at random depths): adds of random prompts, group sizes,
// temperatures, top-p and lengths into a KV pool small enough to preempt; steps; exports of random
// requests in flight, imported into a second engine; weight swaps (and back) after both drain.
// After every step the schedulers' invariants hold, and once both drain no KV block is left.
TEST_P(SpeculativeEngineTest, RandomOperationsLeakNoKvBlocks) {
  std::mt19937 rng(11);
  RolloutEngineConfig c = Spec(3);
  c.num_blocks = 24;  // 72 tokens: a few samples of up to 12 + 20 tokens (and drafts) fill it
  auto a = *RolloutEngine::Create(model_.get(), c);
  auto b = *RolloutEngine::Create(model_.get(), c);
  std::vector<int64_t> added;  // a's request ids
  int64_t version = 0, exported = 0, swaps = 0;
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  for (int it = 0; it < 300; ++it) {
    const int64_t op = pick(10);
    if (op < 3) {
      RolloutRequest r;
      r.prompt_ids.resize(static_cast<size_t>(1 + pick(12)));
      for (int32_t& t : r.prompt_ids) t = static_cast<int32_t>(pick(config_.vocab_size));
      r.n = static_cast<int32_t>(1 + pick(4));
      r.sampling.temperature = std::array{0.0f, 0.7f, 1.0f}[pick(3)];
      r.sampling.top_p = pick(2) ? 1.0f : 0.8f;
      r.sampling.seed = rng();
      r.stop.max_tokens = 1 + pick(20);
      if (pick(3) == 0) r.stop.stop_token_ids = {static_cast<int32_t>(pick(config_.vocab_size))};
      auto id = a->Add(std::move(r));
      ASSERT_TRUE(id.ok()) << id.status();
      added.push_back(*id);
    } else if (op < 5 && !added.empty()) {
      auto states = a->Export(added[static_cast<size_t>(pick(std::ssize(added)))]);
      if (!states.ok()) continue;  // finished already
      for (SampleState& st : *states) {
        auto id = b->Import(std::move(st));
        ASSERT_TRUE(id.ok()) << id.status();
        ++exported;
      }
    } else if (op == 5 && pick(4) == 0) {
      // A new version, as a rollout takes it: drain, then swap.
      for (RolloutEngine* e : {a.get(), b.get()}) {
        ASSERT_TRUE(e->RunToCompletion().ok());
        EXPECT_EQ(e->scheduler().stats().num_kv_blocks_used, 0);
      }
      ++version;
      const engine::LlamaModel* m = version % 2 ? model2_.get() : model_.get();
      ASSERT_TRUE(a->SetWeights(m, version).ok());
      ASSERT_TRUE(b->SetWeights(m, version).ok());
      ++swaps;
    } else {
      for (RolloutEngine* e : {a.get(), b.get()}) {
        ASSERT_TRUE(e->Step().ok());
        e->scheduler().CheckInvariants();
      }
    }
  }
  for (RolloutEngine* e : {a.get(), b.get()}) {
    ASSERT_TRUE(e->RunToCompletion().ok());
    e->scheduler().CheckInvariants();
    EXPECT_EQ(e->scheduler().stats().num_kv_blocks_used, 0);
  }
  EXPECT_GT(exported, 0);
  EXPECT_GT(a->scheduler().stats().num_preemptions, 0);  // the pool was tight
  EXPECT_GT(a->spec_stats().verify_steps, 0);
  EXPECT_LT(a->spec_stats().accepted_tokens, a->spec_stats().drafted_tokens);  // rejections too
  std::printf("%lld samples moved, %lld weight swaps, %lld of %lld drafted tokens accepted\n",
              static_cast<long long>(exported), static_cast<long long>(swaps),
              static_cast<long long>(a->spec_stats().accepted_tokens),
              static_cast<long long>(a->spec_stats().drafted_tokens));
}

INSTANTIATE_TEST_SUITE_P(
    BackendsAndDrafters, SpeculativeEngineTest,
    ::testing::Combine(::testing::Values(engine::Backend::kReference, engine::Backend::kCpu),
                       ::testing::Values("suffix", "layer_skip", "draft_model", "layer_skip+async",
                                         "draft_model+async", "layer_skip+vocab",
                                         "draft_model+async+vocab")),
    [](const ::testing::TestParamInfo<EngineParam>& p) {
      std::string name = std::get<1>(p.param);
      for (size_t plus; (plus = name.find('+')) != std::string::npos;) name[plus] = '_';
      return std::string(std::get<0>(p.param) == engine::Backend::kCpu ? "cpu_" : "ref_") + name;
    });

TEST(SpeculativeConfigTest, RefusesBadDrafterSettings) {
  auto config = testing::TinyLlamaConfig();
  auto weights = testing::RandomWeights(config, 3, 0.5f);
  auto m = *engine::LlamaModel::Create(config, weights, engine::Backend::kReference);
  RolloutEngineConfig c = EngineConfig("draft_model");  // no model given
  EXPECT_NE(RolloutEngine::Create(m.get(), c).status().message().find("needs a drafter model"),
            std::string::npos);
  c = EngineConfig("suffix+async");  // only model drafters draft ahead
  EXPECT_NE(RolloutEngine::Create(m.get(), c).status().message().find("async_draft"),
            std::string::npos);
  // An unknown name never becomes a kind; a kind outside the registry is refused, not followed.
  EXPECT_NE(ParseDrafterVariant("medusa").status().message().find("medusa"), std::string::npos);
  c = EngineConfig("suffix");
  c.speculative.drafter = static_cast<DrafterKind>(42);
  EXPECT_NE(RolloutEngine::Create(m.get(), c).status().message().find("not a registered drafter"),
            std::string::npos);
  c = EngineConfig("suffix");
  c.speculative.max_draft_tokens = 64;
  EXPECT_NE(RolloutEngine::Create(m.get(), c).status().message().find("max_draft_tokens"),
            std::string::npos);
  // A draft model with another vocabulary.
  auto other = config;
  other.vocab_size += 1;
  auto other_weights = testing::RandomWeights(other, 3, 0.5f);
  auto d = *engine::LlamaModel::Create(other, other_weights, engine::Backend::kReference);
  c = EngineConfig("draft_model", 4, d.get());
  EXPECT_NE(RolloutEngine::Create(m.get(), c).status().message().find("vocabulary"),
            std::string::npos);
}

}  // namespace
}  // namespace laminar::rollout
