// llama2.c checkpoint tests: the real stories260K in both formats (and as GGUF) must load to the
// same tensors bit for bit; malformed headers and sizes must fail with the file named.
#include "model/llama2c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "model/gguf_model.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

constexpr char kLegacy[] = "models/stories260K/stories260K.bin";
constexpr char kV1[] = "models/stories260K/stories260K_v1_ak42.bin";
constexpr char kGguf[] = "models/stories260K/stories260K.gguf";

void ExpectStories260KConfig(const ModelConfig& c) {
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rms_norm_eps), 1e-5f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_FALSE(c.rope_scaling.has_value());
}

// Same names, shapes, dtypes and bytes.
void ExpectSameWeights(const WeightStore& a, const WeightStore& b) {
  ASSERT_EQ(a.Names(), b.Names());
  for (const std::string& name : a.Names()) {
    TensorView x = a.Get(name).value(), y = b.Get(name).value();
    ASSERT_EQ(x.shape(), y.shape()) << name;
    ASSERT_EQ(x.dtype(), y.dtype()) << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size_bytes()), 0) << name << " differs";
  }
}

TEST(Llama2cTest, LegacyStories260K) {
  LAMINAR_SHARED_OR_SKIP(path, kLegacy);
  ModelConfig c;
  WeightStore w;
  ASSERT_TRUE(LoadLlama2c(path, &c, &w).ok());
  ExpectStories260KConfig(c);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(w.size(), 2u + 5u * 9u);  // embedding, final norm, 9 per layer; no lm_head
  EXPECT_FALSE(w.Contains("lm_head.weight"));
  EXPECT_EQ(w.Get("model.layers.0.self_attn.k_proj.weight")->shape(), (Shape{32, 64}));
  EXPECT_EQ(w.Get("model.layers.4.mlp.down_proj.weight")->shape(), (Shape{64, 172}));
  EXPECT_EQ(w.Get("model.norm.weight")->shape(), (Shape{64}));
  // Zero copy: the embedding is the file's bytes right after the 28-byte header.
  auto file = MappedFile::Open(path).value();
  TensorView emb = w.Get("model.embed_tokens.weight").value();
  EXPECT_EQ(std::memcmp(emb.data(), file->data() + 28, emb.size_bytes()), 0);
  EXPECT_FALSE(w.GetMutable("model.embed_tokens.weight").ok());  // a view, not owned
  // The last tensor (final norm) ends right before the two RoPE tables of 512 x 4 floats.
  TensorView norm = w.Get("model.norm.weight").value();
  EXPECT_EQ(
      std::memcmp(norm.data(), file->data() + file->size() - 2 * 512 * 4 * 4 - 64 * 4, 64 * 4), 0);
}

TEST(Llama2cTest, Version1AndGgufMatchLegacyBitForBit) {
  LAMINAR_SHARED_OR_SKIP(legacy, kLegacy);
  LAMINAR_SHARED_OR_SKIP(v1, kV1);
  LAMINAR_SHARED_OR_SKIP(gguf, kGguf);
  ModelConfig c0, c1, c2;
  WeightStore w0, w1, w2;
  ASSERT_TRUE(LoadLlama2c(legacy, &c0, &w0).ok());
  Status s1 = LoadLlama2c(v1, &c1, &w1);
  ASSERT_TRUE(s1.ok()) << s1;
  Status s2 = LoadGgufModel(gguf, &c2, &w2);
  ASSERT_TRUE(s2.ok()) << s2;
  ExpectStories260KConfig(c1);
  ExpectStories260KConfig(c2);
  EXPECT_EQ(c1.max_position_embeddings, 512);
  EXPECT_EQ(c2.max_position_embeddings, 2048);  // the GGUF's llama.context_length
  ExpectSameWeights(w0, w1);
  ExpectSameWeights(w0, w2);
}

// Writes `bytes` to a fresh file and returns its path.
std::string WriteTemp(const std::string& test, const std::string& bytes) {
  auto path = (laminar::testing::TempDir(test) / "model.bin").string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string LegacyHeader(std::vector<int32_t> params) {
  std::string s(params.size() * 4, '\0');
  std::memcpy(s.data(), params.data(), s.size());
  return s;
}

TEST(Llama2cTest, HandBuiltUnsharedClassifier) {
  // dim 4, hidden 6, 1 layer, 2 heads, 1 kv head, vocab -3 (unshared), seq_len 2; head size 2.
  std::string file = LegacyHeader({4, 6, 1, 2, 1, -3, 2});
  const int floats = 3 * 4 + 4 + 16 + 8 + 8 + 16 + 4 + 3 * 24 + 4 + 2 * 2 + 3 * 4;
  std::vector<float> values(floats);
  for (int i = 0; i < floats; ++i) values[i] = static_cast<float>(i);
  file.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  std::string path = WriteTemp("llama2c_unshared", file);
  ModelConfig c;
  WeightStore w;
  Status st = LoadLlama2c(path, &c, &w);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.vocab_size, 3);
  EXPECT_EQ(c.num_key_value_heads, 1);
  auto first = [&](const std::string& name) { return w.Get(name)->data_as<float>()[0]; };
  EXPECT_EQ(first("model.embed_tokens.weight"), 0.0f);
  EXPECT_EQ(first("model.layers.0.input_layernorm.weight"), 12.0f);
  EXPECT_EQ(first("model.layers.0.self_attn.q_proj.weight"), 16.0f);
  EXPECT_EQ(first("model.layers.0.self_attn.k_proj.weight"), 32.0f);
  EXPECT_EQ(w.Get("model.layers.0.self_attn.k_proj.weight")->shape(), (Shape{2, 4}));
  EXPECT_EQ(first("model.layers.0.self_attn.v_proj.weight"), 40.0f);
  EXPECT_EQ(first("model.layers.0.self_attn.o_proj.weight"), 48.0f);
  EXPECT_EQ(first("model.layers.0.post_attention_layernorm.weight"), 64.0f);
  EXPECT_EQ(first("model.layers.0.mlp.gate_proj.weight"), 68.0f);
  EXPECT_EQ(first("model.layers.0.mlp.down_proj.weight"), 92.0f);
  EXPECT_EQ(w.Get("model.layers.0.mlp.down_proj.weight")->shape(), (Shape{4, 6}));
  EXPECT_EQ(first("model.layers.0.mlp.up_proj.weight"), 116.0f);
  EXPECT_EQ(first("model.norm.weight"), 140.0f);
  EXPECT_EQ(first("lm_head.weight"), 148.0f);  // after 4 floats of RoPE tables
}

TEST(Llama2cTest, RejectsBadHeadersAndSizes) {
  struct Case {
    std::string bytes;
    std::string needle;
  };
  std::string ok_header = LegacyHeader({4, 6, 1, 2, 1, 3, 2});
  std::string v2(256, '\0');
  uint32_t magic = 0x616b3432, version = 2;
  std::memcpy(v2.data(), &magic, 4);
  std::memcpy(v2.data() + 4, &version, 4);
  std::vector<Case> cases = {
      {"", "too short for a llama2.c header"},
      {ok_header, "implies 620 bytes"},
      {ok_header + std::string(4 * 1000, '\0'), "file is 4028 bytes"},
      {LegacyHeader({0, 6, 1, 2, 1, 3, 2}), "dim must be positive"},
      {LegacyHeader({4, 6, 1, 3, 1, 3, 2}), "not a multiple of n_heads"},
      {LegacyHeader({4, 6, 1, 2, 3, 3, 2}), "n_heads is not a multiple of n_kv_heads"},
      {LegacyHeader({4, 6, 1, 4, 1, 3, 2}), "head size must be even"},
      {LegacyHeader({1 << 30, 1 << 30, 1 << 30, 2, 1, 3, 2}), "impossibly large"},
      {v2, "version 2 is not supported"},
      {v2.substr(0, 100), "too short for a llama2.c version 1 header"},
  };
  for (const Case& c : cases) {
    std::string path = WriteTemp("llama2c_bad", c.bytes);
    ModelConfig config;
    WeightStore w;
    Status st = LoadLlama2c(path, &config, &w);
    ASSERT_FALSE(st.ok()) << c.needle;
    EXPECT_NE(st.message().find(path), std::string::npos) << st;
    EXPECT_NE(st.message().find(c.needle), std::string::npos) << st;
  }
}

TEST(Llama2cTest, TruncatedRealFilesFail) {
  LAMINAR_SHARED_OR_SKIP(legacy, kLegacy);
  LAMINAR_SHARED_OR_SKIP(v1, kV1);
  for (const std::string& path : {legacy, v1}) {
    auto file = MappedFile::Open(path).value();
    for (size_t n : {size_t{0}, size_t{27}, size_t{255}, file->size() / 2, file->size() - 1}) {
      auto h = ParseLlama2cHeader(file->bytes().first(n), "cut.bin");
      ASSERT_FALSE(h.ok()) << n;
      EXPECT_EQ(h.status().message().rfind("cut.bin: ", 0), 0u) << h.status();
    }
    auto h = ParseLlama2cHeader(file->bytes(), path);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->expected_bytes, file->size());
  }
}

}  // namespace
}  // namespace laminar::model
