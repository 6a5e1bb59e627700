// The model drafters (layer_skip, draft_model): weight swaps, their reported forwards, batched
// drafting equal to one sequence at a time, independent chains, shared group prompts, the
// confidence stop and the draft vocabulary.
#include <gtest/gtest.h>

#include "tests/rollout/speculation/speculation_test_util.h"

namespace laminar::rollout {
namespace {

using namespace spec_test;  // NOLINT(google-build-using-namespace): the tests' own helpers

// OnWeights with a draft: the drafter drafts with that model from then on (greedy chains are its
// argmax chains; a draft vocabulary's head is rebuilt from it); a draft with another vocabulary
// is refused and the drafter keeps the one it had.
TEST(ModelDrafterTest, OnWeightsSwapsTheDraftModel) {
  const TinyModel tiny(engine::Backend::kCpu);
  const model::ModelConfig& config = tiny.config;
  const model::WeightStore other_weights = testing::RandomWeights(config, 9, 0.5f);
  auto other = *engine::LlamaModel::Create(config, other_weights, engine::Backend::kCpu);
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  const std::vector<int32_t> tokens = {1, 5, 9, 2, 7};
  auto argmax_chain = [&](const engine::LlamaModel& m) {
    std::vector<int32_t> seq = tokens, chain;
    for (int i = 0; i < 3; ++i) {
      engine::KvCache kv = m.NewCache(1, std::ssize(seq));
      const engine::SequenceSpan span(0, 0, std::ssize(seq));
      std::vector<float> logits;
      EXPECT_TRUE(
          m.Forward(seq, {&span, 1}, &kv, engine::LogitsFor::kLastTokenOfEachSequence, &logits)
              .ok());
      const auto best = static_cast<int32_t>(std::ranges::max_element(logits) - logits.begin());
      chain.push_back(best);
      seq.push_back(best);
    }
    return chain;
  };
  const std::vector<int32_t> want_before = argmax_chain(*tiny.lm),
                             want_after = argmax_chain(*other);
  ASSERT_NE(want_before, want_after);  // the two models draft differently
  for (const int64_t draft_vocab : {int64_t{0}, int64_t{12}}) {
    SCOPED_TRACE("draft_vocab " + std::to_string(draft_vocab));
    auto drafter = ModelDrafter::DraftModel(tiny.lm.get(), 0.0, 1, draft_vocab);
    ASSERT_TRUE(drafter->OnWeights(tiny.lm.get()).ok());
    auto propose = [&] {
      return drafter
          ->Propose({.seq = 0,
                     .group = 0,
                     .tokens = tokens,
                     .num_prompt_tokens = 4,
                     .max_nodes = 3,
                     .sampling = &greedy})
          .tokens;
    };
    if (draft_vocab == 0) {
      EXPECT_EQ(propose(), want_before);
    }
    ASSERT_TRUE(drafter->OnWeights(tiny.lm.get(), other.get()).ok());
    EXPECT_EQ(drafter->model(), other.get());
    if (draft_vocab == 0) {
      EXPECT_EQ(propose(), want_after);
    } else {
      propose();
      EXPECT_GT(drafter->draft_vocab_size(), 0);  // rebuilt from the new draft
    }
    model::ModelConfig wider = config;
    wider.vocab_size += 1;
    const model::WeightStore wider_weights = testing::RandomWeights(wider, 5, 0.5f);
    auto bad = *engine::LlamaModel::Create(wider, wider_weights, engine::Backend::kCpu);
    const Status refused = drafter->OnWeights(tiny.lm.get(), bad.get());
    EXPECT_NE(refused.message().find("vocabulary"), std::string::npos) << refused;
    EXPECT_EQ(drafter->model(), other.get());
  }
}

// A model drafter reports the forwards it ran: the catch-up (all of the sequence on its first
// draft, only what was emitted since on the next) gives the first token, then a row per token.
TEST(ModelDrafterTest, ReportsItsForwards) {
  const TinyModel tiny(engine::Backend::kCpu);
  const model::ModelConfig& config = tiny.config;
  const auto& model = tiny.lm;
  auto drafter = ModelDrafter::DraftModel(model.get(), 0.0, 1);
  ASSERT_TRUE(drafter->OnWeights(model.get()).ok());
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<int32_t> tokens = {1, 5, 9, 2, 7};
  auto propose = [&] {
    return drafter->Propose({.seq = 0,
                             .group = 0,
                             .tokens = tokens,
                             .num_prompt_tokens = 4,
                             .max_nodes = 3,
                             .sampling = &greedy});
  };
  auto rows = [&] {
    std::vector<int64_t> r;
    for (const DraftForward& f : drafter->last_forwards()) {
      EXPECT_FALSE(f.catch_up);  // Propose alone never splits a catch-up off
      EXPECT_GE(f.seconds, 0.0);
      r.push_back(f.rows);
    }
    return r;
  };
  const DraftTree first = propose();
  ASSERT_EQ(first.size(), 3);
  EXPECT_EQ(rows(), (std::vector<int64_t>{5, 1, 1}));
  // The policy accepted the first drafted token and then sampled another one.
  tokens.push_back(first.tokens[0]);
  tokens.push_back((first.tokens[1] + 1) % static_cast<int32_t>(config.vocab_size));
  propose();
  const std::vector<int64_t> second = rows();
  ASSERT_EQ(second.size(), 3u);
  EXPECT_GE(second[0], 1);
  EXPECT_LE(second[0], 2);
  // What a Propose would feed now, without proposing: the new tokens, or all of an unseen one.
  tokens.push_back(3);
  EXPECT_EQ(drafter->CatchUpTokens({.seq = 0, .tokens = tokens}), 1);
  EXPECT_EQ(drafter->CatchUpTokens({.seq = 7, .tokens = tokens}), std::ssize(tokens));
  SuffixDrafter suffix({});
  EXPECT_TRUE(suffix.last_forwards().empty());
  EXPECT_EQ(suffix.CatchUpTokens({.seq = 0, .tokens = tokens}), 0);
}

// Batched drafting: chains drafted in lockstep for several sequences (one forward per depth, cold
// catch-ups in a forward of their own) are the chains each sequence gets alone (greedy), and a
// sampled batch draws every chain from the drafter's distribution given its own sequence.
TEST(ModelDrafterTest, ProposeBatchEqualsOneSequenceAtATime) {
  const TinyModel tiny(engine::Backend::kReference);
  const auto& model = tiny.lm;
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 2, 7}, {3, 3, 8}, {4}};
  const std::vector<int64_t> nodes = {3, 2, 0};  // the third asks for nothing
  auto context = [&](size_t i) {
    return DraftContext{.seq = static_cast<int64_t>(i),
                        .group = 0,
                        .tokens = seqs[i],
                        .num_prompt_tokens = 1,
                        .max_nodes = nodes[i],
                        .sampling = &greedy};
  };
  auto alone = ModelDrafter::DraftModel(model.get(), 0.0, 1);
  auto batched = ModelDrafter::DraftModel(model.get(), 0.0, 1);
  ASSERT_TRUE(alone->OnWeights(model.get()).ok());
  ASSERT_TRUE(batched->OnWeights(model.get()).ok());
  for (int round = 0; round < 2; ++round) {
    std::vector<DraftContext> contexts;
    for (size_t i = 0; i < seqs.size(); ++i) contexts.push_back(context(i));
    const std::vector<DraftTree> trees = batched->ProposeBatch(contexts, /*warm_catch_up=*/2);
    ASSERT_EQ(trees.size(), seqs.size());
    std::vector<std::pair<int64_t, bool>> forwards;
    for (const DraftForward& f : batched->last_forwards())
      forwards.emplace_back(f.rows, f.catch_up);
    if (round == 0) {
      // Both cold (5 + 3 tokens to catch up, more than 2): their own forward, then the chains'
      // second tokens (2 rows) and the first chain's third (1 row).
      EXPECT_EQ(forwards,
                (std::vector<std::pair<int64_t, bool>>{{8, true}, {2, false}, {1, false}}));
    } else {
      // Warm: each fed its last drafted token and the one appended (2 + 2 rows) with the rest.
      EXPECT_EQ(forwards,
                (std::vector<std::pair<int64_t, bool>>{{4, false}, {2, false}, {1, false}}));
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      const DraftTree want = nodes[i] > 0 ? alone->Propose(context(i)) : DraftTree{};
      EXPECT_EQ(trees[i].tokens, want.tokens) << "round " << round << " sequence " << i;
      EXPECT_EQ(trees[i].parents, want.parents);
      EXPECT_TRUE(trees[i].child_q.empty());
    }
    // The sequences take their chains and one more token each.
    for (size_t i = 0; i < 2; ++i) {
      seqs[i].insert(seqs[i].end(), trees[i].tokens.begin(), trees[i].tokens.end());
      seqs[i].push_back(6);
    }
  }
  // Sampled: each chain's rows are the drafter's distribution after its own sequence.
  engine::SamplingParams t1;
  t1.temperature = 1;
  std::vector<DraftContext> contexts;
  for (size_t i = 0; i < 2; ++i) {
    contexts.push_back(context(i));
    contexts.back().sampling = &t1;
  }
  const std::vector<DraftTree> trees = batched->ProposeBatch(contexts, 2);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(trees[i].size(), nodes[i]);
    ASSERT_EQ(trees[i].child_q.size(), static_cast<size_t>(nodes[i] + 1));
    std::vector<int32_t> prefix = seqs[i];
    for (int64_t j = 0; j < nodes[i]; ++j) {
      engine::KvCache cache = model->NewCache(1, 32);
      const engine::SequenceSpan span(0, 0, std::ssize(prefix));
      std::vector<float> logits;
      ASSERT_TRUE(model
                      ->Forward(prefix, {&span, 1}, &cache,
                                engine::LogitsFor::kLastTokenOfEachSequence, &logits)
                      .ok());
      engine::Sampler sampler(t1);
      engine::TokenDistribution dist;
      sampler.Distribution(logits, &dist);
      for (size_t k = 0; k < dist.ids.size(); ++k) {
        EXPECT_NEAR(trees[i].child_q[j][dist.ids[k]], dist.probs[k], 1e-5)
            << "sequence " << i << " node " << j;
      }
      prefix.push_back(trees[i].tokens[j]);
    }
  }
}

// Chains drafted in one batch for sequences with the same tokens are drawn independently (one
// random stream, each draw consumed once): from the same distributions, but not the same draws.
TEST(ModelDrafterTest, BatchedChainsAreIndependent) {
  const TinyModel tiny(engine::Backend::kReference);
  const auto& model = tiny.lm;
  auto drafter = ModelDrafter::DraftModel(model.get(), 0.0, 1);
  ASSERT_TRUE(drafter->OnWeights(model.get()).ok());
  engine::SamplingParams t1;
  t1.temperature = 1;
  const std::vector<int32_t> tokens = {1, 5, 9, 2, 7};
  int differ = 0;
  for (int64_t trial = 0; trial < 5; ++trial) {
    std::vector<DraftContext> contexts;
    for (int64_t k = 0; k < 2; ++k) {
      contexts.push_back({.seq = 2 * trial + k,
                          .group = trial,
                          .tokens = tokens,
                          .num_prompt_tokens = 4,
                          .max_nodes = 3,
                          .sampling = &t1});
    }
    const std::vector<DraftTree> trees = drafter->ProposeBatch(contexts, 2);
    ASSERT_EQ(trees[0].size(), 3);
    ASSERT_EQ(trees[1].size(), 3);
    // The first token's distribution is the same for both: the same sequence.
    ASSERT_EQ(trees[0].child_q[0], trees[1].child_q[0]);
    differ += trees[0].tokens != trees[1].tokens;
  }
  EXPECT_GE(differ, 4);  // equal 3-token chains are rare under this model's flat distributions
}

// The samples of a GRPO group share their prompt: the drafter prefills it once (the first
// sample of the group in a batch) and copies its KV to the others, then and later, and their
// chains are those each gets alone.
TEST(ModelDrafterTest, ASiblingsPromptIsCopiedNotRecomputed) {
  const TinyModel tiny(engine::Backend::kReference);
  const auto& model = tiny.lm;
  engine::SamplingParams greedy;
  greedy.temperature = 0;
  const std::vector<int32_t> prompt = {1, 5, 9, 2};
  std::vector<std::vector<int32_t>> seqs;
  for (int32_t first : {7, 3, 8}) {
    seqs.push_back(prompt);
    seqs.back().push_back(first);
  }
  auto context = [&](int64_t i, int64_t group) {
    return DraftContext{.seq = i,
                        .group = group,
                        .tokens = seqs[static_cast<size_t>(i)],
                        .num_prompt_tokens = std::ssize(prompt),
                        .max_nodes = 2,
                        .sampling = &greedy};
  };
  auto alone = ModelDrafter::DraftModel(model.get(), 0.0, 1);
  auto shared = ModelDrafter::DraftModel(model.get(), 0.0, 1);
  ASSERT_TRUE(alone->OnWeights(model.get()).ok());
  ASSERT_TRUE(shared->OnWeights(model.get()).ok());
  auto forwards = [&] {
    std::vector<std::pair<int64_t, bool>> f;
    for (const DraftForward& x : shared->last_forwards()) f.emplace_back(x.rows, x.catch_up);
    return f;
  };
  // Samples 0 and 1 of group 5 start together: 0 prefills (5 rows), 1 copies the prompt and
  // feeds its own token with the warm ones, then one forward for both chains' second tokens.
  EXPECT_EQ(shared->CatchUpTokens(context(1, 5)), 5);
  const std::vector<DraftTree> first = shared->ProposeBatch(
      std::vector<DraftContext>{context(0, 5), context(1, 5)}, /*warm_catch_up=*/2);
  EXPECT_EQ(forwards(), (std::vector<std::pair<int64_t, bool>>{{5, true}, {1, false}, {2, false}}));
  // Sample 2 arrives later: only its own token to catch up; a sample of another group, all.
  EXPECT_EQ(shared->CatchUpTokens(context(2, 5)), 1);
  EXPECT_EQ(shared->CatchUpTokens(context(2, 6)), 5);
  const DraftContext third = context(2, 5);
  const std::vector<DraftTree> later = shared->ProposeBatch({&third, 1}, 2);
  EXPECT_EQ(forwards(), (std::vector<std::pair<int64_t, bool>>{{1, false}, {1, false}}));
  for (int64_t i = 0; i < 3; ++i) {
    const DraftTree want = alone->Propose(context(i, 5));
    const DraftTree& got = i < 2 ? first[static_cast<size_t>(i)] : later[0];
    EXPECT_EQ(got.tokens, want.tokens) << "sample " << i;
  }
  // Samples that end lend their prompts while others of the group run; the last to end keeps
  // the prompt's KV for the group's samples still to come (at batch 1 they run one after
  // another), and the copy drafts what a prefill would.
  shared->OnSequenceEnd(1, 5, seqs[1], 4);
  shared->OnSequenceEnd(2, 5, seqs[2], 4);
  EXPECT_EQ(shared->CatchUpTokens(context(1, 5)), 1);
  shared->OnSequenceEnd(0, 5, seqs[0], 4);
  EXPECT_EQ(shared->CatchUpTokens(context(1, 5)), 1);
  EXPECT_EQ(shared->CatchUpTokens(context(1, 6)), 5);
  seqs.push_back(prompt);
  seqs.back().push_back(7);
  const DraftContext next = context(3, 5);  // sample 0's tokens again, as a new sequence
  const std::vector<DraftTree> again = shared->ProposeBatch({&next, 1}, 2);
  EXPECT_EQ(forwards(), (std::vector<std::pair<int64_t, bool>>{{1, false}, {1, false}}));
  EXPECT_EQ(again[0].tokens, first[0].tokens);
  shared->OnSequenceEnd(3, 5, seqs[3], 4);
  // Only the prompt is kept: a later sample that shares more of an ended one's response still
  // catches up on everything after the prompt.
  seqs.push_back(prompt);
  for (int32_t t : {7, 8, 9}) seqs.back().push_back(t);
  const DraftContext longer = context(4, 5);
  shared->ProposeBatch({&longer, 1}, 2);
  shared->OnSequenceEnd(4, 5, seqs[4], 4);
  seqs.push_back(seqs[4]);
  seqs.back().push_back(10);
  EXPECT_EQ(shared->CatchUpTokens(context(5, 5)), 4);
  // Only the last kMaxPromptDonors (4) groups to end keep theirs: four more groups push group 5
  // out.
  for (int64_t g = 10; g < 14; ++g) {
    const DraftContext other = context(0, g);
    shared->ProposeBatch({&other, 1}, 2);
    shared->OnSequenceEnd(0, g, seqs[0], 4);
    EXPECT_EQ(shared->CatchUpTokens(context(1, g)), 1);
  }
  EXPECT_EQ(shared->CatchUpTokens(context(1, 5)), 5);
  EXPECT_EQ(shared->CatchUpTokens(context(1, 13)), 1);
  // New weights: no KV of the old ones is lent.
  ASSERT_TRUE(shared->OnWeights(model.get()).ok());
  EXPECT_EQ(shared->CatchUpTokens(context(1, 13)), 5);
}

// min_confidence stops a sampled chain once the product of its tokens' q falls below it; at 0 (the
// default) a chain runs to its budget.
TEST(ModelDrafterTest, MinConfidenceStopsASampledChain) {
  const TinyModel tiny(engine::Backend::kCpu);
  const auto& model = tiny.lm;
  engine::SamplingParams t1;
  t1.temperature = 1;
  const std::vector<int32_t> tokens = {1, 5, 9, 2, 7};
  for (const double min_confidence : {0.0, 0.999}) {
    auto drafter = ModelDrafter::DraftModel(model.get(), min_confidence, 1);
    ASSERT_TRUE(drafter->OnWeights(model.get()).ok());
    const DraftTree tree = drafter->Propose({.seq = 0,
                                             .group = 0,
                                             .tokens = tokens,
                                             .num_prompt_tokens = 4,
                                             .max_nodes = 6,
                                             .sampling = &t1});
    // No token of a 32-token random model has q >= 0.999: the strict drafter stops after one.
    EXPECT_EQ(tree.size(), min_confidence == 0 ? 6 : 1) << "min_confidence " << min_confidence;
  }
}

// The draft vocabulary: the lowest ids plus every token seen; drafts and their q stay inside it,
// and a weight swap keeps what was seen.
TEST(ModelDrafterTest, DraftVocabularyGrowsWithTheTokensSeen) {
  const TinyModel tiny(engine::Backend::kCpu);
  const model::ModelConfig& config = tiny.config;
  const auto& model = tiny.lm;
  auto drafter = ModelDrafter::DraftModel(model.get(), 0.0, 1, /*draft_vocab=*/4);
  ASSERT_TRUE(drafter->OnWeights(model.get()).ok());
  EXPECT_EQ(drafter->draft_vocab_size(), 4);
  engine::SamplingParams t1;
  t1.temperature = 1;
  const std::vector<int32_t> tokens = {1, 20, 30, 20};
  for (int round = 0; round < 20; ++round) {
    const DraftTree tree = drafter->Propose({.seq = round,
                                             .group = 0,
                                             .tokens = tokens,
                                             .num_prompt_tokens = 4,
                                             .max_nodes = 4,
                                             .sampling = &t1});
    ASSERT_EQ(tree.child_q.size(), static_cast<size_t>(tree.size()) + 1);
    for (int64_t j = 0; j < tree.size(); ++j) {
      const int32_t token = tree.tokens[j];
      EXPECT_TRUE(token < 4 || token == 20 || token == 30) << token;
      const std::vector<float>& q = tree.child_q[j];
      for (int32_t v = 4; v < config.vocab_size; ++v) {
        if (v != 20 && v != 30) {
          ASSERT_EQ(q[v], 0.f) << "token " << v;
        }
      }
    }
  }
  EXPECT_EQ(drafter->draft_vocab_size(), 6);  // 0..3, 20 and 30
  drafter->OnSequenceEnd(0, 0, std::vector<int32_t>{1, 20, 30, 20, 25}, 4);
  ASSERT_TRUE(drafter->OnWeights(model.get()).ok());  // a new version keeps the tokens seen
  EXPECT_EQ(drafter->draft_vocab_size(), 7);
  auto whole = ModelDrafter::DraftModel(model.get(), 0.0, 1, config.vocab_size);
  ASSERT_TRUE(whole->OnWeights(model.get()).ok());
  EXPECT_EQ(whole->draft_vocab_size(), 0);  // all of it: the model's own head
  // A new sequence's prompt takes it past half the vocabulary: the whole head from then on.
  std::vector<int32_t> wide(17);
  std::iota(wide.begin(), wide.end(), 4);
  drafter->Propose({.seq = 100,
                    .group = 1,
                    .tokens = wide,
                    .num_prompt_tokens = 17,
                    .max_nodes = 2,
                    .sampling = &t1});
  EXPECT_EQ(drafter->draft_vocab_size(), 0);
  EXPECT_EQ(ParseDrafterVariant("draft_model+vocab+async")->drafter, DrafterKind::kDraftModel);
  EXPECT_TRUE(ParseDrafterVariant("draft_model+vocab+async")->vocab);
  EXPECT_TRUE(ParseDrafterVariant("layer_skip+async+vocab")->async_draft);
  EXPECT_FALSE(ParseDrafterVariant("suffix")->async_draft);
  EXPECT_FALSE(ParseDrafterVariant("suffix+vocab+nothing").ok());
  // The registry names every kind once, and a name reads back as its kind.
  for (const DrafterEntry& e : DrafterRegistry()) {
    EXPECT_EQ(DrafterName(e.kind), e.name);
    EXPECT_EQ(*ParseDrafterKind(e.name), e.kind);
  }
  const Status unknown = ParseDrafterKind("medusa").status();
  EXPECT_NE(unknown.message().find("'medusa' is not one of off, suffix, layer_skip, draft_model"),
            std::string::npos)
      << unknown;
}

}  // namespace
}  // namespace laminar::rollout
