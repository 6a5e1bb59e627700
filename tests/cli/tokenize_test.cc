// `laminar tokenize` run as a process on shared-data tokenizers: encode, decode, special tokens,
// the llama2.c model + sibling tokenizer case, and errors with their exit codes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli/cli_util.h"

namespace laminar {
namespace {

using Result = testing::CliResult;

// Runs `laminar tokenize <args>` with `input` on stdin.
Result RunTokenize(const std::string& args, const std::string& input) {
  return testing::RunLaminar("tokenize " + args, input);
}

TEST(CliTokenize, EncodesAndDecodesLlama3) {
  LAMINAR_FETCHED(enc, "llama.cpp/ggml-vocab-llama-bpe.gguf");
  Result r = RunTokenize("--model " + enc, "hello world");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "15339 1917\n");
  r = RunTokenize("--model " + enc + " --add-special", "hello <|end_of_text|>");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "128000 15339 220 128001\n");
  r = RunTokenize("--model " + enc + " --no-parse-special", "<|end_of_text|>");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("128001"), std::string::npos) << r.out;
  r = RunTokenize("--model " + enc + " --decode", "128000 15339 1917\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<|begin_of_text|>hello world");
  r = RunTokenize("--model " + enc + " --decode --skip-special", "128000 15339 1917");
  EXPECT_EQ(r.out, "hello world");
}

TEST(CliTokenize, ModelFileAndTokenizerOverrideAgree) {
  const std::string model = ::laminar::testing::TinyModel();  // GGUF: the vocabulary inside
  const std::string tok = ::laminar::testing::TinyModelHf();  // tokenizer.json
  Result by_model = RunTokenize("--model " + model, "Once upon a time <|im_end|>");
  ASSERT_EQ(by_model.exit_code, 0) << by_model.err;
  EXPECT_NE(by_model.out.find(" 2"), std::string::npos) << by_model.out;  // <|im_end|> is one id
  Result by_override =
      RunTokenize("--model " + model + " --tokenizer " + tok, "Once upon a time <|im_end|>");
  ASSERT_EQ(by_override.exit_code, 0) << by_override.err;
  EXPECT_EQ(by_override.out, by_model.out);
  Result back = RunTokenize("--model " + tok + " --decode --skip-special", by_model.out);
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, "Once upon a time ");
}

TEST(CliTokenize, ErrorsNameTheProblem) {
  LAMINAR_FETCHED(gguf, "llama.cpp/ggml-vocab-gpt-2.gguf");
  Result bad_utf8 = RunTokenize("--model " + gguf, "ok \xFF\xFE");
  EXPECT_EQ(bad_utf8.exit_code, 1);
  EXPECT_NE(bad_utf8.err.find("invalid UTF-8 at byte offset 3"), std::string::npos) << bad_utf8.err;
  Result bad_id = RunTokenize("--model " + gguf + " --decode", "1 2 99999999");
  EXPECT_EQ(bad_id.exit_code, 1);
  EXPECT_NE(bad_id.err.find("99999999"), std::string::npos) << bad_id.err;
  Result missing = RunTokenize("--model /nonexistent/model.gguf", "x");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("/nonexistent/model.gguf"), std::string::npos) << missing.err;
  EXPECT_EQ(RunTokenize("", "x").exit_code, 2);
  EXPECT_EQ(RunTokenize("--model " + gguf + " --no-such-flag", "x").exit_code, 2);
}

}  // namespace
}  // namespace laminar
