// `laminar generate` as a process: llama2.c's published stories260K goldens byte for byte from the
// .bin and the .gguf, the default model answering a chat question, errors, and batch generation
// (--input) through the rollout engine.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/mapped_file.h"
#include "model/model_path.h"
#include "tests/cli/cli_util.h"

namespace laminar {
namespace {

using testing::RunLaminar;

TEST(CliGenerate, ReproducesLlama2cGoldens) {
  LAMINAR_SHARED_OR_SKIP(golden_path, "models/stories260K/golden_outputs.json");
  LAMINAR_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  LAMINAR_SHARED_OR_SKIP(gguf, "models/stories260K/stories260K.gguf");
  auto golden = nlohmann::json::parse(*ReadFileToString(golden_path));
  for (const auto& c : golden["cases"]) {
    const auto& args = c["args"];
    std::string flags = "--sampler llama2c --temperature " +
                        std::to_string(args["temperature"].get<double>()) + " --steps " +
                        std::to_string(args["steps"].get<int>()) + " --prompt '" +
                        args["prompt"].get<std::string>() + "'";
    if (args.contains("topp")) flags += " --top-p " + std::to_string(args["topp"].get<double>());
    if (args.contains("seed") && args["seed"].is_number())
      flags += " --seed " + std::to_string(args["seed"].get<int>());
    for (const std::string& model : {bin, gguf}) {
      auto r = RunLaminar("generate --model " + model + " " + flags);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, c["expected"].get<std::string>() + "\n") << c["name"] << " from " << model;
    }
  }
}

TEST(CliGenerate, DefaultModelNamesParis) {
  auto path = model::ResolveModelPath("smollm2-135m-instruct");
  if (!path.ok()) GTEST_SKIP() << "default model not installed (scripts/setup.sh)";
  auto r = RunLaminar(
      "generate --model smollm2-135m-instruct --chat --prompt 'What is the capital of "
      "France?' --temperature 0 --max-tokens 24 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = nlohmann::json::parse(r.out);
  EXPECT_NE(out["text"].get<std::string>().find("Paris"), std::string::npos) << r.out;
  EXPECT_EQ(out["ids"].size(), out["logprobs"].size());
  for (const auto& lp : out["logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
}

TEST(CliGenerate, SampledRunsRepeatWithTheSameSeed) {
  const std::string bin = ::laminar::testing::TinyModel();
  std::string cmd =
      "generate --model " + bin +
      " --prompt 'Once upon' --temperature 0.8 --top-p 0.9 --seed 7 --max-tokens 40 --json";
  auto a = RunLaminar(cmd), b = RunLaminar(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(CliGenerate, BadInput) {
  const std::string bin = ::laminar::testing::TinyModel();
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += "time ";
  auto r = RunLaminar("generate --model " + bin + " --prompt '" + long_prompt + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not fit the model's context of 1024"), std::string::npos) << r.err;
  const std::string no_template = testing::TinyModelWithoutChatTemplate();
  r = RunLaminar("generate --model " + no_template + " --chat --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
  r = RunLaminar("generate --model " + bin + " --temperature -1 --prompt hi");
  EXPECT_EQ(r.exit_code, 2);
  r = RunLaminar("generate --model " + bin + " --seed -5 --prompt hi");  // not wrapped to 2^64-5
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("must not be negative"), std::string::npos) << r.err;
}

// Writes `lines` to a fresh prompts file and returns its path.
std::string WritePrompts(const std::string& lines) {
  auto path = testing::TempDir("cli_batch") / "prompts.jsonl";
  std::ofstream(path, std::ios::binary) << lines;
  return path.string();
}

std::vector<nlohmann::json> ParseLines(const std::string& text) {
  std::vector<nlohmann::json> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

const char* const kBatchPrompts[] = {"Once upon a time", "The dog", "Lily was"};

std::string BatchInput() {
  std::string lines;
  for (const char* p : kBatchPrompts) lines += nlohmann::json{{"prompt", p}}.dump() + "\n";
  return lines;
}

TEST(CliGenerate, BatchWritesOneLinePerSample) {
  const std::string bin = ::laminar::testing::TinyModel();
  std::string input = WritePrompts(BatchInput());
  auto out_path = testing::TempDir("cli_batch_out") / "out.jsonl";
  auto r = RunLaminar("generate --model " + bin + " --input " + input + " --output " +
                      out_path.string() + " --n 2 --max-tokens 8 --seed 3 --logprobs 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");  // everything went to --output
  auto lines = ParseLines(testing::Slurp(out_path));
  ASSERT_EQ(lines.size(), 6u);
  std::map<std::pair<int, int>, int> seen;
  for (const auto& j : lines) {
    for (const char* key : {"prompt_id", "sample_index", "text", "token_ids", "logprobs",
                            "finish_reason", "version"}) {
      ASSERT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
    }
    ++seen[{j["prompt_id"].get<int>(), j["sample_index"].get<int>()}];
    EXPECT_EQ(j["token_ids"].size(), j["logprobs"].size());
    EXPECT_GE(j["token_ids"].size(), 1u);
    EXPECT_LE(j["token_ids"].size(), 8u);
    for (const auto& lp : j["logprobs"]) EXPECT_LE(lp.get<double>(), 0.0);
    ASSERT_EQ(j["top_logprobs"].size(), j["token_ids"].size());
    for (size_t t = 0; t < j["token_ids"].size(); ++t) {
      const auto& top = j["top_logprobs"][t];
      ASSERT_EQ(top.size(), 2u);
      EXPECT_GE(top[0][1].get<double>(), top[1][1].get<double>());
      // The sampled token is among the top two or less likely than both.
      const auto id = j["token_ids"][t], lp = j["logprobs"][t];
      if (top[0][0] == id) {
        EXPECT_EQ(top[0][1], lp);
      } else if (top[1][0] != id) {
        EXPECT_LE(lp.get<double>(), top[1][1].get<double>());
      }
    }
    const std::string finish = j["finish_reason"];
    EXPECT_TRUE(finish == "length" || finish == "stop") << finish;
    if (finish == "length") {
      EXPECT_EQ(j["token_ids"].size(), 8u);
    }
    EXPECT_EQ(j["version"], 0);
  }
  // Default ids are the 1-based line numbers; each (prompt, sample) appears once.
  for (int line = 1; line <= 3; ++line) {
    for (int sample = 0; sample < 2; ++sample) EXPECT_EQ((seen[{line, sample}]), 1);
  }
}

TEST(CliGenerate, BatchGreedyEqualsSinglePrompt) {
  const std::string bin = ::laminar::testing::TinyModel();
  // Explicit ids are echoed as given, whatever their JSON type.
  std::string lines;
  for (int i = 0; i < 3; ++i) {
    lines +=
        nlohmann::json{{"prompt", kBatchPrompts[i]}, {"id", "p" + std::to_string(i)}}.dump() + "\n";
  }
  auto r = RunLaminar("generate --model " + bin + " --input " + WritePrompts(lines) +
                      " --n 2 --max-tokens 8 --temperature 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = ParseLines(r.out);
  ASSERT_EQ(out.size(), 6u);
  for (int i = 0; i < 3; ++i) {
    auto single = RunLaminar("generate --model " + bin + " --prompt '" + kBatchPrompts[i] +
                             "' --max-tokens 8 --temperature 0 --json");
    ASSERT_EQ(single.exit_code, 0) << single.err;
    auto expected = nlohmann::json::parse(single.out);
    int matched = 0;
    for (const auto& j : out) {
      if (j["prompt_id"] != "p" + std::to_string(i)) continue;
      ++matched;
      EXPECT_EQ(j["token_ids"], expected["ids"]) << kBatchPrompts[i];
      EXPECT_EQ(j["text"], expected["text"]) << kBatchPrompts[i];
      EXPECT_EQ(j["finish_reason"], expected["finish_reason"]) << kBatchPrompts[i];
    }
    EXPECT_EQ(matched, 2) << kBatchPrompts[i];
  }
}

TEST(CliGenerate, BatchBadInputNamesFileAndLine) {
  const std::string bin = ::laminar::testing::TinyModel();
  std::string input = WritePrompts("{\"prompt\": \"hi\"}\n{\"prompt\": \"hi\"\n");
  auto r = RunLaminar("generate --model " + bin + " --input " + input + " --max-tokens 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(input + ":2: malformed JSON"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  input = WritePrompts("{\"prompt\": \"hi\"}\n\n{\"text\": \"hi\"}\n");
  r = RunLaminar("generate --model " + bin + " --input " + input + " --max-tokens 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(input + ":3: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"prompt\""), std::string::npos) << r.err;
  r = RunLaminar("generate --model " + bin + " --input " + input + " --n 0");
  EXPECT_EQ(r.exit_code, 2);
  r = RunLaminar("generate --model " + bin + " --input /nonexistent/prompts.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/prompts.jsonl"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace laminar
