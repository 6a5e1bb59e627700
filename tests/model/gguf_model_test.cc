// GGUF model loading: the real F16 tiny-random Llama, and hand-built GGUF models that exercise
// quantized tensors, qwen2 biases, tied embeddings and every "clear error" path.
#include "model/gguf_model.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/dtype.h"
#include "model/ggml_quants.h"
#include "model/gguf_writer.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(GgufModelTest, LoadsTinyRandomF16) {
  LAMINAR_SHARED_OR_SKIP(path, "models/llama-2-tiny-random/llama-2-tiny-random.gguf");
  auto g = GgufFile::Open(path);
  ASSERT_TRUE(g.ok()) << g.status();
  ModelConfig c;
  WeightStore w;
  Status st = LoadGgufModel(*g, &c, &w);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.intermediate_size, 32);
  EXPECT_EQ(c.num_hidden_layers, 1);
  EXPECT_EQ(c.num_attention_heads, 2);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.rope_layout, RopeLayout::kInterleaved);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(w.size(), 3u + 9u);
  // An F16 tensor: dequantized into an owned f32 tensor, raw blocks kept.
  const GgufTensorInfo* info = g->FindTensor("blk.0.ffn_down.weight");
  ASSERT_NE(info, nullptr);
  TensorView down = w.Get("model.layers.0.mlp.down_proj.weight").value();
  EXPECT_EQ(down.shape(), (Shape{8, 32}));
  EXPECT_EQ(down.dtype(), DType::kF32);
  const QuantizedTensor* q = w.GetQuantized("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::kF16);
  EXPECT_EQ(q->shape, (Shape{8, 32}));
  EXPECT_EQ(q->size_bytes, 8u * 32u * 2u);
  auto raw = g->TensorBytes(*info).value();
  EXPECT_EQ(q->bytes, raw.data());
  for (int i = 0; i < 256; ++i) {
    uint16_t h;
    std::memcpy(&h, raw.data() + 2 * i, 2);
    ASSERT_EQ(down.data_as<float>()[i], HalfToFloat(h)) << i;
  }
  // F32 norms are zero-copy views without raw blocks.
  EXPECT_EQ(w.GetQuantized("model.norm.weight"), nullptr);
  EXPECT_FALSE(w.GetMutable("model.norm.weight").ok());
  EXPECT_TRUE(w.GetMutable("lm_head.weight").ok());
}

TEST(GgufModelTest, VocabOnlyFileIsNotAModel) {
  LAMINAR_FETCHED(path, "llama.cpp/ggml-vocab-gpt-2.gguf");
  ModelConfig c;
  WeightStore w;
  Status st = LoadGgufModel(path, &c, &w);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_NE(st.message().find("architecture 'gpt2' is not supported"), std::string::npos) << st;
}

// A 1-layer model: C = 32, H = 2, Hkv = 1, D = 16, F = 64, V = 4 (tensors filled with i * 0.01;
// output.weight, when present, with i * 0.02 so that it is not a copy of the embedding).
GgufWriter TinyModel(const std::string& arch, bool bias, bool with_output) {
  GgufWriter w;
  w.String("general.architecture", arch);
  w.U32(arch + ".context_length", 128).U32(arch + ".embedding_length", 32);
  w.U32(arch + ".block_count", 1).U32(arch + ".feed_forward_length", 64);
  w.U32(arch + ".attention.head_count", 2).U32(arch + ".attention.head_count_kv", 1);
  w.F32(arch + ".rope.freq_base", 1000000.0f);
  w.F32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.StringArray("tokenizer.ggml.tokens", {"a", "b", "c", "d"});
  w.U32("tokenizer.ggml.bos_token_id", 0).U32("tokenizer.ggml.eos_token_id", 3);
  auto t = [&](const std::string& name, std::vector<uint64_t> ne, float step = 0.01f) {
    size_t n = 1;
    for (uint64_t d : ne) n *= d;
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * step;
    w.Tensor(name, ne, v);
  };
  t("token_embd.weight", {32, 4});
  t("output_norm.weight", {32});
  if (with_output) t("output.weight", {32, 4}, 0.02f);
  t("blk.0.attn_norm.weight", {32});
  t("blk.0.attn_q.weight", {32, 32});
  t("blk.0.attn_k.weight", {32, 16});
  t("blk.0.attn_v.weight", {32, 16});
  t("blk.0.attn_output.weight", {32, 32});
  if (bias) {
    t("blk.0.attn_q.bias", {32});
    t("blk.0.attn_k.bias", {16});
    t("blk.0.attn_v.bias", {16});
  }
  t("blk.0.ffn_norm.weight", {32});
  t("blk.0.ffn_gate.weight", {32, 64});
  t("blk.0.ffn_up.weight", {32, 64});
  return w;
}

Status LoadFrom(const std::string& file, ModelConfig* c, WeightStore* w) {
  auto g = GgufFile::ParseBuffer(Bytes(file), "model.gguf");
  if (!g.ok()) return g.status();
  return LoadGgufModel(*g, c, w);
}

TEST(GgufModelTest, Qwen2WithBiasAndTiedEmbeddings) {
  GgufWriter w = TinyModel("qwen2", /*bias=*/true, /*with_output=*/false);
  std::vector<float> down(64 * 32, 0.5f);
  std::string file = w.Tensor("blk.0.ffn_down.weight", {64, 32}, down).Finish();
  ModelConfig c;
  WeightStore ws;
  Status st = LoadFrom(file, &c, &ws);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(c.architecture, "qwen2");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_layout, RopeLayout::kRotateHalf);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_FLOAT_EQ(static_cast<float>(c.rms_norm_eps), 1e-6f);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 4);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_FALSE(ws.Contains("lm_head.weight"));
  EXPECT_EQ(ws.Get("model.layers.0.self_attn.k_proj.bias")->shape(), (Shape{16}));
  EXPECT_EQ(ws.Get("model.layers.0.self_attn.k_proj.weight")->shape(), (Shape{16, 32}));
  EXPECT_EQ(ws.Get("model.layers.0.mlp.down_proj.weight")->shape(), (Shape{32, 64}));
  EXPECT_EQ(ws.Get("model.layers.0.mlp.down_proj.weight")->data_as<float>()[7], 0.5f);
}

TEST(GgufModelTest, QuantizedTensorsAreDequantizedAndKept) {
  GgufWriter w = TinyModel("llama", false, true);
  // ffn_down [32, 64] as Q8_0: 32 rows of 2 blocks; block b of row r has d = r + 1, q = j - 16.
  std::string blocks;
  for (int r = 0; r < 32; ++r) {
    for (int b = 0; b < 2; ++b) {
      uint16_t d = FloatToHalf(static_cast<float>(r + 1));
      blocks.append(reinterpret_cast<const char*>(&d), 2);
      for (int j = 0; j < 32; ++j) blocks += static_cast<char>(j - 16);
    }
  }
  std::string file = w.Tensor("blk.0.ffn_down.weight", {64, 32}, 8, blocks).Finish();
  ModelConfig c;
  WeightStore ws;
  Status st = LoadFrom(file, &c, &ws);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(c.tie_word_embeddings);  // output.weight present and different
  TensorView down = ws.Get("model.layers.0.mlp.down_proj.weight").value();
  ASSERT_EQ(down.shape(), (Shape{32, 64}));
  EXPECT_EQ(down.data_as<float>()[0], -16.0f);                  // row 0, d = 1
  EXPECT_EQ(down.data_as<float>()[5 * 64 + 40], 6.0f * -8.0f);  // row 5, j = 8 of block 1
  const QuantizedTensor* q = ws.GetQuantized("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, GgmlType::kQ8_0);
  EXPECT_EQ(q->shape, (Shape{32, 64}));
  EXPECT_EQ(q->size_bytes, 32u * 2u * 34u);
}

void ExpectLoadError(const std::string& file, StatusCode code, const std::string& needle) {
  ModelConfig c;
  WeightStore w;
  Status st = LoadFrom(file, &c, &w);
  ASSERT_FALSE(st.ok()) << needle;
  EXPECT_EQ(st.code(), code) << st;
  EXPECT_NE(st.message().find("model.gguf: "), std::string::npos) << st;
  EXPECT_NE(st.message().find(needle), std::string::npos) << st;
}

TEST(GgufModelTest, ClearErrors) {
  std::vector<float> down(64 * 32);
  // Missing tensor.
  ExpectLoadError(TinyModel("llama", false, true).Finish(), StatusCode::kNotFound,
                  "tensor 'blk.0.ffn_down.weight' (for model.layers.0.mlp.down_proj.weight) is "
                  "missing");
  // Shape mismatch (transposed).
  ExpectLoadError(
      TinyModel("llama", false, true).Tensor("blk.0.ffn_down.weight", {32, 64}, down).Finish(),
      StatusCode::kInvalidArgument,
      "'blk.0.ffn_down.weight' has shape [64, 32], expected [32, 64]");
  // Unsupported tensor type (q5_K has 176-byte blocks of 256; 64 x 32 is not a whole block row,
  // so use q5_0: 32-element blocks of 22 bytes).
  ExpectLoadError(TinyModel("llama", false, true)
                      .Tensor("blk.0.ffn_down.weight", {64, 32}, 6, std::string(64 * 22, '\0'))
                      .Finish(),
                  StatusCode::kUnimplemented, "has ggml type q5_0");
  // Unexpected extra tensor.
  ExpectLoadError(TinyModel("llama", false, true)
                      .Tensor("blk.0.ffn_down.weight", {64, 32}, down)
                      .Tensor("rope_freqs.weight", {8}, std::vector<float>(8))
                      .Finish(),
                  StatusCode::kUnimplemented, "unexpected tensor 'rope_freqs.weight'");
  // Unsupported architecture and missing metadata.
  ExpectLoadError(TinyModel("falcon", false, true).Finish(), StatusCode::kUnimplemented,
                  "architecture 'falcon' is not supported");
  ExpectLoadError(GgufWriter().String("general.architecture", "llama").Finish(),
                  StatusCode::kNotFound, "'llama.context_length' not found");
  ExpectLoadError(GgufWriter().Finish(), StatusCode::kNotFound, "'general.architecture'");
  // Unsupported rope scaling.
  ExpectLoadError(
      TinyModel("llama", false, true).String("llama.rope.scaling.type", "yarn").Finish(),
      StatusCode::kUnimplemented, "rope scaling type 'yarn'");
}

TEST(GgufModelTest, LinearRopeScaling) {
  std::vector<float> down(64 * 32);
  GgufWriter w = TinyModel("llama", false, true);
  w.String("llama.rope.scaling.type", "linear").F32("llama.rope.scaling.factor", 4.0f);
  ModelConfig c;
  WeightStore ws;
  Status st = LoadFrom(w.Tensor("blk.0.ffn_down.weight", {64, 32}, down).Finish(), &c, &ws);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(c.rope_scaling.has_value());
  EXPECT_EQ(c.rope_scaling->type, "linear");
  EXPECT_EQ(c.rope_scaling->factor, 4.0);
}

TEST(GgufModelTest, OutputEqualToEmbeddingIsTied) {
  GgufWriter w = TinyModel("llama", false, false);
  std::vector<float> emb(32 * 4);
  for (size_t i = 0; i < emb.size(); ++i) emb[i] = static_cast<float>(i) * 0.01f;  // = token_embd
  w.Tensor("output.weight", {32, 4}, emb);
  std::vector<float> down(64 * 32);
  ModelConfig c;
  WeightStore ws;
  Status st = LoadFrom(w.Tensor("blk.0.ffn_down.weight", {64, 32}, down).Finish(), &c, &ws);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(ws.Contains("lm_head.weight"));
}

}  // namespace
}  // namespace laminar::model
