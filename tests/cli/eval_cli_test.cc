// `laminar eval` as a process on the synthetic tiny-llama: pass@1 and pass@k agree with the
// per-sample output, runs repeat exactly (also with another batch size), a recipe supplies the
// settings and flags override it, and errors name the flag, file or line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_util.h"

namespace laminar {
namespace {

using testing::CliResult;
using testing::RunLaminar;

std::string WriteFile(const std::string& name, const std::string& text) {
  // TempDir empties its folder: one folder per file.
  auto path = (testing::TempDir("eval_input_" + name) / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Four stories prompts: "e" is in nearly every story, "zqxj" in none, the others in some.
const char* kEvalSet =
    R"({"prompt": "Once upon a time", "ground_truth": "e", "data_source": "stories"})"
    "\n"
    R"({"prompt": "Lily went to the park", "ground_truth": "zqxj", "data_source": "stories"})"
    "\n\n"
    R"({"prompt": "Tom had a big red ball", "ground_truth": "ball", "data_source": "toys"})"
    "\n"
    R"({"prompt": "The cat", "ground_truth": "happy", "data_source": "stories"})"
    "\n";

constexpr const char* kContains = " --reward '{name: contains}'";

// The JSON summary without its timings (which differ between runs).
nlohmann::json Untimed(const std::string& out) {
  nlohmann::json j = nlohmann::json::parse(out);
  j.erase("elapsed_s");
  j.erase("tokens_per_s");
  return j;
}

// 1 - C(n-c, k)/C(n, k) by the binomials, independent of the product form eval uses.
double PassAtKByBinomials(int n, int c, int k) {
  auto binomial = [](int a, int b) {
    if (b < 0 || b > a) return 0.0;
    double r = 1;
    for (int i = 1; i <= b; ++i) r = r * (a - b + i) / i;
    return r;
  };
  return 1.0 - binomial(n - c, k) / binomial(n, k);
}

TEST(CliEval, PassAtKMatchesTheSamplesAndRunsRepeat) {
  const std::string bin = ::laminar::testing::TinyModel();
  const std::string data = WriteFile("set.jsonl", kEvalSet);
  const std::string out1 = (testing::TempDir("eval_out1") / "samples.jsonl").string();
  const std::string out2 = (testing::TempDir("eval_out2") / "samples.jsonl").string();
  const std::string cmd = "eval --model " + bin + " --data " + data + kContains +
                          " --n 4 --k 1,2,4 --max-tokens 48 --json";
  CliResult a = RunLaminar(cmd + " --seed 3 --output " + out1);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  nlohmann::json s = nlohmann::json::parse(a.out);
  EXPECT_EQ(s["num_problems"], 4);
  EXPECT_EQ(s["num_samples"], 16);
  EXPECT_EQ(s["n"], 4);
  EXPECT_EQ(s["seed"], 3);
  EXPECT_EQ(s["temperature"], 1.0);  // sampled by default when n > 1
  EXPECT_EQ(s["k"], nlohmann::json({1, 2, 4}));
  EXPECT_EQ(s["reward_errors"], 0);
  EXPECT_GT(s["generated_tokens"].get<int64_t>(), 0);

  // The summary agrees with the per-sample lines, ordered by row then sample.
  auto lines = testing::JsonLines(testing::Slurp(out1));
  ASSERT_EQ(lines.size(), 16u);
  std::map<std::string, int> correct;
  std::vector<std::string> order;
  double score = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& l = lines[i];
    EXPECT_EQ(l["sample_index"], static_cast<int>(i % 4));
    const std::string id = l["prompt_id"].get<std::string>();
    if (i % 4 == 0) order.push_back(id);
    const bool has = l["response"].get<std::string>().find(l["ground_truth"].get<std::string>()) !=
                     std::string::npos;
    EXPECT_EQ(l["score"], has ? 1.0 : 0.0) << l;
    EXPECT_EQ(l["correct"], has);
    correct[id] += has ? 1 : 0;
    score += l["score"].get<double>();
  }
  EXPECT_EQ(order, (std::vector<std::string>{"0", "1", "2", "3"}));  // non-blank line indices
  EXPECT_EQ(correct["1"], 0);                                        // "zqxj" never appears
  EXPECT_GE(correct["0"], 3);                                        // "e" nearly always does
  EXPECT_DOUBLE_EQ(s["mean_score"].get<double>(), score / 16);
  for (int k : {1, 2, 4}) {
    double want = 0;
    for (const auto& [id, c] : correct) want += PassAtKByBinomials(4, c, k) / 4;
    const double got = s["pass@" + std::to_string(k)].get<double>();
    EXPECT_NEAR(got, want, 1e-12) << "pass@" << k;
    EXPECT_GE(got, 0.0);
    EXPECT_LE(got, 1.0);
  }
  EXPECT_LE(s["pass@1"].get<double>(), s["pass@2"].get<double>());
  EXPECT_LE(s["pass@2"].get<double>(), s["pass@4"].get<double>());
  EXPECT_EQ(s["by_data_source"]["stories"]["num_problems"], 3);
  EXPECT_EQ(s["by_data_source"]["toys"]["num_problems"], 1);

  // The same command gives the same numbers and samples, also with one sequence in flight.
  CliResult b = RunLaminar(cmd + " --seed 3 --batch 1 --output " + out2);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(Untimed(a.out), Untimed(b.out));
  EXPECT_EQ(testing::Slurp(out1), testing::Slurp(out2));
  // Another seed draws other samples.
  const std::string out3 = (testing::TempDir("eval_out3") / "samples.jsonl").string();
  CliResult c = RunLaminar(cmd + " --seed 4 --output " + out3);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(testing::Slurp(out1), testing::Slurp(out3));
}

TEST(CliEval, GreedyByDefaultAndTextSummary) {
  const std::string bin = ::laminar::testing::TinyModel();
  const std::string data = WriteFile("set.jsonl", kEvalSet);
  CliResult r = RunLaminar("eval --model " + bin + " --data " + data + kContains +
                           " --max-tokens 32 --limit 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("3 problems x 1 sample, seed 0, temperature 0,"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("  pass@1 0."), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("pass@2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  // Two data sources: each gets its own lines.
  EXPECT_NE(r.out.find("  toys (1 problem):\n    pass@1 "), std::string::npos) << r.out;
}

TEST(CliEval, RecipeSuppliesSettingsAndFlagsOverride) {
  const std::string bin = ::laminar::testing::TinyModel();
  const std::string data = WriteFile("set.jsonl", kEvalSet);
  const std::string recipe =
      WriteFile("recipe.yaml", "model:\n  path: " + bin + "\ndata:\n  path: " + data +
                                   "\nreward:\n  name: contains\nrollout:\n  temperature: 0.7\n"
                                   "  top_p: 0.9\n  max_tokens: 16\n  n: 8\n");
  CliResult r = RunLaminar("eval --recipe " + recipe + " --n 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["model"], bin);
  EXPECT_EQ(s["data"], data);
  EXPECT_EQ(s["temperature"].get<double>(), 0.7);  // as written, not 0.699999988
  EXPECT_NEAR(s["top_p"].get<double>(), 0.9, 1e-6);
  EXPECT_EQ(s["max_tokens"], 16);
  EXPECT_EQ(s["n"], 2);  // --n, not rollout.n
  EXPECT_EQ(s["num_samples"], 8);
  EXPECT_LE(s["mean_response_tokens"].get<double>(), 16.0);
  const std::string out = (testing::TempDir("eval_out") / "samples.jsonl").string();
  r = RunLaminar("eval --recipe " + recipe + " --stop ' ' rollout.max_tokens=24 --temperature 0" +
                 " --limit 2 --json --output " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  s = nlohmann::json::parse(r.out);
  EXPECT_EQ(s["temperature"], 0.0);
  EXPECT_EQ(s["max_tokens"], 24);
  EXPECT_EQ(s["stop"], nlohmann::json({" "}));
  EXPECT_EQ(s["num_problems"], 2);
  auto lines = testing::JsonLines(testing::Slurp(out));
  ASSERT_EQ(lines.size(), 2u);
  for (const nlohmann::json& l : lines) {
    const std::string text = l["response"].get<std::string>();
    EXPECT_LE(l["num_tokens"].get<int>(), 24);
    // The synthetic model's greedy text reaches a space well within 24 tokens, and generation
    // stops at the token that brings the first one.
    EXPECT_EQ(l["finish_reason"], "stop") << l;
    ASSERT_NE(text.find(' '), std::string::npos) << l;
    EXPECT_EQ(text.find(' '), text.rfind(' ')) << l;
  }
}

TEST(CliEval, ErrorsNameTheFlagFileOrLine) {
  const std::string bin = ::laminar::testing::TinyModel();
  const std::string data = WriteFile("set.jsonl", kEvalSet);
  const std::string base = "eval --model " + bin + kContains;
  CliResult r = RunLaminar(base + " --data /nonexistent/eval.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/eval.jsonl"), std::string::npos) << r.err;
  const std::string bad =
      WriteFile("bad.jsonl", R"({"prompt": "Once", "ground_truth": "e", "data_source": "s"})"
                             "\n"
                             R"({"ground_truth": "e", "data_source": "s"})"
                             "\n");
  r = RunLaminar(base + " --data " + bad);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(bad + ":2"), std::string::npos) << r.err;
  r = RunLaminar(base + " --data " + data + " --n 2 --k 1,4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--k: pass@4 needs at least 4 samples"), std::string::npos) << r.err;
  r = RunLaminar(base + " --data " + data + " --k 1,x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--k: 'x'"), std::string::npos) << r.err;
  r = RunLaminar("eval --model " + bin + " --data " + data + " --reward nosuch");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("nosuch"), std::string::npos) << r.err;
  r = RunLaminar("eval --data " + data);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
  r = RunLaminar(base + " --data " + data + " rollout.n=4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("needs --recipe"), std::string::npos) << r.err;
  r = RunLaminar("eval --model /nonexistent/model.bin --data " + data);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace laminar
