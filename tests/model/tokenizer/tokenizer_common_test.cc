// Tokenizer behaviour shared by every kind: UTF-8 checks, decode errors, streaming decode, the
// named pre-tokenizers, loader errors, and Hugging Face export → reload equivalence.
#include <filesystem>
#include <fstream>

#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "tests/model/tokenizer/tokenizer_test_util.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

using testing::ExpectExportRoundTrip;
using testing::ExpectStreamingMatchesDecode;
using testing::IdsToString;
using testing::ReadVocabTestCases;
using testing::VocabTestInputs;

TEST(TokenizerUtf8, FindsFirstInvalidByte) {
  EXPECT_FALSE(FindInvalidUtf8("héllo 🦙").has_value());
  EXPECT_EQ(FindInvalidUtf8("ab\xFF"), 2u);
  EXPECT_EQ(FindInvalidUtf8("a\xC3"), 1u);               // truncated
  EXPECT_EQ(FindInvalidUtf8("\xC0\xAF"), 0u);            // overlong
  EXPECT_EQ(FindInvalidUtf8("x\xED\xA0\x80"), 1u);       // surrogate
  EXPECT_EQ(FindInvalidUtf8("xy\xF4\x90\x80\x80"), 2u);  // above U+10FFFF
}

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  std::string out, rest;
  AppendUtf8Lossy("a\xF0\x9F\xA6", /*final=*/false, &out, &rest);
  EXPECT_EQ(out, "a");
  EXPECT_EQ(rest, "\xF0\x9F\xA6");
  out.clear();
  AppendUtf8Lossy(
      "a\xF0\x9F\xA6"
      "b\xFF",
      /*final=*/true, &out, &rest);
  EXPECT_EQ(out,
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
}

TEST(TokenizerCommon, InvalidUtf8AndBadIdsAreErrors) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-spm.gguf");
  LAMINAR_FETCHED(gpt2, "llama.cpp/ggml-vocab-gpt-2.gguf");
  for (const std::string& path : {gguf, gpt2}) {
    auto tok = LoadTokenizer(path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    auto bad = (*tok)->Encode("hello \xC3(");
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find("byte offset 6"), std::string::npos)
        << bad.status().message();
    auto out_of_range = (*tok)->Decode(std::vector<int32_t>{1, (*tok)->vocab_size()});
    ASSERT_FALSE(out_of_range.ok());
    EXPECT_NE(out_of_range.status().message().find(std::to_string((*tok)->vocab_size())),
              std::string::npos);
    StreamingDecoder dec = (*tok)->NewStreamingDecoder();
    EXPECT_FALSE(dec.Next(-1).ok());
  }
}

TEST(TokenizerCommon, StreamingHoldsSplitCharacters) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-spm.gguf");
  auto tok = LoadTokenizer(gguf);
  ASSERT_TRUE(tok.ok());
  // 🦙 is not in the Llama 2 vocabulary: four byte-fallback tokens <0xF0><0x9F><0xA6><0x99>.
  auto ids = (*tok)->Encode("a🦙", {.add_special = false, .parse_special = false});
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 5u) << IdsToString(*ids);
  StreamingDecoder dec = (*tok)->NewStreamingDecoder();
  std::vector<std::string> outs;
  for (int32_t id : *ids) outs.push_back(*dec.Next(id));
  EXPECT_EQ(outs, (std::vector<std::string>{"a", "", "", "", "🦙"}));
  EXPECT_EQ(dec.Finish(), "");
  // An incomplete character at the end is flushed as U+FFFD.
  StreamingDecoder cut = (*tok)->NewStreamingDecoder();
  EXPECT_EQ(*cut.Next((*ids)[0]), "a");
  EXPECT_EQ(*cut.Next((*ids)[1]), "");
  EXPECT_EQ(cut.Finish(), "\xEF\xBF\xBD");
  ExpectStreamingMatchesDecode(**tok, std::vector<int32_t>(ids->begin(), ids->begin() + 3));
}

TEST(TokenizerPreTokenizer, NamedRegexes) {
  auto split = [](std::string_view name, std::string_view text) {
    auto regexes = PreTokenizerRegexes(name);
    EXPECT_TRUE(regexes.ok()) << regexes.status();
    auto pre = RegexPreTokenizer::Create(*regexes);
    EXPECT_TRUE(pre.ok()) << pre.status();
    auto pieces = pre->Split(text);
    EXPECT_TRUE(pieces.ok());
    return std::vector<std::string>(pieces->begin(), pieces->end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("gpt2", "Hello  world 12345!"), (V{"Hello", " ", " world", " 12345", "!"}));
  EXPECT_EQ(split("llama-bpe", "I'M 12345"), (V{"I", "'M", " ", "123", "45"}));
  EXPECT_EQ(split("qwen2", "x 123"), (V{"x", " ", "1", "2", "3"}));
  EXPECT_EQ(split("smollm", "ab 123 cd"), (V{"ab", " ", "1", "2", "3", " cd"}));
  auto unknown = PreTokenizerRegexes("no-such-pre");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("no-such-pre"), std::string::npos);
  EXPECT_FALSE(RegexPreTokenizer::Create({"(unclosed"}).ok());
}

TEST(TokenizerLoader, RejectsWhatIsNotATokenizer) {
  auto missing = LoadTokenizer("/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  auto dir = ::laminar::testing::TempDir("tokenizer_loader_bad");
  std::ofstream(dir / "notes.txt") << "just text";
  auto text = LoadTokenizer((dir / "notes.txt").string());
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("notes.txt"), std::string::npos);
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "Unigram", "vocab": []}})";
  auto unigram = LoadTokenizer(dir.string());
  ASSERT_FALSE(unigram.ok());
  EXPECT_NE(unigram.status().message().find("Unigram"), std::string::npos);
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {"a": 5}}})";
  EXPECT_FALSE(LoadTokenizer(dir.string()).ok());
  // A number past 64 bits is an error naming the file, not an uncaught exception (found by
  // tests/fuzz/hf_tokenizer_fuzz.cc).
  std::ofstream(dir / "tokenizer.json", std::ios::trunc)
      << R"({"added_tokens": [4)" << std::string(400, '0') << R"(], "model": {}})";
  auto huge = LoadTokenizer(dir.string());
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("invalid JSON"), std::string::npos) << huge.status();
}

// GPT-2's pair of files from their content (what the fuzz target feeds): each error names the
// file at fault, and the loader over files gives the same tokenizer.
TEST(TokenizerLoader, EncoderJsonPairFromContentNamesTheFileAtFault) {
  const std::string encoder = R"({"a": 0, "b": 1, "ab": 2, "\u0120": 3, "<|endoftext|>": 4})";
  const std::string merges = "#version: 0.2\na b\n";
  auto tok = ParseEncoderJsonTokenizer(encoder, merges, "m/encoder.json", "m/vocab.bpe");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("ab a", {.add_special = false, .parse_special = false});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(IdsToString(*ids), " 2 3 0");
  auto dir = ::laminar::testing::TempDir("encoder_json_pair");
  std::ofstream(dir / "encoder.json") << encoder;
  std::ofstream(dir / "vocab.bpe") << merges;
  auto loaded = LoadTokenizer((dir / "encoder.json").string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(IdsToString(*(*loaded)->Encode("ab a", {.add_special = false})), " 2 3 0");

  auto bad_merge = ParseEncoderJsonTokenizer(encoder, "a b\nab\n", "m/encoder.json", "m/vocab.bpe");
  ASSERT_FALSE(bad_merge.ok());
  EXPECT_NE(bad_merge.status().message().find("m/vocab.bpe: merge line 2"), std::string::npos)
      << bad_merge.status();
  auto repeated = ParseEncoderJsonTokenizer(R"({"a": 0, "b": 0, "<|endoftext|>": 2})", merges,
                                            "m/encoder.json", "m/vocab.bpe");
  ASSERT_FALSE(repeated.ok());
  EXPECT_NE(repeated.status().message().find("m/encoder.json: piece 'b'"), std::string::npos)
      << repeated.status();
}

TEST(TokenizerLoader, HfMergesAsPairsAndAddedTokens) {
  auto dir = ::laminar::testing::TempDir("tokenizer_hf_pairs");
  std::ofstream(dir / "tokenizer.json") << R"({
    "added_tokens": [{"id": 6, "content": "<|im_start|>", "special": true},
                     {"id": 7, "content": "<|im_end|>", "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "Ġ": 2, "ab": 3, "Ġab": 4, "c": 5},
              "merges": [["a", "b"], ["Ġ", "ab"]]}})";
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"eos_token": "<|im_end|>", "chat_template": "{{ messages }}"})";
  auto tok = LoadTokenizer(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("<|im_start|>ab ab<|im_end|>c");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(IdsToString(*ids), " 6 3 4 7 5");
  EXPECT_EQ((*tok)->eos_id(), 7);
  EXPECT_EQ((*tok)->vocab().chat_template, "{{ messages }}");
  EXPECT_EQ((*tok)->SpecialTokens(), (std::vector<int32_t>{6, 7}));
}

TEST(TokenizerExport, SentencePieceRoundTrips) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-llama-spm.gguf");
  auto tok = LoadTokenizer(gguf);
  ASSERT_TRUE(tok.ok());
  ExpectExportRoundTrip(**tok, "spm", VocabTestInputs(gguf + ".inp"));
}

TEST(TokenizerExport, Gpt2RoundTrips) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-gpt-2.gguf");
  auto tok = LoadTokenizer(gguf);
  ASSERT_TRUE(tok.ok());
  ExpectExportRoundTrip(**tok, "gpt2", VocabTestInputs(gguf + ".inp"));
}

}  // namespace
}  // namespace laminar::model
