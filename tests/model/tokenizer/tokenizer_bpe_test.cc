// Byte-level BPE against real expected encodings: llama.cpp's GPT-2 and Llama-3 vocab tests
// (scripts/fetch_test_data.sh) and ollama's Llama-3 expectations (an outside golden) (encodings,
// special tokens, pre-tokenizer splits, round trips).
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "tests/model/tokenizer/tokenizer_test_util.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

using testing::ExpectStreamingMatchesDecode;
using testing::IdsToString;
using testing::ReadVocabTestCases;

void ExpectVocabTestCases(const Tokenizer& tok, const std::string& inp, const std::string& out,
                          size_t num_cases) {
  auto cases = ReadVocabTestCases(inp, out);
  ASSERT_EQ(cases.size(), num_cases);
  for (const auto& [text, expected] : cases) {
    auto ids = tok.Encode(text, {.add_special = false, .parse_special = false});
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(IdsToString(*ids), IdsToString(expected)) << "input: '" << text << "'";
    auto decoded = tok.Decode(*ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text);  // byte-level BPE is lossless
    ExpectStreamingMatchesDecode(tok, *ids);
  }
}

// Loaded once for the whole binary (the 128256-token vocabulary takes a while to parse).
const Tokenizer* Cached(const std::string& relative) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[relative];
  if (!slot) {
    auto tok = LoadTokenizer(relative.starts_with("llama.cpp/")
                                 ? ::laminar::testing::FetchedData(relative)
                                 : ::laminar::testing::SharedData(relative));
    EXPECT_TRUE(tok.ok()) << tok.status();
    if (tok.ok()) slot = std::move(*tok);
  }
  return slot.get();
}
const Tokenizer* Llama3() { return Cached("llama.cpp/ggml-vocab-llama-bpe.gguf"); }
const Tokenizer* Gpt2() { return Cached("llama.cpp/ggml-vocab-gpt-2.gguf"); }

TEST(TokenizerBpe, Gpt2GgufMatchesLlamaCppVocabTest) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-gpt-2.gguf");
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), TokenizerKind::kByteLevelBpe);
  EXPECT_EQ(tok->vocab_size(), 50257);
  ExpectVocabTestCases(*tok, gguf + ".inp", gguf + ".out", 46);
}

TEST(TokenizerBpe, Llama3GgufMatchesLlamaCppVocabTest) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-bpe.gguf");
  const Tokenizer* tok = Llama3();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 128256);
  EXPECT_EQ(tok->bos_id(), 128000);
  EXPECT_EQ(tok->TokenToPiece(128009), "<|eot_id|>");
  ExpectVocabTestCases(*tok, gguf + ".inp", gguf + ".out", 46);
}

// The same vocabulary from ollama's encoder.json + vocab.bpe (another loader) encodes alike.
TEST(TokenizerBpe, Llama3EncoderJsonMatchesLlamaCppVocabTest) {
  LAMINAR_SHARED_OR_SKIP(enc, "tokenizers/llama3-bpe/encoder.json");
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-bpe.gguf");
  const Tokenizer* tok = Cached("tokenizers/llama3-bpe/encoder.json");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 128256);
  ExpectVocabTestCases(*tok, gguf + ".inp", gguf + ".out", 46);
}

class OllamaExpectations : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path =
        ::laminar::testing::SharedData("tokenizers/llama3-bpe/ollama_bpe_test_expectations.json");
    if (path.empty()) {
      GTEST_SKIP() << LAMINAR_OUTSIDE_GOLDEN_SKIP
                   << "tokenizers/llama3-bpe/ollama_bpe_test_expectations.json";
    }
    json_ = nlohmann::json::parse(testing::ReadAll(path));
    tok_ = Llama3();
    ASSERT_NE(tok_, nullptr);
  }
  nlohmann::json json_;
  const Tokenizer* tok_ = nullptr;
};

TEST_F(OllamaExpectations, Encodings) {
  ASSERT_GE(json_["encode"].size(), 20u);
  for (const auto& c : json_["encode"]) {
    std::string text = c["text"].get<std::string>();
    bool parse_special = c.value("parse_special", false);
    auto ids = tok_->Encode(text, {.add_special = false, .parse_special = parse_special});
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(IdsToString(*ids), IdsToString(c["ids"].get<std::vector<int32_t>>())) << text;
    auto decoded = tok_->Decode(*ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text);
    ExpectStreamingMatchesDecode(*tok_, *ids);
  }
}

TEST_F(OllamaExpectations, SpecialTokensAreTextWithoutParseSpecial) {
  auto ids = tok_->Encode("hello <|end_of_text|>", {.add_special = false, .parse_special = false});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 128001), 0);
  EXPECT_GT(ids->size(), 3u);
  auto decoded = tok_->Decode(*ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, "hello <|end_of_text|>");
  auto with_bos = tok_->Encode("hello world", {.add_special = true});
  ASSERT_TRUE(with_bos.ok());
  EXPECT_EQ(IdsToString(*with_bos), " 128000 15339 1917");
  auto skipped = tok_->Decode(std::vector<int32_t>{128000, 15339, 1917, 128001}, true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, "hello world");
}

TEST_F(OllamaExpectations, PreTokenizerSplits) {
  const auto* bpe = dynamic_cast<const ByteLevelBpeTokenizer*>(tok_);
  ASSERT_NE(bpe, nullptr);
  // ollama's regex is the one we use for llama-bpe.
  ASSERT_EQ(bpe->options().pre_tokenizer_regexes.size(), 1u);
  EXPECT_EQ(bpe->options().pre_tokenizer_regexes[0], json_["pretokenizer"].get<std::string>());
  ASSERT_GE(json_["split"].size(), 7u);
  for (const auto& [text, pieces] : json_["split"].items()) {
    auto split = bpe->PreTokenize(text);
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_EQ(*split, pieces.get<std::vector<std::string>>()) << text;
  }
}

TEST_F(OllamaExpectations, RoundTrips) {
  ASSERT_GE(json_["roundtrip"].size(), 8u);
  for (const auto& t : json_["roundtrip"]) {
    std::string text = t.get<std::string>();
    auto ids = tok_->Encode(text);
    ASSERT_TRUE(ids.ok());
    auto decoded = tok_->Decode(*ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text);
    ExpectStreamingMatchesDecode(*tok_, *ids);
  }
}

// Random valid UTF-8 over ASCII, Latin, CJK, emoji and whitespace runs.
std::string RandomUtf8(std::mt19937* rng, size_t num_chars) {
  static const uint32_t kPool[] = {' ',    ' ',     '\n',    '\t',   'a',    'Z',   '0',    '7',
                                   '\'',   '!',     '.',     0xE9,   0x416,  0x5D0, 0x4E2D, 0x65E5,
                                   0xAC00, 0x1F999, 0x1F600, 0x200D, 0x2581, 0xFFFD};
  std::string out;
  for (size_t i = 0; i < num_chars; ++i) {
    uint32_t cp = (*rng)() % 3 == 0 ? 0x20 + (*rng)() % 0x5F
                                    : kPool[(*rng)() % (sizeof(kPool) / sizeof(kPool[0]))];
    if ((*rng)() % 17 == 0) cp = 0x80 + (*rng)() % 0x10000;
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    AppendCodepoint(cp, &out);
  }
  return out;
}

TEST(TokenizerBpe, RandomUtf8RoundTripsAndStreams) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-gpt-2.gguf");
  const Tokenizer* gpt2 = Gpt2();
  const Tokenizer* llama3 = Llama3();
  ASSERT_NE(gpt2, nullptr);
  ASSERT_NE(llama3, nullptr);
  std::mt19937 rng(1234);
  for (int i = 0; i < 200; ++i) {
    std::string text = RandomUtf8(&rng, 1 + rng() % 40);
    for (const Tokenizer* tok : {gpt2, llama3}) {
      auto ids = tok->Encode(text);
      ASSERT_TRUE(ids.ok()) << ids.status();
      auto decoded = tok->Decode(*ids);
      ASSERT_TRUE(decoded.ok());
      ASSERT_EQ(*decoded, text);
      ExpectStreamingMatchesDecode(*tok, *ids);
    }
  }
}

TEST(TokenizerBpe, LongInputIsFast) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-gpt-2.gguf");
  const Tokenizer* tok = Gpt2();
  ASSERT_NE(tok, nullptr);
  // One 200000-byte pre-token: quadratic merging would take minutes, ours milliseconds.
  std::string text(200000, 'a');
  auto ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok());
  auto decoded = tok->Decode(*ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, text);
  EXPECT_LE(ids->size(), text.size() / 4);
}

TEST(TokenizerBpe, Llama3ExportRoundTrips) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-bpe.gguf");
  const Tokenizer* tok = Llama3();
  ASSERT_NE(tok, nullptr);
  auto inputs = testing::VocabTestInputs(gguf + ".inp");
  inputs.push_back("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
  testing::ExpectExportRoundTrip(*tok, "llama3", inputs);
}

}  // namespace
}  // namespace laminar::model
