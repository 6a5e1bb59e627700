// On the synthetic tiny-llama, the tokens verified by speculation have the non-speculative
// distribution (two-sample chi-square) and the policy's exact one (uniform probability integral
// transforms), also across an export and a weight swap in the middle of speculation.
#include <gtest/gtest.h>

#include "model/gguf_model.h"
#include "tests/rollout/speculation/speculation_test_util.h"

namespace laminar::rollout {
namespace {

using namespace spec_test;  // NOLINT(google-build-using-namespace): the tests' own helpers

TEST(ChiSquareTest, ProbabilityIntegralTransformsOfExactDrawsAreUniform) {
  // Draws from a known discrete distribution give uniform PITs; draws from a slightly different
  // one (0.05 of the mass moved) do not.
  const std::vector<double> p = {0.5, 0.2, 0.2, 0.1}, biased = {0.45, 0.25, 0.2, 0.1};
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  for (const auto* from : {&p, &biased}) {
    std::discrete_distribution<int> draw(from->begin(), from->end());
    std::vector<double> u;
    for (int i = 0; i < 20000; ++i) {
      const int x = draw(rng);
      u.push_back(std::accumulate(p.begin(), p.begin() + x, 0.0) + uniform(rng) * p[x]);
    }
    const double pvalue = UniformityPValue(u, 20);
    if (from == &p) {
      EXPECT_GT(pvalue, 1e-4);
    } else {
      EXPECT_LT(pvalue, 1e-6);
    }
  }
}

// On the synthetic tiny-llama: the tokens of GRPO groups sampled with speculation (always on) have
// the same distribution as without, for each drafter, for a draft model drafting ahead, and for one
// whose head computes 64 of the 509 tokens and those seen (q = 0 elsewhere). 768 responses of 10
// tokens after a two-token prompt (one per group) per engine; for each k in 1..8 the pairs (token k
// + 1, token k + 2), which speculation verifies, are compared between the two engines by a
// two-sample chi-square. Positions where the policy has a single outcome are skipped; the smallest
// p-value must exceed 1e-3 / (positions tested + 2) (Bonferroni: a correct engine fails under one
// seed in a thousand). The "+ 2" are goodness-of-fit tests against the policy's exact
// probabilities: the randomized PITs of all 10 tokens of all 768 responses (AppendPits) must be
// uniform (20 bins), for the speculative engine and for the one without speculation (the
// control: the test's own false-alarm rate). Kept whole: one statistical experiment, its engines
// and its tests read top to bottom.
TEST(SpeculativeTinyModelTest, SampledTokensHaveTheNonSpeculativeDistribution) {
  const std::string bin = ::laminar::testing::TinyModel();
  model::ModelConfig config;
  model::WeightStore weights;
  ASSERT_TRUE(model::LoadGgufModel(bin, &config, &weights).ok());
  auto m = *engine::LlamaModel::Create(config, weights, engine::Backend::kCpu);
  const std::vector<int64_t> draft_layers = {0, 3};
  auto draft = *m->LayerSubset(draft_layers);  // the draft_model drafter's separate model
  // Drafting ahead re-roots only after a whole chain is accepted: it gets a drafter with all the
  // policy's layers (q = p), so that re-rooted proposals are verified often.
  std::vector<int64_t> all_layers(static_cast<size_t>(config.num_hidden_layers));
  std::iota(all_layers.begin(), all_layers.end(), 0);
  auto full = *m->LayerSubset(all_layers);
  constexpr int kTokens = 10;
  // The prompts: BOS and one more token, another for each of the 12 groups. From BOS alone the
  // model's stories open with the same words ("Once upon a time, there was"), and at T = 0.7,
  // top-p 0.9 only the last two of the ten positions had more than one outcome and the suffix
  // drafter's tokens were all accepted (its rejections never drawn); the other openings make
  // every position vary. Both engines run the same prompts, so the counts compare the same
  // mixture.
  auto prompt = [](int g) { return std::vector<int32_t>{1, static_cast<int32_t>(50 + 37 * g)}; };
  // Each (drafter, setting) is its own trial, with its own seeds: with shared seeds every
  // speculative engine drew the same first tokens (and the off engines the same tokens), so one
  // unlucky set of seeds pulled all their p-values down together.
  uint64_t trial = 0;
  for (const std::string drafter :
       {"suffix", "layer_skip", "draft_model", "draft_model+async", "draft_model+vocab"})
    for (const Setting s : {Setting{1.0f, 1.0f}, Setting{0.7f, 0.9f}}) {
      ++trial;
      const DrafterVariant variant = *ParseDrafterVariant(drafter);
      using Pair = std::pair<int32_t, int32_t>;
      std::map<Pair, int64_t> counts[2][kTokens - 2];  // [engine][k]
      std::vector<double> pits[2];                     // [engine]
      int64_t n = 0;
      for (int spec = 0; spec < 2; ++spec) {
        // +vocab: the draft head computes 64 of the 512 tokens and those seen.
        RolloutEngineConfig c = EngineConfig(spec ? drafter : "off", 16,
                                             variant.async_draft ? full.get() : draft.get(), 64);
        c.speculative.max_draft_tokens = variant.drafter == DrafterKind::kSuffix ? 6 : 3;
        c.num_blocks = 2048;
        c.scheduler.max_num_batched_tokens = 4096;
        auto e = *RolloutEngine::Create(m.get(), c);
        std::vector<RolloutRequest> reqs;
        for (int g = 0; g < 12; ++g) {
          RolloutRequest r;
          r.prompt_ids = prompt(g);
          r.sampling.temperature = s.temperature;
          r.sampling.top_p = s.top_p;
          r.sampling.seed = 100000 * trial + static_cast<uint64_t>(1000 * spec + g);
          r.stop.max_tokens = kTokens;
          r.n = 64;
          reqs.push_back(r);
        }
        const auto out = RunAll(*e, reqs);
        n = std::ssize(out);
        std::mt19937_64 rng(2 * trial + static_cast<uint64_t>(spec));
        for (const auto& [key, f] : out) {
          ASSERT_EQ(f.generated_ids.size(), static_cast<size_t>(kTokens));
          for (int k = 0; k + 2 < kTokens; ++k)
            ++counts[spec][k][{f.generated_ids[k + 1], f.generated_ids[k + 2]}];
          AppendPits(*m, f.prompt_ids, f.generated_ids, reqs[0].sampling, rng, &pits[spec]);
        }
        if (spec) {
          const SpecStats& st = e->spec_stats();
          EXPECT_GT(st.accepted_tokens, 100);
          // Rejections happened (the residual draws were exercised), except drafting ahead: its
          // drafter is the policy itself (q = p), so that whole chains are accepted.
          // Drafting ahead pays off: proposals re-rooted on a chain drafted during verification.
          if (c.speculative.async_draft) {
            EXPECT_GT(st.rerooted, 100);
          } else {
            EXPECT_GT(st.drafted_tokens - st.accepted_tokens, 50);
          }
          std::printf(
              "%s T=%.1f top_p=%.2f: %lld drafted, %lld accepted in %lld verifications, %lld "
              "re-rooted\n",
              drafter.c_str(), s.temperature, s.top_p, static_cast<long long>(st.drafted_tokens),
              static_cast<long long>(st.accepted_tokens), static_cast<long long>(st.verify_steps),
              static_cast<long long>(st.rerooted));
        }
      }
      std::vector<std::pair<int, double>> tested;
      for (int k = 0; k + 2 < kTokens; ++k) {
        int64_t bins = 0;
        const double p = HomogeneityPValue(counts[0][k], counts[1][k], n, &bins);
        if (bins < 2) continue;
        tested.emplace_back(k, p);
        std::printf("  tokens %d-%d: %lld samples each, %lld bins, p = %.3f\n", k + 2, k + 3,
                    static_cast<long long>(n), static_cast<long long>(bins), p);
      }
      // Most positions have more than one outcome (else the comparison checks little).
      ASSERT_GE(tested.size(), static_cast<size_t>(kTokens - 2) / 2)
          << "too few positions with more than one outcome";
      const double threshold = 1e-3 / static_cast<double>(tested.size() + 2);
      for (const auto& [k, p] : tested) {
        EXPECT_GT(p, threshold) << "tokens " << k + 2 << "-" << k + 3;
      }
      // Against the exact probabilities: off (the control) and speculative.
      for (int spec = 0; spec < 2; ++spec) {
        const double p = UniformityPValue(pits[spec], 20);
        std::printf("  %s vs the policy's exact probabilities: %zu tokens, p = %.3f\n",
                    spec ? "speculative" : "off", pits[spec].size(), p);
        EXPECT_GT(p, threshold) << (spec ? "speculative" : "off") << " tokens vs exact";
      }
    }
}

// On the synthetic tiny-llama, sampling (T 0.8, top-p 0.95): samples exported in the middle of
// speculation (drafts verified, chains drafted ahead) and imported into another engine of the same
// version go on with that version's exact distribution; the exporting engine then swaps to a new
// version (whose final norm is 1.6x: every distribution sharper) and, for draft_model, a new draft,
// and its new samples have the new version's exact distribution: no drafter state of the old
// version (KV, chains drafted ahead, acceptance history) reaches them. Checked with randomized PITs
// against each version's exact probabilities (384 samples of 12 tokens per version and drafter);
// no KV block is left in either engine. Kept whole: the export, the swap and the checks are one
// sequence over the same engines.
TEST(SpeculativeTinyModelTest, ExportAndWeightSwapInTheMiddleOfSpeculationStayExact) {
  const std::string bin = ::laminar::testing::TinyModel();
  model::ModelConfig config;
  model::WeightStore weights, weights2;
  ASSERT_TRUE(model::LoadGgufModel(bin, &config, &weights).ok());
  ASSERT_TRUE(model::LoadGgufModel(bin, &config, &weights2).ok());
  {  // the checkpoint's tensors are read-only views of the file: a scaled copy
    const TensorView norm = *weights2.Get("model.norm.weight");
    Tensor scaled(DType::kF32, norm.shape());
    for (int64_t i = 0; i < norm.num_elements(); ++i) {
      scaled.data_as<float>()[i] = 1.6f * norm.data_as<const float>()[i];
    }
    weights2.Put("model.norm.weight", std::move(scaled));
  }
  auto m1 = *engine::LlamaModel::Create(config, weights, engine::Backend::kCpu);
  auto m2 = *engine::LlamaModel::Create(config, weights2, engine::Backend::kCpu);
  const std::vector<int64_t> draft_layers = {0, 3};
  auto draft1 = *m1->LayerSubset(draft_layers), draft2 = *m2->LayerSubset(draft_layers);
  constexpr int kTokens = 12;
  auto requests = [&](uint64_t seed) {
    std::vector<RolloutRequest> reqs;
    for (int g = 0; g < 6; ++g) {
      RolloutRequest r;
      r.prompt_ids = {1};  // BOS
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.95f;
      r.sampling.seed = seed + static_cast<uint64_t>(g);
      r.stop.max_tokens = kTokens;
      r.n = 64;
      reqs.push_back(r);
    }
    return reqs;
  };
  const engine::SamplingParams params = requests(0)[0].sampling;
  const int tests = 2 * 4;  // two versions, four drafters
  for (const std::string drafter :
       {"suffix", "layer_skip", "draft_model+async", "draft_model+vocab"}) {
    SCOPED_TRACE(drafter);
    RolloutEngineConfig c = EngineConfig(drafter, 16, draft1.get(), 64);
    c.speculative.max_draft_tokens = 4;
    c.num_blocks = 2048;
    c.scheduler.max_num_batched_tokens = 4096;
    c.weight_version = 1;
    auto e = *RolloutEngine::Create(m1.get(), c);
    auto f = *RolloutEngine::Create(m1.get(), c);
    for (auto& r : requests(100)) ASSERT_TRUE(e->Add(std::move(r)).ok());
    std::vector<FinishedSample> v1;
    // A few steps, and on until something was verified (the suffix drafter needs some tokens of
    // the group to match first).
    for (int i = 0; i < 9 && (i < 3 || e->spec_stats().verify_steps == 0); ++i) {
      auto done = e->Step();
      ASSERT_TRUE(done.ok()) << done.status();
      for (auto& d : *done) v1.push_back(std::move(d));
    }
    EXPECT_GT(e->spec_stats().verify_steps, 0);
    const std::vector<SampleState> states = e->ExportAll();
    EXPECT_GT(states.size(), 100u);  // many samples are mid-way
    EXPECT_EQ(e->scheduler().stats().num_kv_blocks_used, 0);
    for (const SampleState& st : states) {
      auto id = f->Import(st);
      ASSERT_TRUE(id.ok()) << id.status();
    }
    auto rest = f->RunToCompletion();
    ASSERT_TRUE(rest.ok()) << rest.status();
    for (auto& d : *rest) v1.push_back(std::move(d));
    EXPECT_EQ(f->scheduler().stats().num_kv_blocks_used, 0);
    // The new version, on the engine that was speculating for the old one.
    const bool draft_model = ParseDrafterVariant(drafter)->drafter == DrafterKind::kDraftModel;
    ASSERT_TRUE(e->SetWeights(m2.get(), 2, draft_model ? draft2.get() : nullptr).ok());
    const auto v2 = RunAll(*e, requests(200));
    ASSERT_EQ(v1.size(), 384u);
    ASSERT_EQ(v2.size(), 384u);
    std::mt19937_64 rng(5);
    std::vector<double> pits1, pits2;
    for (const FinishedSample& d : v1) {
      ASSERT_EQ(d.generated_ids.size(), static_cast<size_t>(kTokens));
      AppendPits(*m1, d.prompt_ids, d.generated_ids, params, rng, &pits1);
    }
    for (const auto& [key, d] : v2) {
      EXPECT_EQ(d.version, 2);
      AppendPits(*m2, d.prompt_ids, d.generated_ids, params, rng, &pits2);
    }
    const double p1 = UniformityPValue(pits1, 20), p2 = UniformityPValue(pits2, 20);
    std::printf(
        "%s: exported mid-speculation, vs version 1: p = %.3f; after the swap, vs "
        "version 2: p = %.3f (%zu and %zu tokens)\n",
        drafter.c_str(), p1, p2, pits1.size(), pits2.size());
    EXPECT_GT(p1, 1e-3 / tests);
    EXPECT_GT(p2, 1e-3 / tests);
    // A check of the check: version 2's samples are not version 1's distribution (untruncated,
    // so that every token has a probability under version 1).
    engine::SamplingParams untruncated = params;
    untruncated.top_p = 1.0f;
    std::vector<double> crossed;
    for (const auto& [key, d] : v2) {
      AppendPits(*m1, d.prompt_ids, d.generated_ids, untruncated, rng, &crossed);
    }
    EXPECT_LT(UniformityPValue(crossed, 20), 1e-6);
  }
}

}  // namespace
}  // namespace laminar::rollout
