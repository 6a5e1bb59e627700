// The op harness (op_harness.h): every backend on every op against the reference, by NMSE, and
// every backend's gradients against central finite differences. One test per (op, backend); a
// backend that lacks an op is skipped with its name, so a new backend shows what it still misses.
#include "tests/kernels/op_harness.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace laminar::testing {
namespace {

std::string Describe(const std::string& what, std::span<const double> got,
                     std::span<const double> want) {
  std::string s = what;
  int shown = 0;
  for (size_t i = 0; i < want.size() && shown < 3; ++i) {
    if (std::abs(got[i] - want[i]) > 1e-6 * (1 + std::abs(want[i]))) {
      s += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
           std::to_string(want[i]);
      ++shown;
    }
  }
  return s;
}

// (op, backend) pairs: every op of OpCases() with every backend but the reference.
std::vector<std::pair<std::string, size_t>> OpBackendPairs(bool grads) {
  std::set<std::string> ops;
  if (grads) {
    for (const GradCase& c : GradCases()) ops.insert(c.op);
  } else {
    for (const OpCase& c : OpCases()) ops.insert(c.op);
  }
  std::vector<std::pair<std::string, size_t>> pairs;
  for (const std::string& op : ops) {
    for (size_t b = grads ? 0 : 1; b < Backends().size(); ++b) pairs.emplace_back(op, b);
  }
  return pairs;
}

std::string PairName(const ::testing::TestParamInfo<std::pair<std::string, size_t>>& info) {
  return info.param.first + "_" + Backends()[info.param.second].name;
}

class OpHarnessTest : public ::testing::TestWithParam<std::pair<std::string, size_t>> {};

TEST_P(OpHarnessTest, MatchesTheReference) {
  const auto& [op, index] = GetParam();
  const Backend& backend = Backends()[index];
  const Backend& reference = Backends()[0];
  int run = 0;
  for (const OpCase& c : OpCases()) {
    if (c.op != op) continue;
    SCOPED_TRACE(op + " " + c.shape + " on " + backend.name);
    const auto want = c.run(reference);
    ASSERT_TRUE(want.has_value()) << "the reference lacks " << op;
    const auto got = c.run(backend);
    if (!got) GTEST_SKIP() << backend.name << " has no " << op;
    ASSERT_EQ(got->size(), want->size());
    const double nmse = Nmse(*got, *want);
    EXPECT_LE(nmse, c.max_nmse) << Describe("NMSE " + std::to_string(nmse), *got, *want);
    ++run;
  }
  EXPECT_GT(run, 0);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpHarnessTest, ::testing::ValuesIn(OpBackendPairs(false)), PairName);

class GradHarnessTest : public ::testing::TestWithParam<std::pair<std::string, size_t>> {};

TEST_P(GradHarnessTest, MatchesFiniteDifferences) {
  const auto& [op, index] = GetParam();
  const Backend& backend = Backends()[index];
  int run = 0;
  for (const GradCase& c : GradCases()) {
    if (c.op != op) continue;
    SCOPED_TRACE(op + " " + c.shape + " on " + backend.name);
    const auto got = c.analytic(backend);
    if (!got) GTEST_SKIP() << backend.name << " has no gradient of " << op;
    const std::vector<double> want = c.numeric();
    ASSERT_EQ(got->size(), want.size());
    const double nmse = Nmse(*got, want);
    EXPECT_LE(nmse, c.max_nmse) << Describe("NMSE " + std::to_string(nmse), *got, want);
    ++run;
  }
  EXPECT_GT(run, 0);
}

INSTANTIATE_TEST_SUITE_P(Grads, GradHarnessTest, ::testing::ValuesIn(OpBackendPairs(true)),
                         PairName);

// The harness compares something: every backend has at least the reference's matmul, and a
// planted error in one output is caught by the tolerance of every registered op.
TEST(OpHarnessSelfTest, APlantedErrorFailsEveryOp) {
  ASSERT_GE(Backends().size(), 2u);
  for (const OpCase& c : OpCases()) {
    auto want = c.run(Backends()[0]);
    ASSERT_TRUE(want.has_value()) << c.op;
    std::vector<double> bad = *want;
    size_t largest = 0;
    for (size_t i = 0; i < bad.size(); ++i) {
      if (std::abs(bad[i]) > std::abs(bad[largest])) largest = i;
    }
    bad[largest] += 1e-3 * (1 + std::abs(bad[largest]));
    EXPECT_GT(Nmse(bad, *want), c.max_nmse) << c.op << " " << c.shape;
  }
}

}  // namespace
}  // namespace laminar::testing
