// Training checkpoints: bit-exact save/load and resume, crash leftovers, corruption, mismatches,
// keep_last; and the Hugging Face export read back by the model loader.
#include "trainer/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "model/hf_checkpoint.h"
#include "model/rope_permute.h"
#include "tests/model/random_weights.h"
#include "tests/test_util.h"

namespace laminar::trainer {
namespace {

namespace fs = std::filesystem;

// A temporary folder (test_tmp/<Suite.Test>/ckpt) removed when the test ends.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::TempDir("ckpt"); }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_.parent_path(), ec);
  }
  std::string Dir(const std::string& name = "run") const { return (root_ / name).string(); }
  fs::path root_;
};

ParameterSet TinyParams(uint32_t seed, model::ModelConfig config = testing::TinyLlamaConfig()) {
  auto set = ParameterSet::FromWeights(config, testing::RandomWeights(config, seed));
  LAMINAR_CHECK(set.ok()) << set.status();
  return std::move(set).value();
}

std::unique_ptr<Optimizer> MakeOptimizer(const ParameterSet& params, const std::string& name) {
  OptimizerConfig c;
  c.name = name;
  c.lr = 1e-2;
  c.momentum = name == "sgd" ? 0.9 : 0.0;
  c.lr_schedule = "cosine";
  c.warmup_steps = 2;
  c.total_steps = 20;
  auto opt = CreateOptimizer(c, params.num_elements());
  LAMINAR_CHECK(opt.ok()) << opt.status();
  return std::move(opt).value();
}

void SetGrads(ParameterSet* params, uint32_t seed) {
  const std::vector<float> g = testing::RandomNormal(params->num_elements(), seed, 0.3f);
  std::copy(g.begin(), g.end(), params->grads().begin());
}

// A few steps, one of them skipped, so every counter and buffer is non-trivial.
void Train(ParameterSet* params, Optimizer* opt, int64_t first_step, int num_steps) {
  for (int i = 0; i < num_steps; ++i) {
    SetGrads(params, static_cast<uint32_t>(first_step + i));
    ASSERT_TRUE(opt->Step(params, first_step + i).applied);
  }
  params->grads()[5] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_FALSE(opt->Step(params, first_step + num_steps).applied);
}

bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Everything the optimizer and parameters hold, to check that a failed load changed nothing.
struct Snapshot {
  explicit Snapshot(const ParameterSet& p, const Optimizer& o)
      : values(p.values().begin(), p.values().end()), step(o.step()), skipped(o.skipped_steps()) {
    for (const auto& b : o.buffer_names())
      buffers[b].assign(o.buffer(b).begin(), o.buffer(b).end());
  }
  void ExpectSame(const ParameterSet& p, const Optimizer& o) const {
    EXPECT_TRUE(SameBits(p.values(), values));
    for (const auto& [b, data] : buffers) EXPECT_TRUE(SameBits(o.buffer(b), data)) << b;
    EXPECT_EQ(o.step(), step);
    EXPECT_EQ(o.skipped_steps(), skipped);
  }
  std::vector<float> values;
  std::map<std::string, std::vector<float>> buffers;
  int64_t step, skipped;
};

TrainingState MakeState(int64_t step, const std::string& rng_bytes) {
  TrainingState s;
  s.global_step = step;
  s.policy_version = step + 100;
  s.rng_states["sampler"] = rng_bytes;
  s.rng_states["binary"] = std::string("\x00\xff\x7f\n\"", 5);
  s.user = {{"cursor", {{"epoch", 1}, {"index", 17}}}, {"buffer", {1.5, "two", nullptr}}};
  return s;
}

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

void FlipBit(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

TEST_F(CheckpointTest, SaveThenLoadIsBitIdenticalAndResumesBitIdentically) {
  for (const std::string name : {"adamw", "sgd"}) {
    const std::string dir = Dir(name);
    ParameterSet params = TinyParams(1);
    auto opt = MakeOptimizer(params, name);
    Train(&params, opt.get(), 0, 3);
    std::mt19937_64 rng(42);
    rng.discard(1000);
    std::ostringstream rng_text;
    rng_text << rng;
    const TrainingState state = MakeState(3, rng_text.str());
    auto saved = SaveTrainingCheckpoint(dir, params, *opt, state);
    ASSERT_TRUE(saved.ok()) << saved.status();
    EXPECT_EQ(*saved, dir + "/step_3");
    EXPECT_EQ(Entries(*saved), (std::set<std::string>{"model.safetensors", "optimizer.safetensors",
                                                      "trainer_state.json"}));
    EXPECT_EQ(ReadFileToString(dir + "/latest").value(), "step_3\n");
    EXPECT_EQ(LatestCheckpointStep(dir).value(), 3);

    ParameterSet fresh = TinyParams(2);
    auto fresh_opt = MakeOptimizer(fresh, name);
    auto loaded = LoadTrainingCheckpoint(dir, &fresh, fresh_opt.get());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->path, dir + "/step_3");
    EXPECT_TRUE(SameBits(fresh.values(), params.values()));
    EXPECT_EQ(fresh_opt->buffer_names(), opt->buffer_names());
    for (const auto& b : opt->buffer_names()) {
      EXPECT_TRUE(SameBits(fresh_opt->buffer(b), opt->buffer(b))) << b;
    }
    EXPECT_EQ(fresh_opt->step(), 3);
    EXPECT_EQ(fresh_opt->skipped_steps(), 1);
    EXPECT_EQ(loaded->state.global_step, 3);
    EXPECT_EQ(loaded->state.policy_version, 103);
    EXPECT_EQ(loaded->state.rng_states, state.rng_states);
    EXPECT_EQ(loaded->state.user, state.user);
    EXPECT_EQ(loaded->optimizer_config.ToJson(), opt->config().ToJson());
    std::mt19937_64 restored;
    std::istringstream(loaded->state.rng_states.at("sampler")) >> restored;
    EXPECT_EQ(restored(), rng());

    // One more step from both: the same bits.
    SetGrads(&params, 77);
    SetGrads(&fresh, 77);
    ASSERT_TRUE(opt->Step(&params, 4).applied);
    ASSERT_TRUE(fresh_opt->Step(&fresh, 4).applied);
    EXPECT_TRUE(SameBits(fresh.values(), params.values())) << name;
    for (const auto& b : opt->buffer_names()) {
      EXPECT_TRUE(SameBits(fresh_opt->buffer(b), opt->buffer(b))) << b;
    }
  }
}

TEST_F(CheckpointTest, PlainSgdHasAnEmptyOptimizerFile) {
  ParameterSet params = TinyParams(1);
  OptimizerConfig c;
  c.name = "sgd";
  auto opt = CreateOptimizer(c, params.num_elements()).value();
  ASSERT_TRUE(opt->Step(&params, 0).applied);
  TrainingState state = MakeState(1, "x");
  state.user = 42;  // any JSON value
  ASSERT_TRUE(SaveTrainingCheckpoint(Dir(), params, *opt, state).ok());
  ParameterSet fresh = TinyParams(2);
  auto fresh_opt = CreateOptimizer(c, fresh.num_elements()).value();
  auto loaded = LoadTrainingCheckpoint(Dir(), &fresh, fresh_opt.get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(SameBits(fresh.values(), params.values()));
  EXPECT_EQ(fresh_opt->step(), 1);
  EXPECT_EQ(loaded->state.user, 42);
}

TEST_F(CheckpointTest, NoCheckpointIsNotFound) {
  ParameterSet params = TinyParams(1);
  auto opt = MakeOptimizer(params, "adamw");
  auto loaded = LoadTrainingCheckpoint(Dir("empty"), &params, opt.get());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, HalfWrittenTempFolderIsIgnoredThenCleanedUp) {
  const std::string dir = Dir();
  ParameterSet params = TinyParams(1);
  auto opt = MakeOptimizer(params, "adamw");
  Train(&params, opt.get(), 0, 2);
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(1, "a")).ok());
  const Snapshot at_step1(params, *opt);

  // A crash in the middle of saving step 2: a temporary folder with a truncated model file and no
  // trainer_state.json.
  const std::string partial = dir + "/.tmp-step_2-12345";
  fs::create_directories(partial);
  auto bytes = ReadFileToString(dir + "/step_1/model.safetensors").value();
  std::ofstream(partial + "/model.safetensors", std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  std::ofstream(dir + "/latest.tmp.12345") << "step_";  // and one of `latest`

  ParameterSet fresh = TinyParams(2);
  auto fresh_opt = MakeOptimizer(fresh, "adamw");
  auto loaded = LoadTrainingCheckpoint(dir, &fresh, fresh_opt.get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.global_step, 1);
  at_step1.ExpectSame(fresh, *fresh_opt);

  Train(&params, opt.get(), 3, 1);
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(2, "b")).ok());
  EXPECT_EQ(Entries(dir), (std::set<std::string>{"latest", "step_1", "step_2"}));
}

TEST_F(CheckpointTest, CorruptedOrTruncatedFileFailsNamingItAndLoadsNothing) {
  const std::string dir = Dir();
  ParameterSet params = TinyParams(1);
  auto opt = MakeOptimizer(params, "adamw");
  Train(&params, opt.get(), 0, 2);
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(1, "a")).ok());
  Train(&params, opt.get(), 3, 2);
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(2, "b")).ok());

  ParameterSet live = TinyParams(3);
  auto live_opt = MakeOptimizer(live, "adamw");
  Train(&live, live_opt.get(), 10, 1);
  const Snapshot before(live, *live_opt);

  const std::string model_path = dir + "/step_2/model.safetensors";
  const size_t size = fs::file_size(model_path);
  FlipBit(model_path, size - 100);  // inside the last tensor's data
  auto loaded = LoadTrainingCheckpoint(dir, &live, live_opt.get());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("step_2/model.safetensors"), std::string::npos)
      << loaded.status();
  before.ExpectSame(live, *live_opt);

  FlipBit(model_path, size - 100);  // restored
  const std::string opt_path = dir + "/step_2/optimizer.safetensors";
  FlipBit(opt_path, 12);  // inside the JSON header
  loaded = LoadTrainingCheckpoint(dir, &live, live_opt.get());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("step_2/optimizer.safetensors"), std::string::npos)
      << loaded.status();
  before.ExpectSame(live, *live_opt);

  fs::resize_file(opt_path, fs::file_size(opt_path) - 8);
  loaded = LoadTrainingCheckpoint(dir, &live, live_opt.get());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("optimizer.safetensors"), std::string::npos);
  EXPECT_NE(loaded.status().message().find("truncated"), std::string::npos) << loaded.status();
  before.ExpectSame(live, *live_opt);

  // The older checkpoint is still good.
  loaded = LoadTrainingCheckpoint(dir, &live, live_opt.get(), 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.policy_version, 101);
}

TEST_F(CheckpointTest, MismatchedModelOrOptimizerIsNamedAndLoadsNothing) {
  const std::string dir = Dir();
  ParameterSet params = TinyParams(1);
  auto opt = MakeOptimizer(params, "adamw");
  Train(&params, opt.get(), 0, 1);
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(1, "a")).ok());

  auto expect_error = [&](model::ModelConfig config, const std::string& optimizer,
                          const std::string& needle) {
    ParameterSet live = TinyParams(5, config);
    auto live_opt = MakeOptimizer(live, optimizer);
    const Snapshot before(live, *live_opt);
    auto loaded = LoadTrainingCheckpoint(dir, &live, live_opt.get());
    ASSERT_FALSE(loaded.ok()) << needle;
    EXPECT_NE(loaded.status().message().find(needle), std::string::npos) << loaded.status();
    before.ExpectSame(live, *live_opt);
  };
  auto config = testing::TinyLlamaConfig();
  auto wider = config;
  wider.intermediate_size = 32;
  expect_error(wider, "adamw", "'model.layers.0.mlp.down_proj.weight' has shape [16, 24]");
  auto biased = config;
  biased.attention_bias = true;
  expect_error(biased, "adamw", "'model.layers.0.self_attn.k_proj.bias' is missing");
  auto tied = config;
  tied.tie_word_embeddings = true;
  expect_error(tied, "adamw", "unexpected tensor 'lm_head.weight'");
  expect_error(config, "sgd", "saved by optimizer 'adamw'");
}

TEST_F(CheckpointTest, KeepLastDeletesOldOnesOnlyAfterANewOneIsComplete) {
  const std::string dir = Dir();
  ParameterSet params = TinyParams(1);
  auto opt = MakeOptimizer(params, "adamw");
  const std::vector<std::set<std::string>> expected = {{"latest", "step_1"},
                                                       {"latest", "step_1", "step_2"},
                                                       {"latest", "step_2", "step_3"},
                                                       {"latest", "step_3", "step_4"}};
  for (int64_t step = 1; step <= 4; ++step) {
    Train(&params, opt.get(), step * 10, 1);
    ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(step, "r")).ok());
    EXPECT_EQ(Entries(dir), expected[static_cast<size_t>(step - 1)]) << step;
  }

  // A save that fails at its last stage (`latest` cannot be replaced: it is a folder here) removes
  // its own folder and deletes nothing, even with keep_last 1.
  fs::remove(dir + "/latest");
  fs::create_directory(dir + "/latest");
  CheckpointSaveOptions keep_one;
  keep_one.keep_last = 1;
  auto failed = SaveTrainingCheckpoint(dir, params, *opt, MakeState(5, "r"), keep_one);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("latest"), std::string::npos) << failed.status();
  EXPECT_EQ(Entries(dir), (std::set<std::string>{"latest", "step_3", "step_4"}));
  fs::remove(dir + "/latest");
  ASSERT_TRUE(WriteFileAtomic(dir + "/latest", "step_4\n").ok());

  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(5, "r"), keep_one).ok());
  EXPECT_EQ(Entries(dir), (std::set<std::string>{"latest", "step_5"}));

  CheckpointSaveOptions keep_all;
  keep_all.keep_last = 0;
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(6, "r"), keep_all).ok());
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(7, "r"), keep_all).ok());
  EXPECT_EQ(Entries(dir), (std::set<std::string>{"latest", "step_5", "step_6", "step_7"}));
}

TEST_F(CheckpointTest, ExistingStepIsReplacedOnlyWhenAsked) {
  const std::string dir = Dir();
  ParameterSet params = TinyParams(1);
  auto opt = MakeOptimizer(params, "adamw");
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(3, "r")).ok());
  Train(&params, opt.get(), 0, 2);
  auto again = SaveTrainingCheckpoint(dir, params, *opt, MakeState(3, "r"));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("step_3"), std::string::npos);

  CheckpointSaveOptions overwrite;
  overwrite.overwrite = true;
  ASSERT_TRUE(SaveTrainingCheckpoint(dir, params, *opt, MakeState(3, "r"), overwrite).ok());
  EXPECT_EQ(Entries(dir), (std::set<std::string>{"latest", "step_3"}));
  ParameterSet fresh = TinyParams(2);
  auto fresh_opt = MakeOptimizer(fresh, "adamw");
  ASSERT_TRUE(LoadTrainingCheckpoint(dir, &fresh, fresh_opt.get()).ok());
  EXPECT_TRUE(SameBits(fresh.values(), params.values()));
  EXPECT_EQ(fresh_opt->step(), 2);
}

// ---------------------------------------------------------------------------------------------
// Hugging Face export

TEST_F(CheckpointTest, ExportedFolderLoadsBackWithEqualTensors) {
  auto config = testing::TinyLlamaConfig();
  ParameterSet params = TinyParams(1, config);
  const std::map<std::string, std::string> tokenizer = {{"tokenizer_config.json", "{\"a\": 1}\n"}};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const std::string dir = Dir(dtype == DType::kF32 ? "hf_f32" : "hf_bf16");
    ASSERT_TRUE(ExportHuggingFace(dir, config, params, tokenizer, dtype).ok());
    EXPECT_EQ(ReadFileToString(dir + "/tokenizer_config.json").value(), "{\"a\": 1}\n");
    auto loaded = model::LoadHfCheckpoint(dir);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->weights.size(), params.params().size());
    EXPECT_EQ(loaded->config.hidden_size, config.hidden_size);
    for (const ParamInfo& p : params.params()) {
      auto view = loaded->weights.Get(p.name);
      ASSERT_TRUE(view.ok()) << p.name;
      ASSERT_EQ(view->dtype(), dtype);
      ASSERT_EQ(view->shape(), p.shape);
      auto f32 = ToF32(*view);
      ASSERT_TRUE(f32.ok());
      auto value = params.Value(p.name);
      for (size_t i = 0; i < p.numel; ++i) {
        const float want = dtype == DType::kF32 ? value[i] : BF16ToFloat(FloatToBF16(value[i]));
        ASSERT_EQ(f32->data_as<float>()[i], want) << p.name << "[" << i << "]";
      }
    }
  }
  const std::string dir = Dir("hf_f32");
  auto exists = ExportHuggingFace(dir, config, params, {}, DType::kF32);
  EXPECT_EQ(exists.code(), StatusCode::kAlreadyExists);
  EXPECT_TRUE(ExportHuggingFace(dir, config, params, {}, DType::kF32, /*overwrite=*/true).ok());
  EXPECT_EQ(ExportHuggingFace(Dir("hf_f16"), config, params, {}, DType::kF16).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CheckpointTest, ExportOfInterleavedWeightsPermutesQkToRotateHalf) {
  auto config = testing::TinyLlamaConfig();
  config.rope_layout = model::RopeLayout::kInterleaved;
  ParameterSet params = TinyParams(4, config);
  const std::string dir = Dir("hf_interleaved");
  ASSERT_TRUE(ExportHuggingFace(dir, config, params, {}, DType::kF32).ok());
  auto loaded = model::LoadHfCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.rope_layout, model::RopeLayout::kRotateHalf);
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  const ParamInfo& info = params.Info(q);
  TensorView ours(static_cast<const void*>(params.Value(q).data()), DType::kF32, info.shape);
  auto want =
      model::ConvertRopeRows(ours, config.num_attention_heads, config.head_dim,
                             model::RopeLayout::kInterleaved, model::RopeLayout::kRotateHalf);
  ASSERT_TRUE(want.ok());
  auto got = loaded->weights.Get(q);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(std::memcmp(got->data(), want->data(), want->size_bytes()), 0);
  EXPECT_NE(std::memcmp(got->data(), ours.data(), ours.size_bytes()), 0) << "not permuted";
  const std::string v = "model.layers.1.self_attn.v_proj.weight";  // not permuted
  EXPECT_EQ(std::memcmp(loaded->weights.Get(v)->data(), params.Value(v).data(),
                        params.Value(v).size() * sizeof(float)),
            0);
}

}  // namespace
}  // namespace laminar::trainer
