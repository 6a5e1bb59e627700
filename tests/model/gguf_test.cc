// GGUF reader tests: real files from ../shared/data, hand-built files of every value type, and
// corrupted inputs (truncations, flipped bytes, absurd counts) that must fail cleanly.
#include "model/gguf.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include "model/ggml_quants.h"
#include "model/gguf_writer.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
StatusOr<GgufFile> ParseString(const std::string& s, const std::string& name = "mem.gguf") {
  return GgufFile::ParseBuffer(Bytes(s), name);
}
std::string ReadAll(const std::string& path) {
  auto s = ReadFileToString(path);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::string();
}
// Expects a non-ok status whose message names `name` and contains `needle`.
void ExpectError(const StatusOr<GgufFile>& f, const std::string& needle,
                 const std::string& name = "mem.gguf") {
  ASSERT_FALSE(f.ok()) << "expected an error containing: " << needle;
  EXPECT_NE(f.status().message().find(name), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find(needle), std::string::npos) << f.status();
}

TEST(GgufTest, ParsesStories260K) {
  LAMINAR_SHARED_OR_SKIP(path, "models/stories260K/stories260K.gguf");
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  EXPECT_EQ(f->GetString("general.architecture").value(), "llama");
  EXPECT_EQ(f->GetInt("llama.embedding_length").value(), 64);
  EXPECT_EQ(f->GetInt("llama.block_count").value(), 5);
  EXPECT_EQ(f->GetInt("llama.attention.head_count_kv").value(), 4);
  EXPECT_FLOAT_EQ(f->GetFloat("llama.attention.layer_norm_rms_epsilon").value(), 1e-5f);
  EXPECT_EQ(f->GetInt("tokenizer.ggml.padding_token_id").value(), 4294967295);
  auto tokens = f->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ(f->tensors().size(), 3u + 5u * 9u);
  const GgufTensorInfo* emb = f->FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb->shape(), (Shape{512, 64}));
  EXPECT_EQ(emb->type, 0u);
  auto bytes = f->TensorBytes(*emb);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->size(), 512u * 64u * 4u);
  const GgufTensorInfo* down = f->FindTensor("blk.4.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape(), (Shape{64, 172}));
  EXPECT_EQ(f->FindTensor("nope"), nullptr);
}

TEST(GgufTest, ParsesTinyRandomWithF16AndLargeVocab) {
  LAMINAR_SHARED_OR_SKIP(path, "models/llama-2-tiny-random/llama-2-tiny-random.gguf");
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  auto tokens = f->GetStringArray("tokenizer.ggml.tokens");
  auto scores = f->GetFloatArray("tokenizer.ggml.scores");
  auto types = f->GetIntArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(tokens.ok() && scores.ok() && types.ok());
  ASSERT_EQ(tokens->size(), 32000u);
  ASSERT_EQ(scores->size(), 32000u);
  ASSERT_EQ(types->size(), 32000u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[259], "\xe2\x96\x81\xe2\x96\x81");  // "▁▁", the first merge in Llama 2
  EXPECT_EQ((*types)[0], 2);                              // unknown
  EXPECT_EQ((*types)[1], 3);                              // control
  EXPECT_EQ((*types)[3], 6);                              // byte
  EXPECT_EQ((*types)[500], 1);                            // normal
  EXPECT_LT((*scores)[1000], 0.0f);
  EXPECT_EQ(f->Find("tokenizer.ggml.tokens")->array_type(), GgufType::kString);
  const GgufTensorInfo* q = f->FindTensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, 1u);  // F16
  EXPECT_EQ(q->size_bytes, 8u * 8u * 2u);
  EXPECT_EQ(f->FindTensor("blk.0.attn_norm.weight")->type, 0u);
}

TEST(GgufTest, ParsesVocabOnlyFiles) {
  LAMINAR_FETCHED(spm, "llama.cpp/ggml-vocab-llama-spm.gguf");
  LAMINAR_FETCHED(gpt2, "llama.cpp/ggml-vocab-gpt-2.gguf");
  auto s = GgufFile::Open(spm);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->tensors().empty());
  EXPECT_EQ(s->GetString("tokenizer.ggml.model").value(), "llama");
  EXPECT_EQ(s->GetString("tokenizer.ggml.pre").value(), "default");
  EXPECT_TRUE(s->GetBool("tokenizer.ggml.add_bos_token").value());
  EXPECT_FALSE(s->GetBool("tokenizer.ggml.add_eos_token").value());
  EXPECT_EQ(s->GetInt("llama.vocab_size").value(), 32000);
  auto g = GgufFile::Open(gpt2);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->tensors().empty());
  EXPECT_EQ(g->GetString("tokenizer.ggml.pre").value(), "gpt-2");
  auto merges = g->GetStringArray("tokenizer.ggml.merges");
  ASSERT_TRUE(merges.ok());
  ASSERT_EQ(merges->size(), 50000u);
  EXPECT_EQ((*merges)[0], "\xc4\xa0 t");  // "Ġ t"
  EXPECT_EQ(g->GetStringArray("tokenizer.ggml.tokens")->size(), 50257u);
  EXPECT_EQ(g->GetInt("tokenizer.ggml.eos_token_id").value(), 50256);
}

TEST(GgufTest, ReadsEveryValueType) {
  GgufWriter w;
  w.Scalar<uint8_t>("u8", 0, 200).Scalar<int8_t>("i8", 1, -100).Scalar<uint16_t>("u16", 2, 60000);
  w.Scalar<int16_t>("i16", 3, -30000).U32("u32", 4000000000u).Scalar<int32_t>("i32", 5, -7);
  w.F32("f32", 0.5f).Bool("bool", true).String("str", "h\xc3\xa9llo");
  w.Scalar<uint64_t>("u64", 10, std::numeric_limits<uint64_t>::max());
  w.Scalar<int64_t>("i64", 11, -(int64_t{1} << 40)).Scalar<double>("f64", 12, 1e-300);
  w.Array<int32_t>("ai32", 5, {1, -2, 3}).Array<float>("af32", 6, {1.5f, -2.25f});
  w.Array<uint8_t>("abool", 7, {1, 0}).Array<uint64_t>("au64", 10, {7, 8});
  w.Array<double>("af64", 12, {0.125}).StringArray("astr", {"a", "", "ccc"});
  // Array of arrays: [[1, 2], [3]] as i16.
  ByteSink nested;
  nested.Put<uint32_t>(9).Put<uint64_t>(2);
  nested.Put<uint32_t>(3).Put<uint64_t>(2).Put<int16_t>(1).Put<int16_t>(2);
  nested.Put<uint32_t>(3).Put<uint64_t>(1).Put<int16_t>(3);
  w.Kv("nested", 9, nested.bytes());
  auto f = ParseString(w.Finish());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->metadata().size(), 19u);
  EXPECT_EQ(f->GetInt("u8").value(), 200);
  EXPECT_EQ(f->GetInt("i8").value(), -100);
  EXPECT_EQ(f->GetInt("u16").value(), 60000);
  EXPECT_EQ(f->GetInt("i16").value(), -30000);
  EXPECT_EQ(f->GetInt("u32").value(), 4000000000);
  EXPECT_EQ(f->GetInt("i32").value(), -7);
  EXPECT_EQ(f->GetFloat("f32").value(), 0.5);
  EXPECT_EQ(f->GetFloat("i32").value(), -7.0);  // integers read as floats
  EXPECT_TRUE(f->GetBool("bool").value());
  EXPECT_EQ(f->GetString("str").value(), "h\xc3\xa9llo");
  EXPECT_FALSE(f->GetInt("u64").ok());  // beyond INT64_MAX
  EXPECT_EQ(f->GetInt("i64").value(), -(int64_t{1} << 40));
  EXPECT_EQ(f->GetFloat("f64").value(), 1e-300);
  EXPECT_EQ(f->Find("u64")->type(), GgufType::kU64);
  EXPECT_EQ(f->Find("f32")->type(), GgufType::kF32);
  EXPECT_EQ(f->GetIntArray("ai32").value(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->GetFloatArray("af32").value(), (std::vector<float>{1.5f, -2.25f}));
  EXPECT_EQ(f->GetFloatArray("ai32").value(), (std::vector<float>{1, -2, 3}));
  EXPECT_EQ(f->GetIntArray("abool").value(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(f->Find("abool")->array_type(), GgufType::kBool);
  EXPECT_EQ(f->GetIntArray("au64").value(), (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(f->GetFloatArray("af64").value(), (std::vector<float>{0.125f}));
  EXPECT_EQ(f->GetStringArray("astr").value(), (std::vector<std::string>{"a", "", "ccc"}));
  const GgufValue* n = f->Find("nested");
  ASSERT_NE(n, nullptr);
  ASSERT_NE(n->AsArrays(), nullptr);
  ASSERT_EQ(n->array_size(), 2u);
  EXPECT_EQ(*(*n->AsArrays())[0].AsInts(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(*(*n->AsArrays())[1].AsInts(), (std::vector<int64_t>{3}));
  EXPECT_EQ((*n->AsArrays())[1].array_type(), GgufType::kI16);
  EXPECT_EQ(n->ToString(), "[2 x array] [[2 x i16] [1, 2], [1 x i16] [3]]");
  EXPECT_EQ(f->Find("astr")->ToString(2), "[3 x string] [\"a\", \"\", ...]");
}

TEST(GgufTest, GettersReportMissingKeysAndWrongTypes) {
  auto f = ParseString(GgufWriter().String("s", "x").U32("n", 3).Finish());
  ASSERT_TRUE(f.ok()) << f.status();
  auto missing = f->GetInt("absent.key");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("mem.gguf: metadata key 'absent.key'"),
            std::string::npos);
  auto wrong = f->GetInt("s");
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("'s' has type string"), std::string::npos);
  EXPECT_FALSE(f->GetStringArray("s").ok());
  EXPECT_FALSE(f->GetBool("n").ok());
  EXPECT_EQ(f->GetIntOr("absent", 42).value(), 42);
  EXPECT_EQ(f->GetIntOr("n", 42).value(), 3);
  EXPECT_FALSE(f->GetIntOr("s", 42).ok());  // present with the wrong type is still an error
  EXPECT_EQ(f->GetStringOr("absent", "d").value(), "d");
  EXPECT_TRUE(f->GetBoolOr("absent", true).value());
  EXPECT_EQ(f->GetFloatOr("absent", 2.5).value(), 2.5);
}

TEST(GgufTest, HonoursAlignmentAndReturnsTensorBytes) {
  for (uint32_t alignment : {32u, 64u, 1u, 256u}) {
    GgufWriter w;
    w.U32("general.alignment", alignment);
    w.Tensor("a", {3}, {1, 2, 3});
    w.Tensor("b", {2, 2}, {4, 5, 6, 7});
    std::string file = w.Finish(alignment);
    auto f = ParseString(file);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->alignment(), alignment);
    EXPECT_EQ(f->data_offset() % alignment, 0u);
    const GgufTensorInfo* b = f->FindTensor("b");
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->offset % alignment, 0u);
    auto bytes = f->TensorBytes(*b);
    ASSERT_TRUE(bytes.ok());
    ASSERT_EQ(bytes->size(), 16u);
    float v[4];
    std::memcpy(v, bytes->data(), 16);
    EXPECT_EQ(v[0], 4.0f);
    EXPECT_EQ(v[3], 7.0f);
  }
}

TEST(GgufTest, AcceptsVersion2) {
  auto f = ParseString(GgufWriter().U32("x", 1).Tensor("t", {2}, {1, 2}).Finish(32, 2));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 2u);
}

TEST(GgufTest, RejectsBadHeaders) {
  std::string good = GgufWriter().U32("x", 1).Finish();
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  ExpectError(ParseString(bad_magic), "bad magic");
  ExpectError(ParseString(""), "truncated");
  ExpectError(ParseString("GGU"), "truncated");
  for (uint32_t version : {0u, 1u, 4u, 0x03000000u}) {
    std::string s = good;
    std::memcpy(&s[4], &version, 4);
    ExpectError(ParseString(s), version == 0x03000000u ? "big-endian"
                                : version == 1         ? "version 1"
                                                       : "unknown GGUF version");
  }
}

// Writes a header with the given counts followed by `rest`.
std::string Header(uint64_t n_tensors, uint64_t n_kv, const std::string& rest) {
  ByteSink s;
  s.Raw("GGUF").Put<uint32_t>(3).Put<uint64_t>(n_tensors).Put<uint64_t>(n_kv).Raw(rest);
  return s.bytes();
}

TEST(GgufTest, RejectsAbsurdCounts) {
  ExpectError(ParseString(Header(uint64_t{1} << 60, 0, "")), "n_tensors = 1152921504606846976");
  ExpectError(ParseString(Header(0, uint64_t{1} << 60, "")), "n_kv = 1152921504606846976");
  ByteSink kv;
  kv.Str("k").Put<uint32_t>(8).Put<uint64_t>(uint64_t{1} << 62);  // string length beyond EOF
  ExpectError(ParseString(Header(0, 1, kv.bytes())), "runs past end of file");
  ByteSink arr;
  arr.Str("tokenizer.ggml.tokens")
      .Put<uint32_t>(9)
      .Put<uint32_t>(8)
      .Put<uint64_t>(uint64_t{1} << 60);
  ExpectError(ParseString(Header(0, 1, arr.bytes())), "'tokenizer.ggml.tokens'");
  ByteSink key;
  key.Put<uint64_t>(~uint64_t{0});  // key length 2^64-1
  ExpectError(ParseString(Header(0, 1, key.bytes() + "xxxxxxxxxxxxxxxx")), "key length");
}

TEST(GgufTest, RejectsBadValues) {
  ExpectError(ParseString(GgufWriter().Kv("k", 13, "").Finish()), "unknown value type 13");
  ExpectError(ParseString(GgufWriter().Scalar<uint8_t>("b", 7, 2).Finish()), "neither 0 nor 1");
  ExpectError(ParseString(GgufWriter().U32("k", 1).U32("k", 2).Finish()), "duplicate metadata");
  ExpectError(ParseString(GgufWriter().Array<uint8_t>("a", 99, {}).Finish()),
              "unknown element type 99");
  ExpectError(ParseString(GgufWriter().U32("general.alignment", 24).Finish()), "power of two");
  ExpectError(ParseString(GgufWriter().String("general.alignment", "x").Finish()),
              "general.alignment has type string");
  // Arrays nested 9 deep.
  ByteSink deep;
  for (int i = 0; i < 9; ++i) deep.Put<uint32_t>(9).Put<uint64_t>(1);
  deep.Put<uint32_t>(0).Put<uint64_t>(0);
  ExpectError(ParseString(GgufWriter().Kv("deep", 9, deep.bytes()).Finish()), "nested deeper");
}

TEST(GgufTest, RejectsBadTensorInfos) {
  ExpectError(ParseString(GgufWriter().Tensor("t", {2}, 77, "xxxxxxxx").Finish()),
              "unknown ggml type 77");
  ExpectError(ParseString(GgufWriter().Tensor("t", {1, 1, 1, 1, 1}, {1}).Finish()), "n_dims = 5");
  ExpectError(ParseString(GgufWriter().Tensor("t", {31}, 8, std::string(34, '\0')).Finish()),
              "not a multiple of the q8_0 block size 32");
  ExpectError(ParseString(GgufWriter().Tensor("t", {1}, {1}).Tensor("t", {1}, {2}).Finish()),
              "duplicate tensor name 't'");
  ExpectError(ParseString(GgufWriter().Tensor("t", {uint64_t{1} << 62, 8}, {1}).Finish()),
              "overflows");
  // Data past the end: declare 1000 floats but store 1.
  ExpectError(ParseString(GgufWriter().Tensor("big", {1000}, 0, "abcd").Finish()),
              "tensor 'big' data [offset");
  // Misaligned offset: patch the offset of the only tensor (the file's last header u64).
  GgufWriter w;
  w.Tensor("t", {2}, {1, 2});
  std::string s = w.Finish(32);
  auto f = ParseString(s);
  ASSERT_TRUE(f.ok()) << f.status();
  size_t header_end = s.find("t") + 1 + 4 + 8 + 4;
  uint64_t bad = 4;
  std::memcpy(&s[header_end], &bad, 8);
  ExpectError(ParseString(s), "not a multiple of the alignment 32");
}

TEST(GgufTest, EveryTruncationOfASmallFileFails) {
  GgufWriter w;
  w.U32("general.alignment", 32).String("general.architecture", "llama");
  w.StringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "hello"});
  w.Array<float>("tokenizer.ggml.scores", 6, {0, 0, -1});
  w.Tensor("a", {4}, {1, 2, 3, 4}).Tensor("b", {2}, {5, 6});
  std::string file = w.Finish();
  ASSERT_TRUE(ParseString(file).ok());
  // The last tensor's data is 8 bytes followed by alignment padding; only cuts into it fail.
  const size_t last_data_end = file.size() - 32 + 8;
  for (size_t n = 0; n < last_data_end; ++n) {
    auto f = ParseString(file.substr(0, n), "cut.gguf");
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(f.status().message().rfind("cut.gguf: ", 0), 0u) << f.status();
  }
}

TEST(GgufTest, TruncatedRealFilesFailWithTheirName) {
  const std::string path = laminar::testing::TinyModel();
  std::string file = ReadAll(path);
  for (size_t n = 0; n < file.size(); n += 2999) {
    auto f = GgufFile::ParseBuffer(Bytes(file).first(n), "stories-cut.gguf");
    ASSERT_FALSE(f.ok()) << n;
    EXPECT_EQ(f.status().message().rfind("stories-cut.gguf: ", 0), 0u) << f.status();
  }
  // Through the file system, too.
  auto dir = laminar::testing::TempDir("gguf_truncated");
  std::string cut = (dir / "cut.gguf").string();
  std::ofstream(cut, std::ios::binary) << file.substr(0, file.size() - 1);
  auto f = GgufFile::Open(cut);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find(cut), std::string::npos) << f.status();
  EXPECT_NE(f.status().message().find("runs past end of file"), std::string::npos) << f.status();
  EXPECT_EQ(GgufFile::Open((dir / "absent.gguf").string()).status().code(), StatusCode::kNotFound);
}

TEST(GgufTest, FlippedBytesNeverCrash) {
  const std::string path = laminar::testing::TinyModel();
  std::string file = ReadAll(path);
  auto f0 = ParseString(file);
  ASSERT_TRUE(f0.ok());
  size_t header = f0->data_offset();
  int failures = 0;
  for (size_t i = 0; i < header; i += 17) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      file[i] = static_cast<char>(file[i] ^ mask);
      auto f = ParseString(file, "flip.gguf");
      file[i] = static_cast<char>(file[i] ^ mask);
      if (!f.ok()) {
        ++failures;
        EXPECT_EQ(f.status().message().rfind("flip.gguf: ", 0), 0u) << f.status();
      }
    }
  }
  EXPECT_GT(failures, 0);
}

}  // namespace
}  // namespace laminar::model
