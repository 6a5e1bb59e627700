// `laminar plot`: five PNGs from a small metrics.jsonl (skipped when gnuplot is absent), the
// TensorBoard fallback, a bad line named by file and line, and a missing gnuplot.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "actor/tensorboard.h"
#include "tests/cli/cli_util.h"

namespace laminar::testing {
namespace {

namespace fs = std::filesystem;

bool HaveGnuplot() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

bool IsPng(const fs::path& p) {
  const std::string s = Slurp(p);
  return s.size() > 8 && s.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
}

const char* const kCharts[] = {"reward.png", "response_length.png", "mismatch.png", "staleness.png",
                               "throughput.png"};

void WriteMetrics(const fs::path& run) {
  std::ofstream f(run / "metrics.jsonl");
  for (int step = 1; step <= 4; ++step) {
    f << "{\"training/global_step\":" << step << ",\"critic/score/mean\":" << 0.1 * step
      << ",\"response_length/mean\":" << 100 + step << ",\"response_length/max\":" << 200 + step
      << ",\"rollout_corr/kl\":0.001,\"rollout_corr/abs_logprob_diff_mean\":0.01"
      << (step > 1 ? ",\"actor/ppo_kl\":0.002" : "")  // absent on the first step
      << ",\"staleness/mean\":0.5,\"staleness/max\":1,\"perf/throughput\":" << 1000 * step << "}\n";
  }
}

TEST(PlotTest, WritesFivePngs) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  const fs::path run = TempDir("run");
  WriteMetrics(run);
  CliResult r = RunLaminar("plot " + run.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* png : kCharts) {
    EXPECT_TRUE(IsPng(run / "plots" / png)) << png << "\n" << r.err;
    EXPECT_NE(r.out.find((run / "plots" / png).string()), std::string::npos) << r.out;
  }
  // Nothing of gnuplot's working files is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(run / "plots")) files += e.exists() ? 1 : 0;
  EXPECT_EQ(files, 5);
}

TEST(PlotTest, FallsBackToTensorBoardEventsAndSkipsAbsentCharts) {
  if (!HaveGnuplot()) GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  const fs::path run = TempDir("run");
  auto w = actor::TensorBoardWriter::Create((run / "tensorboard").string());
  ASSERT_TRUE(w.ok()) << w.status();
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE((*w)->WriteScalars(step, {{"critic/score/mean", 0.5}, {"staleness/mean", 1}}).ok());
  }
  CliResult r = RunLaminar("plot " + run.string() + " --out " + (run / "png").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(IsPng(run / "png" / "reward.png"));
  EXPECT_TRUE(IsPng(run / "png" / "staleness.png"));
  EXPECT_FALSE(fs::exists(run / "png" / "throughput.png"));
  EXPECT_NE(r.err.find("skipping throughput.png"), std::string::npos) << r.err;
}

TEST(PlotTest, BadLineNamesFileAndLine) {
  const fs::path run = TempDir("run");
  WriteMetrics(run);
  std::ofstream(run / "metrics.jsonl", std::ios::app) << "\n[1, 2]\n";
  CliResult r = RunLaminar("plot " + run.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find((run / "metrics.jsonl").string() + " line 6"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("expected a JSON object"), std::string::npos) << r.err;

  std::ofstream(run / "metrics.jsonl", std::ios::trunc) << "{\"a\":1}\n{not json\n";
  r = RunLaminar("plot " + run.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("line 2: not JSON"), std::string::npos) << r.err;
}

TEST(PlotTest, MissingRunOrGnuplotIsAClearError) {
  const fs::path run = TempDir("run");
  CliResult r = RunLaminar("plot " + run.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no metrics.jsonl"), std::string::npos) << r.err;

  WriteMetrics(run);
  r = RunLaminar("plot " + run.string() + " --gnuplot " + (run / "no_gnuplot").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("apt-get install gnuplot-nox"), std::string::npos) << r.err;
  r = RunLaminar("plot " + run.string() + " --gnuplot gnuplot-that-does-not-exist");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not found in PATH"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace laminar::testing
