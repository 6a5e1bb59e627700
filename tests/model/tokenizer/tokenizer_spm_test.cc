// SentencePiece-style BPE against real expected encodings: llama.cpp's Llama-2 vocab tests (GGUF
// and llama2.c tokenizer.bin), llama2.c's test.c encodings, and stories260K's tok512.bin.
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "model/tokenizer/spm_tokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "tests/model/tokenizer/tokenizer_test_util.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

using testing::ExpectStreamingMatchesDecode;
using testing::IdsToString;
using testing::ReadVocabTestCases;

void ExpectVocabTestCases(const Tokenizer& tok, const std::string& inp, const std::string& out) {
  auto cases = ReadVocabTestCases(inp, out);
  ASSERT_EQ(cases.size(), 46u);
  for (const auto& [text, expected] : cases) {
    EncodeOptions opts;
    opts.add_special = false;
    opts.parse_special = false;
    auto ids = tok.Encode(text, opts);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(IdsToString(*ids), IdsToString(expected)) << "input: '" << text << "'";
    auto decoded = tok.Decode(*ids);
    ASSERT_TRUE(decoded.ok());
    // Decoding strips exactly the dummy-prefix space, so the text comes back whole.
    EXPECT_EQ(*decoded, text);
    ExpectStreamingMatchesDecode(tok, *ids);
  }
}

TEST(TokenizerSpm, GgufMatchesLlamaCppVocabTest) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-spm.gguf");
  auto tok = LoadTokenizer(gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), TokenizerKind::kSentencePieceBpe);
  EXPECT_EQ((*tok)->vocab_size(), 32000);
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  ExpectVocabTestCases(**tok, gguf + ".inp", gguf + ".out");
}

TEST(TokenizerSpm, TokenizerBinMatchesLlamaCppVocabTest) {
  LAMINAR_SHARED_OR_SKIP(bin, "tokenizers/llama2-spm/tokenizer.bin");
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-spm.gguf");
  auto tok = LoadTokenizer(bin);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 32000);
  EXPECT_EQ((*tok)->TokenToPiece(1), "<s>");
  EXPECT_EQ((*tok)->PieceToToken("<0x0A>"), 13);
  ExpectVocabTestCases(**tok, gguf + ".inp", gguf + ".out");
}

TEST(TokenizerSpm, TokenizerBinMatchesLlama2cTestC) {
  LAMINAR_SHARED_OR_SKIP(bin, "tokenizers/llama2-spm/tokenizer.bin");
  LAMINAR_SHARED_OR_SKIP(json_path, "tokenizers/llama2-spm/test_c_expected_encodings.json");
  auto tok = LoadTokenizer(bin);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto json = nlohmann::json::parse(testing::ReadAll(json_path));
  ASSERT_EQ(json["cases"].size(), 5u);
  for (const auto& c : json["cases"]) {
    std::string text = c["text"].get<std::string>();
    // test.c encodes with bos=1, eos=0: add_special adds BOS only for this vocabulary.
    auto ids = (*tok)->Encode(text, {.add_special = true, .parse_special = false});
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(IdsToString(*ids), IdsToString(c["ids"].get<std::vector<int32_t>>())) << text;
    auto decoded = (*tok)->Decode(*ids, /*skip_special=*/true);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text);
  }
}

TEST(TokenizerSpm, SpecialTokensParsedOnlyWhenAsked) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-spm.gguf");
  auto tok = LoadTokenizer(gguf);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto parsed = (*tok)->Encode("<s>Hello</s>");
  ASSERT_TRUE(parsed.ok());
  // After a special token the dummy prefix applies again (llama.cpp, HF Prepend normalizer).
  EXPECT_EQ(parsed->front(), 1);
  EXPECT_EQ(parsed->back(), 2);
  auto hello = (*tok)->Encode("Hello", {.add_special = false, .parse_special = false});
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(std::vector<int32_t>(parsed->begin() + 1, parsed->end() - 1), *hello);
  auto plain = (*tok)->Encode("<s>Hello</s>", {.add_special = false, .parse_special = false});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(std::count(plain->begin(), plain->end(), 1), 0);
  EXPECT_EQ(std::count(plain->begin(), plain->end(), 2), 0);
  auto decoded = (*tok)->Decode(*plain);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, "<s>Hello</s>");
  auto skipped = (*tok)->Decode(*parsed, /*skip_special=*/true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, "Hello");
}

TEST(TokenizerSpm, Stories260KTokenizerLoadsAndRoundTrips) {
  LAMINAR_SHARED_OR_SKIP(bin, "models/stories260K/tok512.bin");
  auto tok = LoadTokenizer(bin);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 512);
  EXPECT_EQ((*tok)->bos_id(), 1);
  for (std::string text :
       {"Once upon a time, there was a little girl named Lily.",
        "Tom said: \"I like the big red ball!\"\n\nThe end.", "Führer 🦙 日本"}) {
    auto ids = (*tok)->Encode(text, {.add_special = true});
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(ids->front(), 1);
    for (int32_t id : *ids) EXPECT_LT(id, 512);
    auto decoded = (*tok)->Decode(*ids, /*skip_special=*/true);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text);
    ExpectStreamingMatchesDecode(**tok, *ids);
  }
}

TEST(TokenizerSpm, Stories260KGgufVocabEqualsTok512) {
  LAMINAR_SHARED_OR_SKIP(bin, "models/stories260K/tok512.bin");
  LAMINAR_SHARED_OR_SKIP(gguf, "models/stories260K/stories260K.gguf");
  auto a = LoadTokenizer(bin);
  auto b = LoadTokenizer(gguf);  // a full model GGUF: the vocabulary is in its metadata
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ((*b)->vocab_size(), 512);
  EXPECT_EQ((*b)->vocab().pad_id, -1);  // stored as u32 0xFFFFFFFF
  for (int32_t id = 0; id < 512; ++id) EXPECT_EQ((*a)->TokenToPiece(id), (*b)->TokenToPiece(id));
  std::string text = "Once upon a time, Lily saw a big dog. 🐶 She said \"hi\"!";
  auto ia = (*a)->Encode(text, {.add_special = true});
  auto ib = (*b)->Encode(text, {.add_special = true});
  ASSERT_TRUE(ia.ok() && ib.ok());
  EXPECT_EQ(*ia, *ib);
}

// A llama2.c tokenizer.bin written here (max_token_length, then score, length and bytes per
// token) loads whole; cut inside its last token's header or bytes it is an error naming the file.
TEST(TokenizerSpm, TruncatedTokenizerBinIsAnError) {
  std::string bytes;
  auto put = [&bytes](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
  const uint32_t max_len = 5;
  put(&max_len, 4);
  float score = 0;
  for (const std::string piece : {"<unk>", "<s>", "</s>", "a", "b", " ab"}) {
    const auto len = static_cast<int32_t>(piece.size());
    put(&score, 4);
    put(&len, 4);
    put(piece.data(), piece.size());
    score -= 1;
  }
  const auto dir = ::laminar::testing::TempDir("spm_truncated");
  const std::string path = (dir / "tokenizer.bin").string();
  std::ofstream(path, std::ios::binary) << bytes;
  auto whole = LoadLlama2cTokenizer(path);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ((*whole)->vocab_size(), 6);
  // The same bytes from memory (what the fuzz target feeds) give the same tokenizer.
  auto parsed = ParseLlama2cTokenizer(
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "mem/tok.bin");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(IdsToString(*(*parsed)->Encode("ab a", {})),
            IdsToString(*(*whole)->Encode("ab a", {})));
  auto short_one = ParseLlama2cTokenizer(
      std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() - 3), "mem/tok.bin");
  ASSERT_FALSE(short_one.ok());
  EXPECT_NE(short_one.status().message().find("mem/tok.bin: token 5"), std::string::npos)
      << short_one.status();
  for (const size_t cut : {size_t{3}, size_t{5}}) {  // into its bytes, into its header
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - cut);
    auto tok = LoadLlama2cTokenizer(path);
    ASSERT_FALSE(tok.ok()) << cut;
    EXPECT_NE(tok.status().message().find("tokenizer.bin"), std::string::npos) << tok.status();
    EXPECT_NE(tok.status().message().find("runs past end of file"), std::string::npos)
        << tok.status();
  }
}

}  // namespace
}  // namespace laminar::model
