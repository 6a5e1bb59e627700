// Trainer on tiny random models: a step's metrics and version, non-finite steps skipped,
// gradient accumulation equal to one big micro-batch, 2-rank data parallel (Gloo over loopback)
// equal to one rank on the combined batch, resume bit-identical, lr = 0 logprobs equal to the
// engine's sampled logprobs, and bad samples.
#include "trainer/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "engine/llama_model.h"
#include "engine/sampler.h"
#include "tests/model/random_weights.h"
#include "tests/test_util.h"

namespace laminar::trainer {
namespace {

model::ModelConfig Config() {
  auto c = laminar::testing::TinyLlamaConfig();
  c.tie_word_embeddings = true;
  return c;
}

// `groups` GRPO groups of 2 samples with random prompts/responses, behaviour logprobs slightly
// off the policy's and 0/1 scores.
std::vector<TrainSample> Samples(int groups, uint32_t seed, int64_t first_group = 0) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 31);
  std::uniform_int_distribution<int> len(1, 6);
  std::vector<TrainSample> out;
  for (int g = 0; g < groups; ++g) {
    for (int k = 0; k < 2; ++k) {
      TrainSample s;
      for (int i = len(rng); i > 0; --i) s.prompt_ids.push_back(id(rng));
      for (int i = len(rng); i > 0; --i) {
        s.response_ids.push_back(id(rng));
        s.behavior_logprobs.push_back(-3.4f + 0.1f * static_cast<float>(i % 3));
      }
      s.score = k;
      s.group_id = first_group + g;
      out.push_back(std::move(s));
    }
  }
  return out;
}

// `groups` GRPO groups of `n` samples, each group's samples with one prompt (2..7 tokens).
std::vector<TrainSample> GroupSamples(int groups, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 31);
  std::uniform_int_distribution<int> len(1, 6);
  std::vector<TrainSample> out;
  for (int g = 0; g < groups; ++g) {
    std::vector<int32_t> prompt;
    for (int i = len(rng) + 1; i > 0; --i) prompt.push_back(id(rng));
    for (int k = 0; k < n; ++k) {
      TrainSample s;
      s.prompt_ids = prompt;
      for (int i = len(rng); i > 0; --i) {
        s.response_ids.push_back(id(rng));
        s.behavior_logprobs.push_back(-3.4f + 0.1f * static_cast<float>(i % 3));
      }
      s.score = (k + g) % 2;
      s.group_id = g;
      out.push_back(std::move(s));
    }
  }
  return out;
}

// Runs fn(rank, collective) on `world` threads, each rank with its own Gloo collective on a fresh
// loopback rendezvous; returns each rank's status.
std::vector<Status> RunRanks(int world,
                             const std::function<Status(int, std::unique_ptr<Collective>)>& fn) {
  const std::string address = "tcp://127.0.0.1:" + std::to_string(laminar::testing::FreeTcpPort());
  std::vector<Status> status(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      CollectiveOptions o;
      o.backend = "gloo";
      o.rendezvous_address = address;
      o.rank = r;
      o.world_size = world;
      o.rendezvous_timeout_ms = 20000;
      auto c = CreateCollective(o);
      status[r] = c.ok() ? fn(r, std::move(*c)) : c.status();
    });
  }
  for (auto& th : threads) th.join();
  return status;
}

TrainerConfig BaseConfig() {
  TrainerConfig c;
  c.optimizer.lr = 1e-2;
  c.micro_batch_tokens = 1 << 20;
  return c;
}

std::unique_ptr<Trainer> MakeTrainer(const TrainerConfig& config,
                                     std::unique_ptr<Collective> collective = nullptr) {
  auto cfg = Config();
  auto t = Trainer::Create(cfg, laminar::testing::RandomWeights(cfg, 21, 0.3f), config,
                           std::move(collective));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(TrainerTest, StepReportsVerlMetricsAndAdvancesTheVersion) {
  auto config = BaseConfig();
  config.loss.kl_coef = 0.01;
  config.loss.entropy_coef = 0.001;
  config.mini_batch_size = 2;
  config.ppo_epochs = 2;
  config.shuffle = true;
  auto t = MakeTrainer(config);
  const std::vector<float> before(t->params().values().begin(), t->params().values().end());
  auto m = t->Step(Samples(3, 1));
  ASSERT_TRUE(m.ok()) << m.status();
  for (const char* key : {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy",
                          "actor/grad_norm", "actor/lr", "actor/kl_loss", "rollout_corr/kl",
                          "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean",
                          "response_length/mean", "timing_s/update_actor", "perf/throughput"}) {
    EXPECT_TRUE(m->count(key)) << key;
  }
  EXPECT_EQ(m->at("critic/score/mean"), 0.5);
  EXPECT_GT(m->at("actor/grad_norm"), 0);
  EXPECT_EQ(t->policy_version(), 1);
  EXPECT_EQ(t->global_step(), 1);
  EXPECT_NE(before, std::vector<float>(t->params().values().begin(), t->params().values().end()));
}

TEST(TrainerTest, NonFiniteLossSkipsTheUpdateAndCountsIt) {
  // Overflowing weights make every logprob non-finite.
  auto cfg = Config();
  auto weights = laminar::testing::RandomWeights(cfg, 21, 0.3f);
  auto w = weights.GetMutable("model.norm.weight");
  ASSERT_TRUE(w.ok());
  for (int64_t i = 0; i < (*w)->num_elements(); ++i) (*w)->data_as<float>()[i] = 1e38f;
  auto bad = Trainer::Create(cfg, weights, BaseConfig(), nullptr);
  ASSERT_TRUE(bad.ok());
  const std::vector<float> before((*bad)->params().values().begin(),
                                  (*bad)->params().values().end());
  auto m = (*bad)->Step(Samples(2, 2));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->at("actor/update_applied"), 0.0);
  EXPECT_EQ(m->at("actor/skipped_steps"), 1.0);
  EXPECT_EQ(before,
            std::vector<float>((*bad)->params().values().begin(), (*bad)->params().values().end()));
}

// Gradient accumulation: micro-batches of a few tokens give the update of one micro-batch.
TEST(TrainerTest, MicroBatchesAccumulateToTheWholeBatch) {
  auto whole = MakeTrainer(BaseConfig());
  auto config = BaseConfig();
  config.micro_batch_tokens = 7;
  auto split = MakeTrainer(config);
  auto samples = Samples(4, 3);
  ASSERT_TRUE(whole->Step(samples).ok());
  ASSERT_TRUE(split->Step(samples).ok());
  auto a = whole->params().values(), b = split->params().values();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6f) << i;
}

// A group's shared prompt computed once gives the logprobs, loss, metrics and update of every
// sample packed whole: one micro-batch, micro-batches that split a group (each part gets its own
// copy of the prompt), and with the separate pi_old / pi_ref passes (mini-batches, KL).
TEST(TrainerTest, SharedPromptsTrainExactlyAsWholeSamples) {
  struct Case {
    const char* name;
    int64_t micro_batch_tokens;
    int64_t mini_batch_size;
    double kl_coef;
  };
  for (const Case& c : {Case{"one micro-batch", 1 << 20, 0, 0.0}, Case{"split groups", 9, 0, 0.0},
                        Case{"mini-batches and KL", 1 << 20, 6, 0.01}}) {
    SCOPED_TRACE(c.name);
    auto config = BaseConfig();
    config.micro_batch_tokens = c.micro_batch_tokens;
    config.mini_batch_size = c.mini_batch_size;
    config.loss.kl_coef = c.kl_coef;
    config.share_prompts = false;
    auto whole = MakeTrainer(config);
    config.share_prompts = true;
    auto shared = MakeTrainer(config);
    const auto samples = GroupSamples(3, 4, 7);
    auto lw = whole->ResponseLogprobs(samples);
    auto ls = shared->ResponseLogprobs(samples);
    ASSERT_TRUE(lw.ok() && ls.ok());
    for (size_t i = 0; i < samples.size(); ++i) {
      ASSERT_EQ((*lw)[i].size(), (*ls)[i].size());
      for (size_t j = 0; j < (*lw)[i].size(); ++j) {
        ASSERT_NEAR((*lw)[i][j], (*ls)[i][j], 1e-5) << "sample " << i << " token " << j;
      }
    }
    for (int step = 0; step < 2; ++step) {
      auto mw = whole->Step(samples);
      auto ms = shared->Step(samples);
      ASSERT_TRUE(mw.ok() && ms.ok());
      for (const char* key : {"actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "actor/entropy",
                              "rollout_corr/abs_logprob_diff_mean", "perf/total_num_tokens"}) {
        if (!mw->count(key)) continue;
        EXPECT_NEAR(mw->at(key), ms->at(key), 1e-5 * std::max(1.0, std::abs(mw->at(key)))) << key;
      }
      if (c.micro_batch_tokens > 1000) {  // one micro-batch: the prompts were computed once
        EXPECT_LT(ms->at("actor/activation_bytes"), mw->at("actor/activation_bytes"));
      }
      auto a = whole->params().values(), b = shared->params().values();
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_NEAR(a[i], b[i], 1e-5f) << "step " << step << ", " << i;
    }
  }
}

// 2 ranks (threads, Gloo over loopback TCP) on halves of a batch end with the weights of 1 rank on
// the whole batch.
TEST(TrainerTest, TwoDataParallelRanksEqualOneRankOnTheCombinedBatch) {
  auto config = BaseConfig();
  config.optimizer.name = "adamw";
  auto single = MakeTrainer(config);
  std::vector<std::vector<TrainSample>> halves = {Samples(2, 5, 0), Samples(2, 6, 2)};
  std::vector<TrainSample> combined = halves[0];
  combined.insert(combined.end(), halves[1].begin(), halves[1].end());
  std::vector<std::unique_ptr<Trainer>> ranks(2);
  auto status = RunRanks(2, [&](int r, std::unique_ptr<Collective> c) {
    ranks[r] = MakeTrainer(config, std::move(c));
    for (int step = 0; step < 2; ++step)
      LAMINAR_RETURN_IF_ERROR(ranks[r]->Step(halves[r]).status());
    return OkStatus();
  });
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  for (int step = 0; step < 2; ++step) ASSERT_TRUE(single->Step(combined).ok());
  auto want = single->params().values();
  for (int r = 0; r < 2; ++r) {
    auto got = ranks[r]->params().values();
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.f, std::abs(want[i])))
          << "rank " << r << " " << i;
    }
  }
}

// ZeRO-1: 2 ranks that each keep half of the AdamW state train as 1 rank on the whole batch; the
// checkpoint they save holds the whole state, so 1 rank resumed from it goes on as they would.
TEST(TrainerTest, ZeroOneRanksKeepHalfTheOptimizerStateAndTrainAsOneRank) {
  auto config = BaseConfig();
  config.optimizer.name = "adamw";
  std::vector<std::vector<TrainSample>> halves = {Samples(2, 5, 0), Samples(2, 6, 2)};
  std::vector<TrainSample> combined = halves[0];
  combined.insert(combined.end(), halves[1].begin(), halves[1].end());
  const auto dir = laminar::testing::TempDir("zero1_ckpt").string();
  auto zero = config;
  zero.zero_stage = 1;
  std::vector<std::unique_ptr<Trainer>> ranks(2);
  std::vector<std::map<std::string, double>> metrics(2);
  auto status = RunRanks(2, [&](int r, std::unique_ptr<Collective> c) {
    ranks[r] = MakeTrainer(zero, std::move(c));
    for (int step = 0; step < 2; ++step) {
      LAMINAR_ASSIGN_OR_RETURN(metrics[r], ranks[r]->Step(halves[r]));
    }
    LAMINAR_RETURN_IF_ERROR(ranks[r]->SaveCheckpoint(dir, {}).status());
    return ranks[r]->Step(halves[r]).status();
  });
  ASSERT_TRUE(status[0].ok()) << status[0];
  ASSERT_TRUE(status[1].ok()) << status[1];
  auto single = MakeTrainer(config);
  std::map<std::string, double> single_metrics;
  for (int step = 0; step < 2; ++step) {
    auto m = single->Step(combined);
    ASSERT_TRUE(m.ok()) << m.status();
    single_metrics = *m;
  }
  auto resumed = MakeTrainer(config);
  ASSERT_TRUE(resumed->LoadCheckpoint(dir).ok());
  ASSERT_TRUE(resumed->Step(combined).ok());
  ASSERT_TRUE(single->Step(combined).ok());
  auto want = single->params().values();
  for (const Trainer* t : {ranks[0].get(), ranks[1].get(), resumed.get()}) {
    auto got = t->params().values();
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.f, std::abs(want[i]))) << i;
    }
  }
  const double whole = single_metrics.at("actor/optimizer_state_bytes");
  EXPECT_EQ(whole, static_cast<double>(single->params().num_elements() * 2 * sizeof(float)));
  for (int r = 0; r < 2; ++r) {
    EXPECT_NEAR(metrics[r].at("actor/optimizer_state_bytes") / whole, 0.5, 1e-3) << "rank " << r;
    EXPECT_LT(metrics[r].at("actor/rank_state_bytes"), single_metrics.at("actor/rank_state_bytes"));
  }
}

TEST(TrainerTest, ResumeFromACheckpointContinuesBitIdentically) {
  auto config = BaseConfig();
  config.shuffle = true;
  config.mini_batch_size = 2;
  const auto dir = laminar::testing::TempDir("ckpt").string();
  auto uninterrupted = MakeTrainer(config);
  for (int step = 0; step < 3; ++step) ASSERT_TRUE(uninterrupted->Step(Samples(2, 10 + step)).ok());
  {
    auto first = MakeTrainer(config);
    ASSERT_TRUE(first->Step(Samples(2, 10)).ok());
    ASSERT_TRUE(first->SaveCheckpoint(dir, {{"cursor", 1}}).ok());
    ASSERT_TRUE(first->Step(Samples(2, 99)).ok());  // work lost in a crash
  }
  auto resumed = MakeTrainer(config);
  auto user = resumed->LoadCheckpoint(dir);
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_EQ((*user)["cursor"], 1);
  EXPECT_EQ(resumed->global_step(), 1);
  for (int step = 1; step < 3; ++step) ASSERT_TRUE(resumed->Step(Samples(2, 10 + step)).ok());
  auto a = uninterrupted->params().values(), b = resumed->params().values();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
  EXPECT_EQ(resumed->policy_version(), 3);
}

// With lr = 0 the trainer's logprobs of sampled tokens equal those the engine recorded while
// sampling them (no truncation: the sampled distribution is softmax(logits / temperature), and
// the trainer computes it at the rollout's temperature).
void ExpectTrainerLogprobsEqualEngines(double temperature);

TEST(TrainerTest, LogprobsEqualTheEnginesSampledLogprobs) {
  for (double temperature : {1.0, 0.6}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    ExpectTrainerLogprobsEqualEngines(temperature);
  }
}

void ExpectTrainerLogprobsEqualEngines(double temperature) {
  auto cfg = Config();
  auto weights = laminar::testing::RandomWeights(cfg, 21, 0.3f);
  auto lm = engine::LlamaModel::Create(cfg, weights);
  ASSERT_TRUE(lm.ok());
  TrainSample s;
  s.prompt_ids = {3, 17, 9};
  engine::SamplingParams sp;
  sp.seed = 5;
  sp.temperature = static_cast<float>(temperature);
  engine::Sampler sampler(sp);
  auto cache = (*lm)->NewCache(1, 64);
  std::vector<int32_t> next = s.prompt_ids;
  int64_t pos = 0;
  std::vector<float> logits;
  for (int i = 0; i < 20; ++i) {
    engine::SequenceSpan span{0, pos, static_cast<int64_t>(next.size())};
    ASSERT_TRUE((*lm)
                    ->Forward(next, {&span, 1}, &cache, engine::LogitsFor::kLastTokenOfEachSequence,
                              &logits)
                    .ok());
    pos += static_cast<int64_t>(next.size());
    auto tok = sampler.Sample(logits);
    s.response_ids.push_back(tok.id);
    s.behavior_logprobs.push_back(tok.logprob);
    next = {tok.id};
  }
  auto config = BaseConfig();
  config.optimizer.lr = 0;
  config.graph.temperature = temperature;
  auto t = Trainer::Create(cfg, weights, config, nullptr);
  ASSERT_TRUE(t.ok());
  auto m = (*t)->Step({&s, 1});  // lr 0: the weights stay
  ASSERT_TRUE(m.ok()) << m.status();
  // The mismatch metrics see the agreement too.
  EXPECT_LT(m->at("rollout_corr/abs_logprob_diff_mean"), 1e-5);
  EXPECT_NEAR(m->at("rollout_corr/ppl_ratio"), 1.0, 1e-5);
  auto lp = (*t)->ResponseLogprobs({&s, 1});
  ASSERT_TRUE(lp.ok()) << lp.status();
  for (size_t i = 0; i < s.response_ids.size(); ++i) {
    EXPECT_NEAR((*lp)[0][i], s.behavior_logprobs[i], 1e-5) << "token " << i;
  }
}

// The loss reads exactly the response tokens' logprobs: with pg, dr_grpo (advantages ±0.5 for
// scores 1 and 0) and token-mean, actor/pg_loss = −Σ A·logprob / (response tokens).
TEST(TrainerTest, LossCoversExactlyTheResponseTokens) {
  auto config = BaseConfig();
  config.optimizer.lr = 0;
  config.loss.loss = "pg";
  config.loss.is_level = "none";
  config.advantage.estimator = "dr_grpo";
  auto t = MakeTrainer(config);
  auto samples = Samples(1, 12);
  auto lp = t->ResponseLogprobs(samples);
  ASSERT_TRUE(lp.ok());
  double sum = 0, count = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double a = samples[i].score - 0.5;
    for (float x : (*lp)[i]) {
      sum += a * x;
      count += 1;
    }
  }
  auto m = t->Step(samples);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NEAR(m->at("actor/pg_loss"), -sum / count, 1e-6);
}

// Ranks that resume from different checkpoints are refused before they train together.
TEST(TrainerTest, RanksAtDifferentStepsAreRefused) {
  const auto dir = laminar::testing::TempDir("ckpt").string();
  {
    auto t = MakeTrainer(BaseConfig());
    ASSERT_TRUE(t->Step(Samples(1, 1)).ok());
    ASSERT_TRUE(t->SaveCheckpoint(dir, {}).ok());
  }
  auto status = RunRanks(2, [&](int r, std::unique_ptr<Collective> c) {
    auto t = MakeTrainer(BaseConfig(), std::move(c));
    if (r == 0) LAMINAR_RETURN_IF_ERROR(t->LoadCheckpoint(dir).status());  // rank 1 forgot
    return t->CheckRanksAgree();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), StatusCode::kFailedPrecondition) << status[r];
    EXPECT_NE(status[r].message().find("different steps"), std::string::npos) << status[r];
  }
}

TEST(TrainerTest, BadSamplesAndConfigsAreNamedErrors) {
  auto t = MakeTrainer(BaseConfig());
  auto samples = Samples(1, 7);
  samples[1].prompt_ids.clear();
  auto st = t->Step(samples).status();
  EXPECT_NE(st.message().find("sample 1: empty prompt"), std::string::npos) << st;
  samples = Samples(1, 7);
  samples[0].response_ids.push_back(32);
  samples[0].behavior_logprobs.push_back(0);
  st = t->Step(samples).status();
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st;
  samples = Samples(1, 7);
  samples[1].behavior_logprobs.pop_back();
  st = t->Step(samples).status();
  EXPECT_NE(st.message().find("behaviour logprobs"), std::string::npos) << st;
  samples = Samples(1, 7);
  samples[0].behavior_logprobs.clear();  // the first lacks them, the second has them
  samples[1].source = "data.jsonl:2";
  st = t->Step(samples).status();
  EXPECT_NE(st.message().find("sample 0"), std::string::npos) << st;
  samples = Samples(1, 7);
  samples[1].behavior_logprobs[0] = 3.f;
  samples[1].source = "data.jsonl:2";
  st = t->Step(samples).status();
  EXPECT_NE(st.message().find("sample 1 (data.jsonl:2): behaviour logprob"), std::string::npos)
      << st;
  EXPECT_FALSE(t->Step({}).ok());
  auto config = BaseConfig();
  config.loss.loss = "ppo2";
  auto cfg = Config();
  auto bad = Trainer::Create(cfg, laminar::testing::RandomWeights(cfg, 1), config, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("vanilla"), std::string::npos) << bad.status();
  config = BaseConfig();
  config.loss.agg = "token-sum";
  bad = Trainer::Create(cfg, laminar::testing::RandomWeights(cfg, 1), config, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token-mean"), std::string::npos) << bad.status();
  EXPECT_EQ(t->global_step(), 0);  // nothing happened
}

}  // namespace
}  // namespace laminar::trainer
