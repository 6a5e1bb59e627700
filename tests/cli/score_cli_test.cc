// `laminar score` run as a process: scores by data_source, --reward overrides (a name and a
// weighted list), --output, and errors that name the line and leave no partial output.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/process.h"
#include "tests/cli/cli_util.h"
#include "tests/test_util.h"

namespace laminar {
namespace {

using testing::CliResult;
using testing::JsonLines;
using testing::RunLaminar;

std::string WriteFile(const std::string& name, const std::string& text) {
  auto path = (testing::TempDir("score_input") / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

const char* kMixed =
    R"({"data_source": "openai/gsm8k", "response": "3 + 4 = 7\n#### 7", "ground_truth": "#### 7", "id": 1})"
    "\n"
    R"({"data_source": "openai/gsm8k", "response": "#### 8", "ground_truth": "7"})"
    "\n\n"
    R"({"data_source": "HuggingFaceH4/MATH-500", "response": "so $\\boxed{\\dfrac{1}{2}}$", "ground_truth": "\\frac12"})"
    "\n"
    R"({"data_source": "countdown", "response": "<answer>30 - (100 - 93)</answer>", "ground_truth": {"target": 23, "numbers": [30, 100, 93]}, "extra_info": {"split": "test"}})"
    "\n"
    R"({"data_source": "math", "response": "\\boxed{3}", "reward_model": {"ground_truth": "3"}})"
    "\n";

TEST(CliScore, ScoresEachLineWithTheRewardOfItsDataSource) {
  const std::string in = WriteFile("in.jsonl", kMixed);
  CliResult r = RunLaminar("score --input " + in);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = JsonLines(r.out);
  ASSERT_EQ(rows.size(), 5u) << r.out;
  EXPECT_EQ(rows[0]["score"], 1.0);
  EXPECT_EQ(rows[0]["id"], 1);  // other fields pass through
  EXPECT_EQ(rows[1]["score"], 0.0);
  EXPECT_EQ(rows[2]["score"], 1.0);
  EXPECT_EQ(rows[3]["score"], 1.0);
  EXPECT_EQ(rows[4]["score"], 1.0);
  EXPECT_NE(r.err.find("5 responses, mean score 0.8"), std::string::npos) << r.err;
  // Field order is kept: the score comes last.
  EXPECT_EQ(r.out.find("{\"data_source\""), 0u) << r.out;
}

TEST(CliScore, RewardFlagOverridesTheDataSource) {
  const std::string in = WriteFile(
      "in.jsonl", R"({"data_source": "whatever", "response": "#### 12", "ground_truth": "12"})"
                  "\n"
                  R"({"response": "the answer: 12", "ground_truth": "12"})"
                  "\n");
  CliResult r = RunLaminar("score --input " + in + " --reward gsm8k");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto rows = JsonLines(r.out);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["score"], 1.0);
  EXPECT_EQ(rows[1]["score"], 1.0);
  // A weighted combination reports its components.
  const std::string out = (testing::TempDir("score_output") / "out.jsonl").string();
  r = RunLaminar("score --input " + in + " --output " + out +
                 " --reward '[{name: gsm8k, weight: 0.75}, {name: format, weight: 0.25, "
                 "pattern: \"#### \\\\d+\"}]'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  rows = JsonLines(testing::Slurp(out));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[0]["score"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(rows[1]["score"].get<double>(), 0.75);
  EXPECT_EQ(rows[1]["reward_extra"]["reward/gsm8k"], 1.0);
  EXPECT_EQ(rows[1]["reward_extra"]["reward/format"], 0.0);
}

TEST(CliScore, BadLinesNameTheLineAndWriteNothing) {
  const std::string good = R"({"data_source": "gsm8k", "response": "#### 1", "ground_truth": "1"})"
                           "\n";
  const std::pair<std::string, std::string> cases[] = {
      {good + good + "{not json\n", "in.jsonl:3: not JSON"},
      {good + R"({"data_source": "gsm8k", "ground_truth": "1"})"
              "\n",
       ":2: missing 'response'"},
      {good + R"({"data_source": "gsm8k", "response": "x"})"
              "\n",
       ":2: missing 'ground_truth'"},
      {R"({"response": "x", "ground_truth": "1"})"
       "\n",
       ":1: missing 'data_source'"},
      {good + "\n" +
           R"({"data_source": "imagenet", "response": "x", "ground_truth": "1"})"
           "\n",
       ":3: no default reward for data_source 'imagenet'"},
      {R"({"data_source": "gsm8k", "response": 5, "ground_truth": "1"})"
       "\n",
       ":1: 'response' is not a string"},
      {R"({"data_source": "gsm8k", "response": "#### 1", "ground_truth": "one"})"
       "\n",
       ":1: reward gsm8k: ground truth 'one'"},
      {"[1, 2]\n", ":1: expected a JSON object"},
  };
  for (const auto& [text, what] : cases) {
    const std::string in = WriteFile("in.jsonl", text);
    CliResult r = RunLaminar("score --input " + in);
    EXPECT_EQ(r.exit_code, 1) << text;
    EXPECT_NE(r.err.find(what), std::string::npos) << text << "\n" << r.err;
    EXPECT_EQ(r.out, "") << text;
  }
}

using testing::ProcessState;

// A Python reward worker in the middle of a call exits once the process that started it is killed
// (it would otherwise sleep on as an orphan).
TEST(CliScore, APythonRewardWorkerDiesWithItsParent) {
  const auto dir = testing::TempDir("score_orphan");
  const std::string pid_file = (dir / "worker.pid").string();
  const std::string reward = (dir / "hang.py").string();
  std::ofstream(reward) << "import os, time\n"
                           "def hang(data_source, solution_str, ground_truth, extra_info=None):\n"
                           "    with open('" +
                               pid_file +
                               ".tmp', 'w') as f:\n"
                               "        f.write(str(os.getpid()))\n"
                               "    os.rename('" +
                               pid_file + ".tmp', '" + pid_file +
                               "')\n"
                               "    time.sleep(600)\n";
  const std::string in = WriteFile("in.jsonl", R"({"response": "a", "ground_truth": "a"})"
                                               "\n");
  auto score = Process::Spawn({LAMINAR_BINARY, "score", "--input", in, "--reward",
                               "{python: {path: " + reward + ", function: hang, timeout_s: 600}}"});
  ASSERT_TRUE(score.ok()) << score.status();
  ASSERT_TRUE(testing::WaitFor([&] { return std::filesystem::exists(pid_file); }, 60000));
  const int worker = std::stoi(*ReadFileToString(pid_file));
  ASSERT_NE(ProcessState(worker), 0);  // in the call
  score->Signal(SIGKILL);
  ASSERT_TRUE(score->Wait(10000).ok());
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        const char state = ProcessState(worker);
        return state == 0 || state == 'Z';
      },
      10000))
      << "the worker " << worker << " outlived its parent";
  if (const char state = ProcessState(worker); state != 0 && state != 'Z') {
    kill(worker, SIGKILL);  // never leave it behind
  }
}

TEST(CliScore, UsageErrors) {
  const std::string in = WriteFile("in.jsonl", "");
  CliResult r = RunLaminar("score --input " + in + " --reward gsm9k");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no built-in reward named 'gsm9k'"), std::string::npos) << r.err;
  r = RunLaminar("score --input " + in + " --reward '{name: format, weight: x, pattern: a}'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--reward.weight: expected a number, got 'x'"), std::string::npos) << r.err;
  r = RunLaminar("score --input /nonexistent/in.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("/nonexistent/in.jsonl: cannot open"), std::string::npos) << r.err;
  r = RunLaminar("score --input - --reward exact_match",
                 R"({"response": " a ", "ground_truth": "a"})");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"score\":1.0"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace laminar
