// Pids cgroups: the bound on tasks, killing every member (also one in a session of its own),
// removal, leftovers of dead owners, bad names. Skipped where this process may not make one.
#include "core/pids_cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/process.h"
#include "tests/test_util.h"

namespace laminar {
namespace {

std::string Name(const std::string& what) {
  return "laminar-test-" + std::to_string(getpid()) + "-" + what;
}

TEST(PidsCgroupTest, BoundsTasksAndKillsEveryMember) {
  auto cage = PidsCgroup::Create(Name("bound"), 4);
  if (!cage.ok()) GTEST_SKIP() << cage.status();
  const std::string dir = cage->dir();
  ASSERT_TRUE(std::filesystem::is_directory(dir));
  std::ifstream max(dir + "/pids.max");
  std::string bound;
  max >> bound;
  EXPECT_EQ(bound, "4");
  // A shell that joins, then starts a child in a session of its own and one in its group.
  auto p = Process::Spawn({"sh", "-c",
                           "echo $$ > " + dir +
                               "/cgroup.procs || exit 1; setsid sleep 600 & sleep 600 & "
                               "echo ready; wait"});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->ReadLine(10000).ok());
  EXPECT_TRUE(testing::WaitFor([&] { return cage->Pids().size() == 3; }, 5000));
  EXPECT_TRUE(cage->KillAll());
  EXPECT_TRUE(cage->Pids().empty());
  EXPECT_EQ(*p->Wait(5000), 128 + SIGKILL);
  *cage = PidsCgroup();  // removes it
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(PidsCgroupTest, LeftoversOfDeadOwnersAreRemoved) {
  auto probe = PidsCgroup::Create(Name("probe"), 4);
  if (!probe.ok()) GTEST_SKIP() << probe.status();
  const std::filesystem::path parent = std::filesystem::path(probe->dir()).parent_path();
  // What a process that died without removing its cgroup leaves: pid 2147483632 is above any
  // pid_max, so never alive.
  const std::string dead = "laminar-leftover-2147483632-0";
  ASSERT_TRUE(std::filesystem::create_directory(parent / dead));
  auto own = PidsCgroup::Create("laminar-leftover-" + std::to_string(getpid()) + "-1", 4);
  ASSERT_TRUE(own.ok()) << own.status();
  const std::string own_dir = own->dir();
  PidsCgroup::RemoveStale("laminar-leftover");
  EXPECT_FALSE(std::filesystem::exists(parent / dead));
  EXPECT_TRUE(std::filesystem::exists(own_dir));  // its owner (this process) lives
}

TEST(PidsCgroupTest, BadArgumentsAreRefused) {
  EXPECT_EQ(PidsCgroup::Create("a/b", 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PidsCgroup::Create("..", 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PidsCgroup::Create("", 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PidsCgroup::Create(Name("zero"), 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace laminar
