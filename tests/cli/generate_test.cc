// `laminar generate` as a process: llama2.c's published stories260K goldens byte for byte from the
// .bin and the .gguf, the default model answering a chat question, and errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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
  LAMINAR_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  std::string cmd =
      "generate --model " + bin +
      " --prompt 'Once upon' --temperature 0.8 --top-p 0.9 --seed 7 --max-tokens 40 --json";
  auto a = RunLaminar(cmd), b = RunLaminar(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
}

TEST(CliGenerate, BadInput) {
  LAMINAR_SHARED_OR_SKIP(bin, "models/stories260K/stories260K.bin");
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += "time ";
  auto r = RunLaminar("generate --model " + bin + " --prompt '" + long_prompt + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("does not fit the model's context of 512"), std::string::npos) << r.err;
  r = RunLaminar("generate --model " + bin + " --chat --prompt hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no chat template"), std::string::npos) << r.err;
  r = RunLaminar("generate --model " + bin + " --temperature -1 --prompt hi");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace laminar
