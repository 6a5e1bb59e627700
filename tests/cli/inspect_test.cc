// `laminar inspect`, `convert` and `chat-template` run as processes on real checkpoints, and
// their errors on bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/cli/cli_util.h"

namespace laminar {
namespace {

using testing::RunLaminar;

TEST(CliInspect, DescribesAGgufModelAndItsMetadata) {
  const std::string gguf = ::laminar::testing::TinyModel();
  auto r = RunLaminar("inspect " + gguf);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("format         gguf"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("heads          4 (kv 2)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos);
  EXPECT_NE(r.out.find("tokenizer      byte-level BPE"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chat format    chatml"), std::string::npos) << r.out;
  r = RunLaminar("inspect --metadata " + gguf);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("llama.block_count"), std::string::npos) << r.out;
}

TEST(CliInspect, ConvertsToHuggingFaceAndBack) {
  const std::string bin = ::laminar::testing::TinyModel();
  auto dir = testing::TempDir("cli_convert") / "hf";
  auto r = RunLaminar("convert " + bin + " --out " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f :
       {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / f)) << f;
  }
  r = RunLaminar("inspect " + dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("format         hf"), std::string::npos);
  EXPECT_NE(r.out.find("rotate-half layout"), std::string::npos);
  // The exported tokenizer encodes like the original.
  auto a = RunLaminar("tokenize --model " + bin, "Once upon a time");
  auto b = RunLaminar("tokenize --model " + dir.string(), "Once upon a time");
  EXPECT_EQ(a.out, b.out);
  // A second convert refuses to replace the folder; nothing is lost.
  r = RunLaminar("convert " + bin + " --out " + dir.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors"));
}

TEST(CliInspect, ChatTemplateByName) {
  auto r = RunLaminar("chat-template --format smollm2 --user 'What is 2+2?'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  r = RunLaminar("chat-template --format vicuna --user hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown chat format 'vicuna'"), std::string::npos) << r.err;
}

TEST(CliInspect, BadInputGetsClearErrors) {
  auto dir = testing::TempDir("cli_bad");
  auto r = RunLaminar("inspect /nonexistent/model.gguf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << r.err;
  std::ofstream(dir / "junk.bin") << "definitely not a model";
  r = RunLaminar("inspect " + (dir / "junk.bin").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("junk.bin"), std::string::npos) << r.err;
  const std::string gguf = ::laminar::testing::TinyModel();
  // A truncated GGUF: the error names the file; no crash.
  std::ifstream in(gguf, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir / "cut.gguf", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  r = RunLaminar("inspect " + (dir / "cut.gguf").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cut.gguf"), std::string::npos) << r.err;
  r = RunLaminar("chat-template --model " + testing::TinyModelWithoutChatTemplate() + " --user hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace laminar

namespace laminar {
namespace {

// The folder `laminar convert` writes loads in Hugging Face transformers and computes llama2.c's
// logits (scripts/check_hf_export.py). Runs only where `scripts/setup.sh --bench` made the
// benchmark virtualenv with torch and transformers; skips elsewhere (CI).
TEST(CliInspect, ConvertedFolderRunsInTransformers) {
  const char* home = std::getenv("HOME");
  std::string venv = std::getenv("LAMINAR_BENCH_VENV")
                         ? std::getenv("LAMINAR_BENCH_VENV")
                         : std::string(home ? home : "") + "/.cache/laminar/bench-venv";
  std::string python = venv + "/bin/python";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << "no benchmark venv at " << venv;
  const std::string bin = ::laminar::testing::TinyModel();
  LAMINAR_SHARED_OR_SKIP(trace, "models/stories260K/derived_greedy_trace_once_upon_a_time_64.json");
  auto dir = testing::TempDir("hf_transformers") / "hf";
  ASSERT_EQ(RunLaminar("convert " + bin + " --out " + dir.string()).exit_code, 0);
  std::string cmd = python + " " + LAMINAR_SOURCE_DIR + "/scripts/check_hf_export.py " +
                    dir.string() + " --trace " + trace + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace laminar
