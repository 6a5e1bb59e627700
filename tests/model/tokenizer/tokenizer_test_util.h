// Helpers for the tokenizer tests: llama.cpp's .inp/.out expected-encoding files and checks that
// every tokenizer must pass (round trip, streaming decode).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "tests/test_util.h"

namespace laminar::model::testing {

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// llama.cpp test-tokenizer-0 files: inputs separated by "\n__ggml_vocab_test__\n" (one after the
// last input too), and one line of space-separated ids per input (HF encode with
// add_special_tokens=False).
inline std::vector<std::pair<std::string, std::vector<int32_t>>> ReadVocabTestCases(
    const std::string& inp_path, const std::string& out_path) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string inp = ReadAll(inp_path);
  std::vector<std::string> inputs;
  size_t pos = 0;
  while (true) {
    size_t next = inp.find(sep, pos);
    if (next == std::string::npos) break;
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(ReadAll(out_path));
  std::vector<std::pair<std::string, std::vector<int32_t>>> cases;
  std::string line;
  for (const std::string& input : inputs) {
    std::getline(out, line);
    std::istringstream ids(line);
    std::vector<int32_t> v;
    int32_t id;
    while (ids >> id) v.push_back(id);
    cases.emplace_back(input, std::move(v));
  }
  return cases;
}

// Streaming decode equals Decode of the whole, and every piece is valid UTF-8.
inline void ExpectStreamingMatchesDecode(const Tokenizer& tok, const std::vector<int32_t>& ids,
                                         bool skip_special = false) {
  auto whole = tok.Decode(ids, skip_special);
  ASSERT_TRUE(whole.ok()) << whole.status();
  StreamingDecoder dec = tok.NewStreamingDecoder(skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    auto piece = dec.Next(id);
    ASSERT_TRUE(piece.ok()) << piece.status();
    EXPECT_FALSE(FindInvalidUtf8(*piece).has_value()) << "partial UTF-8 emitted for id " << id;
    streamed += *piece;
  }
  std::string tail = dec.Finish();
  EXPECT_FALSE(FindInvalidUtf8(tail).has_value());
  streamed += tail;
  EXPECT_EQ(streamed, *whole);
}

inline std::string IdsToString(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

// Exports `tok` as Hugging Face files, reloads the folder and checks the test inputs encode and
// decode the same.
inline void ExpectExportRoundTrip(const Tokenizer& tok, const std::string& name,
                                  const std::vector<std::string>& inputs) {
  auto files = ExportHfTokenizerFiles(tok, "{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 3u);
  auto dir = ::laminar::testing::TempDir("tokenizer_export_" + name);
  for (const auto& [file, content] : *files) std::ofstream(dir / file) << content;
  auto back = LoadTokenizer(dir.string());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->kind(), tok.kind());
  EXPECT_EQ((*back)->vocab_size(), tok.vocab_size());
  EXPECT_EQ((*back)->bos_id(), tok.bos_id());
  EXPECT_EQ((*back)->eos_id(), tok.eos_id());
  EXPECT_EQ((*back)->SpecialTokens(), tok.SpecialTokens());
  EXPECT_EQ((*back)->vocab().chat_template, "{% for m in messages %}{{ m.content }}{% endfor %}");
  for (const std::string& text : inputs) {
    for (bool add_special : {false, true}) {
      auto a = tok.Encode(text, {.add_special = add_special});
      auto b = (*back)->Encode(text, {.add_special = add_special});
      ASSERT_TRUE(a.ok() && b.ok());
      EXPECT_EQ(IdsToString(*b), IdsToString(*a)) << name << ": '" << text << "'";
      EXPECT_EQ(*(*back)->Decode(*b), *tok.Decode(*a));
    }
  }
}

// The inputs of a llama.cpp .inp file plus special-token text.
inline std::vector<std::string> VocabTestInputs(const std::string& inp) {
  std::vector<std::string> texts;
  for (auto& [text, ids] : ReadVocabTestCases(inp, inp.substr(0, inp.size() - 3) + "out")) {
    texts.push_back(text);
  }
  texts.push_back("<s>special</s> and <|endoftext|> text");
  return texts;
}

}  // namespace laminar::model::testing
