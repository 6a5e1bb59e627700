// Hugging Face folders: save/load round trips (single file, shards, bf16, RoPE conversion),
// config.json parsing and the errors for bad configs and tensors.
#include "model/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "core/mapped_file.h"
#include "model/hf_config.h"
#include "model/llama2c.h"
#include "model/rope_permute.h"
#include "model/safetensors.h"
#include "tests/model/random_weights.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

namespace fs = std::filesystem;
using testing::RandomWeights;

ModelConfig TinyLlama() {
  ModelConfig c = testing::TinyLlamaConfig();
  c.max_position_embeddings = 16384;
  c.rope_theta = 500000.0;
  c.rope_scaling = RopeScaling{"llama3", 8.0, 1.0, 4.0, 8192};
  c.rms_norm_eps = 1e-5;
  c.bos_token_id = 1;
  c.eos_token_ids = {2, 3};
  return c;
}

void ExpectSameConfig(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  ASSERT_EQ(a.rope_scaling.has_value(), b.rope_scaling.has_value());
  if (a.rope_scaling) {
    EXPECT_EQ(a.rope_scaling->type, b.rope_scaling->type);
    EXPECT_EQ(a.rope_scaling->factor, b.rope_scaling->factor);
    EXPECT_EQ(a.rope_scaling->low_freq_factor, b.rope_scaling->low_freq_factor);
    EXPECT_EQ(a.rope_scaling->high_freq_factor, b.rope_scaling->high_freq_factor);
    EXPECT_EQ(a.rope_scaling->original_max_position_embeddings,
              b.rope_scaling->original_max_position_embeddings);
  }
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
}

bool SameBytes(const TensorView& a, const TensorView& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

void ExpectSameWeights(const WeightStore& a, const WeightStore& b) {
  ASSERT_EQ(a.Names(), b.Names());
  for (const std::string& name : a.Names()) {
    EXPECT_TRUE(SameBytes(a.Get(name).value(), b.Get(name).value())) << name;
  }
}

TEST(HfCheckpointTest, TinyLlamaRoundTrip) {
  auto root = testing::TempDir("hf_roundtrip");
  ModelConfig config = TinyLlama();
  WeightStore weights = RandomWeights(config, 1);
  HfSaveOptions options;
  options.tokenizer_files = {{"tokenizer.json", "{\"model\": {}}"},
                             {"tokenizer_config.json", "{}"}};
  std::string dir = (root / "ckpt").string();
  Status st = SaveHfCheckpoint(dir, config, weights, options);
  ASSERT_TRUE(st.ok()) << st;
  for (const char* f : {"model.safetensors", "config.json", "generation_config.json",
                        "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(dir) / f)) << f;
  }
  EXPECT_EQ(ReadFileToString(dir + "/tokenizer.json").value(), "{\"model\": {}}");
  EXPECT_EQ(std::distance(fs::directory_iterator(root), {}), 1);  // no temp folder left

  auto loaded = LoadHfCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameConfig(loaded->config, config);
  EXPECT_EQ(loaded->config.rope_layout, RopeLayout::kRotateHalf);
  EXPECT_EQ(loaded->torch_dtype, "float32");
  ExpectSameWeights(loaded->weights, weights);

  auto gen = ParseHfConfig(ReadFileToString(dir + "/config.json").value(), "config.json");
  ASSERT_TRUE(gen.ok()) << gen.status();
  EXPECT_NE(ReadFileToString(dir + "/generation_config.json")->find("\"eos_token_id\""),
            std::string::npos);

  // Existing folder: refused without overwrite, replaced with it.
  EXPECT_EQ(SaveHfCheckpoint(dir, config, weights, options).code(), StatusCode::kAlreadyExists);
  WeightStore other = RandomWeights(config, 2);
  options.overwrite = true;
  ASSERT_TRUE(SaveHfCheckpoint(dir, config, other, options).ok());
  auto reloaded = LoadHfCheckpoint(dir);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  ExpectSameWeights(reloaded->weights, other);
  EXPECT_EQ(std::distance(fs::directory_iterator(root), {}), 1);
}

TEST(HfCheckpointTest, ShardedFolderLoads) {
  auto root = testing::TempDir("hf_sharded");
  ModelConfig config = TinyLlama();
  config.tie_word_embeddings = true;
  WeightStore weights = RandomWeights(config, 3);
  HfSaveOptions options;
  options.max_shard_bytes = 4096;
  std::string dir = (root / "ckpt").string();
  ASSERT_TRUE(SaveHfCheckpoint(dir, config, weights, options).ok());
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));
  int shards = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    shards += e.path().filename().string().rfind("model-0", 0) == 0;
  }
  EXPECT_GT(shards, 2);
  auto loaded = LoadHfCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameConfig(loaded->config, config);
  ExpectSameWeights(loaded->weights, weights);

  // An index that maps a tensor to a shard lacking it is an error naming the tensor.
  std::string good_dir = dir;
  dir = (root / "corrupt").string();
  fs::copy(good_dir, dir);
  std::string index = ReadFileToString(dir + "/model.safetensors.index.json").value();
  std::string needle = "\"model.norm.weight\": \"";
  size_t at = index.find(needle);
  ASSERT_NE(at, std::string::npos);
  std::string first_shard = "model-00001-of-";
  ASSERT_NE(index.substr(at + needle.size(), first_shard.size()), first_shard);
  index.replace(at + needle.size(), first_shard.size(), first_shard);
  ASSERT_TRUE(WriteFileAtomic(dir + "/model.safetensors.index.json", index).ok());
  ASSERT_EQ(index.find(needle + "model-00001-of-"), at);  // sorted last: it was in a later shard
  auto bad = LoadHfCheckpoint(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'model.norm.weight'"), std::string::npos) << bad.status();
}

TEST(HfCheckpointTest, InterleavedStoreIsSavedRotateHalf) {
  auto root = testing::TempDir("hf_rope");
  ModelConfig config = TinyLlama();
  config.rope_layout = RopeLayout::kInterleaved;
  WeightStore weights = RandomWeights(config, 4);
  std::string dir = (root / "ckpt").string();
  ASSERT_TRUE(SaveHfCheckpoint(dir, config, weights, HfSaveOptions{}).ok());
  // The interleaved original, for scripts/check_hf_export.py --interleaved-source.
  std::map<std::string, TensorView> views;
  for (const std::string& name : weights.Names()) views[name] = weights.Get(name).value();
  ASSERT_TRUE(WriteSafetensors((root / "interleaved.safetensors").string(), views).ok());
  auto loaded = LoadHfCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto q = ConvertRopeRows(weights.Get("model.layers.1.self_attn.q_proj.weight").value(), 4, 4,
                           RopeLayout::kInterleaved, RopeLayout::kRotateHalf);
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(
      SameBytes(loaded->weights.Get("model.layers.1.self_attn.q_proj.weight").value(), q->view()));
  EXPECT_FALSE(SameBytes(loaded->weights.Get("model.layers.1.self_attn.q_proj.weight").value(),
                         weights.Get("model.layers.1.self_attn.q_proj.weight").value()));
  ModelConfig back = loaded->config;
  ASSERT_TRUE(ConvertRopeLayout(&back, &loaded->weights, RopeLayout::kInterleaved).ok());
  ExpectSameWeights(loaded->weights, weights);
}

TEST(HfCheckpointTest, Qwen2Bf16WithBiasAndTiedEmbeddings) {
  auto root = testing::TempDir("hf_qwen2");
  ModelConfig config = TinyLlama();
  config.architecture = "qwen2";
  config.attention_bias = true;
  config.tie_word_embeddings = true;
  config.rope_scaling.reset();
  config.bos_token_id = -1;
  config.eos_token_ids = {5};
  WeightStore weights = RandomWeights(config, 5);
  HfSaveOptions options;
  options.dtype = DType::kBF16;
  std::string dir = (root / "ckpt").string();
  Status st = SaveHfCheckpoint(dir, config, weights, options);
  ASSERT_TRUE(st.ok()) << st;
  auto loaded = LoadHfCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameConfig(loaded->config, config);
  EXPECT_EQ(loaded->torch_dtype, "bfloat16");
  TensorView bias = loaded->weights.Get("model.layers.0.self_attn.v_proj.bias").value();
  TensorView src = weights.Get("model.layers.0.self_attn.v_proj.bias").value();
  ASSERT_EQ(bias.dtype(), DType::kBF16);
  for (int64_t i = 0; i < src.num_elements(); ++i) {
    EXPECT_EQ(bias.data_as<uint16_t>()[i], FloatToBF16(src.data_as<float>()[i])) << i;
  }
}

// ---- errors ----

std::string BaseConfigJson() {
  return R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16,
    "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4})";
}

void ExpectConfigError(const std::string& json, const std::string& needle) {
  auto c = ParseHfConfig(json, "cfg/config.json");
  ASSERT_FALSE(c.ok()) << "expected an error containing " << needle;
  EXPECT_NE(c.status().message().find("cfg/config.json"), std::string::npos) << c.status();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status();
}

std::string Without(std::string json, const std::string& field) {
  size_t at = json.find("\"" + field + "\"");
  size_t end = json.find(',', at);
  return json.erase(at, end - at + 1);
}

TEST(HfConfigTest, DefaultsAndVariants) {
  auto c = ParseHfConfig(BaseConfigJson(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model.num_key_value_heads, 4);
  EXPECT_EQ(c->model.head_dim, 4);
  EXPECT_EQ(c->model.bos_token_id, 1);  // LlamaConfig defaults
  EXPECT_EQ(c->model.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c->model.rope_theta, 10000.0);
  EXPECT_FALSE(c->model.rope_scaling.has_value());

  std::string v5 = BaseConfigJson();
  v5.pop_back();
  v5 += R"(, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
    "bos_token_id": null, "eos_token_id": [7, 9], "dtype": "bfloat16"})";
  auto d = ParseHfConfig(v5, "config.json");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->model.rope_theta, 1e6);
  ASSERT_TRUE(d->model.rope_scaling.has_value());
  EXPECT_EQ(d->model.rope_scaling->type, "linear");
  EXPECT_EQ(d->model.rope_scaling->factor, 2.0);
  EXPECT_EQ(d->model.bos_token_id, -1);
  EXPECT_EQ(d->model.eos_token_ids, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(d->torch_dtype, "bfloat16");

  std::string qwen = BaseConfigJson();
  qwen.replace(qwen.find("LlamaForCausalLM"), 16, "Qwen2ForCausalLM");
  auto q = ParseHfConfig(qwen, "config.json");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->model.architecture, "qwen2");
  EXPECT_TRUE(q->model.attention_bias);

  // Mistral's sliding window caps the context (full attention equals it up to the window); a
  // null window or one past the context changes nothing.
  std::string mistral = BaseConfigJson();
  mistral.replace(mistral.find("LlamaForCausalLM"), 16, "MistralForCausalLM");
  auto full = ParseHfConfig(mistral, "config.json");
  ASSERT_TRUE(full.ok()) << full.status();
  const int64_t context = full->model.max_position_embeddings;
  mistral.pop_back();
  for (const auto& [window, want] : std::vector<std::pair<std::string, int64_t>>{
           {"4", 4}, {"null", context}, {"1000000", context}}) {
    auto m = ParseHfConfig(mistral + ", \"sliding_window\": " + window + "}", "config.json");
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->model.max_position_embeddings, want) << "sliding_window " << window;
  }
  ExpectConfigError(mistral + R"(, "sliding_window": 0})", "field 'sliding_window'");
}

TEST(HfConfigTest, BadFieldsAreNamed) {
  std::string base = BaseConfigJson();
  ExpectConfigError(Without(base, "hidden_size"), "field 'hidden_size': missing required field");
  std::string wrong = base;
  wrong.replace(wrong.find("\"hidden_size\": 16"), 17, "\"hidden_size\": \"16\"");
  ExpectConfigError(wrong, "field 'hidden_size': must be an integer");
  std::string frac = base;
  frac.replace(frac.find("\"vocab_size\": 32"), 16, "\"vocab_size\": 3.5");
  ExpectConfigError(frac, "field 'vocab_size'");
  std::string tie = base;
  tie.pop_back();
  ExpectConfigError(tie + R"(, "tie_word_embeddings": "yes"})", "field 'tie_word_embeddings'");
  ExpectConfigError(tie + R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4}})", "'yarn'");
  ExpectConfigError(tie + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 4}})",
                    "field 'rope_scaling.low_freq_factor'");
  ExpectConfigError(tie + R"(, "eos_token_id": [1, "x"]})", "field 'eos_token_id'");
  ExpectConfigError(tie + R"(, "num_key_value_heads": 3})", "num_key_value_heads");
  ExpectConfigError(tie + R"(, "hidden_act": "gelu"})", "'gelu'");
  std::string gpt2 = base;
  gpt2.replace(gpt2.find("LlamaForCausalLM"), 16, "GPT2LMHeadModel");
  ExpectConfigError(gpt2, "architecture 'GPT2LMHeadModel' is not supported");
  ExpectConfigError("{\"hidden_size\": ", "not valid JSON");
}

TEST(HfCheckpointTest, TensorErrorsNameTheTensorAndShapes) {
  auto root = testing::TempDir("hf_errors");
  ModelConfig config = TinyLlama();
  WeightStore weights = RandomWeights(config, 6);
  std::string dir = (root / "ckpt").string();
  ASSERT_TRUE(SaveHfCheckpoint(dir, config, weights, HfSaveOptions{}).ok());

  // Shape mismatch: rewrite the weights with one tensor of the wrong shape.
  std::map<std::string, TensorView> views;
  for (const std::string& name : weights.Names()) views[name] = weights.Get(name).value();
  Tensor wrong(DType::kF32, Shape({24, 15}));
  views["model.layers.1.mlp.gate_proj.weight"] = wrong.view();
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", views).ok());
  auto bad = LoadHfCheckpoint(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "tensor 'model.layers.1.mlp.gate_proj.weight' has shape [24, 15] but the config "
                "needs [24, 16]"),
            std::string::npos)
      << bad.status();

  views.erase("model.layers.1.mlp.gate_proj.weight");
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", views).ok());
  bad = LoadHfCheckpoint(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("missing tensor 'model.layers.1.mlp.gate_proj.weight'"),
            std::string::npos)
      << bad.status();

  views["model.layers.1.mlp.gate_proj.weight"] =
      weights.Get("model.layers.1.mlp.gate_proj.weight").value();
  views["model.extra.weight"] = wrong.view();
  ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", views).ok());
  bad = LoadHfCheckpoint(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unexpected tensor 'model.extra.weight'"),
            std::string::npos)
      << bad.status();

  fs::remove(fs::path(dir) / "model.safetensors");
  EXPECT_EQ(LoadHfCheckpoint(dir).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadHfCheckpoint((root / "nowhere").string()).status().code(), StatusCode::kNotFound);

  // Saving a store that does not match its config fails before anything is written.
  WeightStore partial = RandomWeights(config, 7);
  partial.Put("model.norm.weight", Tensor(DType::kF32, Shape({3})));
  Status st = SaveHfCheckpoint((root / "partial").string(), config, partial, HfSaveOptions{});
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'model.norm.weight'"), std::string::npos) << st;
  EXPECT_FALSE(fs::exists(root / "partial"));
}

// The real stories260K (llama2.c, interleaved RoPE): saved as an HF folder (q/k permuted to
// rotate-half), reloaded, and permuted back, every tensor is bit-identical to the original.
// The folder is left in the build tree for scripts/check_hf_export.py.
TEST(HfCheckpointTest, Stories260KThroughHfFolderIsBitIdentical) {
  LAMINAR_SHARED_OR_SKIP(path, "models/stories260K/stories260K.bin");
  ModelConfig config;
  WeightStore original;
  ASSERT_TRUE(LoadLlama2c(path, &config, &original).ok());
  ASSERT_EQ(config.rope_layout, RopeLayout::kInterleaved);
  auto root = testing::TempDir("hf_stories260k");
  std::string dir = (root / "ckpt").string();
  Status st = SaveHfCheckpoint(dir, config, original, HfSaveOptions{});
  ASSERT_TRUE(st.ok()) << st;
  std::map<std::string, TensorView> views;
  for (const std::string& name : original.Names()) views[name] = original.Get(name).value();
  ASSERT_TRUE(WriteSafetensors((root / "interleaved.safetensors").string(), views).ok());

  auto loaded = LoadHfCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config.rope_layout, RopeLayout::kRotateHalf);
  ModelConfig expected = config;
  ExpectSameConfig(loaded->config, expected);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  EXPECT_FALSE(SameBytes(loaded->weights.Get(q).value(), original.Get(q).value()));
  ASSERT_TRUE(ConvertRopeLayout(&loaded->config, &loaded->weights, RopeLayout::kInterleaved).ok());
  ExpectSameWeights(loaded->weights, original);
}

}  // namespace
}  // namespace laminar::model
