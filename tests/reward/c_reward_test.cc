// C ABI reward plug-ins: loading tests/reward/test_reward_plugin.c, scores, error returns, a
// non-finite score, the ABI version check, missing symbols and files, and the registry's `c` spec.
#include "reward/c_reward.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/reward/reward_test_util.h"
#include "tests/test_util.h"

namespace laminar::reward {
namespace {

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

TEST(CRewardTest, LoadsAndScores) {
  auto f = MakeCReward({.path = TEST_REWARD_PLUGIN, .symbol = "laminar_compute_score"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Score(*f, "42", "42"), 1.0);
  EXPECT_EQ(Score(*f, "41", "42"), 0.0);
  // Lengths, not NULs, bound the strings: "4" is not "4\0x".
  EXPECT_EQ(Score(*f, std::string_view("4\0x", 3), "4"), 0.0);
  // The input's views need not be NUL-terminated: the plug-in gets terminated copies.
  const std::string text = "42 and more";
  EXPECT_EQ(Score(*f, std::string_view(text).substr(0, 2), std::string_view(text).substr(0, 2)),
            1.0);
}

TEST(CRewardTest, NamedSymbolGetsExtraInfo) {
  auto f = MakeCReward({.path = TEST_REWARD_PLUGIN, .symbol = "extra_info_length"});
  ASSERT_TRUE(f.ok()) << f.status();
  const std::string extra = R"({"index": 3}xyz)";
  auto r = (*f)({.data_source = "d",
                 .solution_str = "s",
                 .ground_truth = "g",
                 .extra_info_json = std::string_view(extra).substr(0, 12)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->score, 12.0);  // the length, and terminated (no +0.5)
}

TEST(CRewardTest, ErrorReturnsAndNonFiniteScoresAreErrors) {
  auto f = MakeCReward({.path = TEST_REWARD_PLUGIN, .symbol = "laminar_compute_score"});
  ASSERT_TRUE(f.ok()) << f.status();
  auto r = (*f)({.data_source = "gsm8k",
                 .solution_str = "abcd",
                 .ground_truth = "fail",
                 .extra_info_json = ""});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status(), "returned 7: cannot score 4 bytes from gsm8k")) << r.status();
  EXPECT_TRUE(Contains(r.status(), "test_reward_plugin")) << r.status();
  r = (*f)({.data_source = "", .solution_str = "x", .ground_truth = "nan", .extra_info_json = ""});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Contains(r.status(), "not finite")) << r.status();
}

TEST(CRewardTest, LoadErrorsNameTheLibrary) {
  auto old_abi =
      MakeCReward({.path = TEST_REWARD_PLUGIN_OLD_ABI, .symbol = "laminar_compute_score"});
  ASSERT_FALSE(old_abi.ok());
  EXPECT_EQ(old_abi.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(old_abi.status(), "ABI version 0")) << old_abi.status();
  EXPECT_TRUE(Contains(old_abi.status(), "test_reward_plugin_old_abi")) << old_abi.status();

  auto no_symbol = MakeCReward({.path = TEST_REWARD_PLUGIN, .symbol = "no_such_function"});
  ASSERT_FALSE(no_symbol.ok());
  EXPECT_TRUE(Contains(no_symbol.status(), "exports no 'no_such_function'")) << no_symbol.status();

  auto missing = MakeCReward({.path = "/nonexistent/libreward.so", .symbol = "f"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(missing.status(), "/nonexistent/libreward.so: no such file"))
      << missing.status();

  // A library that is not a plug-in: the C math library holds no laminar_reward_abi_version.
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(static_cast<double (*)(double)>(&::cos)), &info), 0);
  auto not_plugin = MakeCReward({.path = info.dli_fname, .symbol = "cos"});
  ASSERT_FALSE(not_plugin.ok());
  EXPECT_TRUE(Contains(not_plugin.status(), "exports no laminar_reward_abi_version"))
      << not_plugin.status();

  // Not a shared library at all: dlopen's message.
  const std::string text_file = ::testing::TempDir() + "laminar_not_a_library.so";
  std::ofstream(text_file) << "not a library\n";
  auto not_elf = MakeCReward({.path = text_file, .symbol = "f"});
  std::remove(text_file.c_str());
  ASSERT_FALSE(not_elf.ok());
  EXPECT_TRUE(Contains(not_elf.status(), "dlopen: ")) << not_elf.status();
}

// The plug-in runs in sandboxed worker processes: a crash, a hang or a CPU spin costs that call
// only (named), printing cannot corrupt the replies, and the pool goes on scoring.
TEST(CRewardTest, AMisbehavingPluginCostsOneCallOnly) {
  // A wall-clock deadline of 1 s; or a CPU limit of 1 s well inside a deadline of 30 s.
  auto f = MakeCReward({.path = TEST_REWARD_PLUGIN,
                        .symbol = "misbehave",
                        .num_workers = 1,
                        .timeout_s = 1,
                        .sandbox = {.cpu_time_s = 0}});
  auto g = MakeCReward({.path = TEST_REWARD_PLUGIN,
                        .symbol = "misbehave",
                        .num_workers = 1,
                        .timeout_s = 30,
                        .sandbox = {.cpu_time_s = 1}});
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_TRUE(g.ok()) << g.status();
  auto call = [](const RewardFn& fn, const char* truth) {
    return fn(
        {.data_source = "d", .solution_str = "s", .ground_truth = truth, .extra_info_json = ""});
  };
  auto crash = call(*f, "crash");
  ASSERT_FALSE(crash.ok());
  EXPECT_EQ(crash.status().code(), StatusCode::kUnavailable) << crash.status();
  EXPECT_TRUE(Contains(crash.status(), "killed by signal 11")) << crash.status();
  auto hang = call(*f, "hang");
  ASSERT_FALSE(hang.ok());
  EXPECT_EQ(hang.status().code(), StatusCode::kDeadlineExceeded) << hang.status();
  auto spin = call(*g, "spin");
  ASSERT_FALSE(spin.ok());
  EXPECT_EQ(spin.status().code(), StatusCode::kDeadlineExceeded) << spin.status();
  EXPECT_TRUE(Contains(spin.status(), "cpu_time_s")) << spin.status();
  auto printed = call(*f, "print");
  ASSERT_TRUE(printed.ok()) << printed.status();
  EXPECT_EQ(printed->score, 1.0);
  EXPECT_EQ(call(*f, "ok")->score, 1.0);
  EXPECT_EQ(call(*g, "ok")->score, 1.0);
}

// The host sandboxes itself as the Python driver does: its limits, no core dumps, and no network
// unless asked (a port listening on this process's loopback is out of reach).
TEST(CRewardTest, TheHostRunsThePluginInsideItsSandbox) {
  int listening_port = 0;
  const int listener = ::laminar::testing::ListenOnLoopback(&listening_port);
  ASSERT_GE(listener, 0);
  const std::string port = std::to_string(listening_port);
  CRewardOptions o{.path = TEST_REWARD_PLUGIN, .symbol = "sandbox_probe"};
  o.sandbox.max_open_files = 32;
  auto isolated = MakeCReward(o);
  ASSERT_TRUE(isolated.ok()) << isolated.status();
  EXPECT_EQ(Score(*isolated, "", "files"), 32.0);
  EXPECT_EQ(Score(*isolated, "", "core"), 0.0);
  EXPECT_EQ(Score(*isolated, "", port), 0.0);
  o.sandbox.network = true;
  auto host = MakeCReward(o);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(Score(*host, "", port), 1.0);
  close(listener);
}

TEST(CRewardTest, RecipeSpecsCombineWithBuiltins) {
  const std::string yaml =
      std::string("[exact_match, {c: {path: '") + TEST_REWARD_PLUGIN + "'}, weight: 0.5}]";
  auto specs = ParseRewardSpecs(YAML::Load(yaml), "reward");
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[1].name, "c");
  EXPECT_EQ((*specs)[1].weight, 0.5);
  auto f = CombineRewards(*specs);
  ASSERT_TRUE(f.ok()) << f.status();
  auto r =
      (*f)({.data_source = "", .solution_str = "7", .ground_truth = "7", .extra_info_json = ""});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->score, 1.5);
  EXPECT_EQ(r->extra.at("reward/c"), 1.0);

  auto bad = ParseRewardSpecs(YAML::Load("[gsm8k, {c: {path: /nonexistent/x.so}}]"), "reward");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Contains(bad.status(), "reward[1].c: ")) << bad.status();
  EXPECT_TRUE(Contains(bad.status(), "/nonexistent/x.so")) << bad.status();
  auto unknown = ParseRewardSpecs(YAML::Load("{c: {path: x.so, sym: f}}"), "reward");
  ASSERT_FALSE(unknown.ok());
  EXPECT_TRUE(Contains(unknown.status(), "unknown param 'sym'")) << unknown.status();
}

}  // namespace
}  // namespace laminar::reward
