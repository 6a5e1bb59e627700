// Fault records: their JSON, exit codes in words, appends from several processes that never
// interleave, and errors naming the file.
#include "core/fault_log.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/host.h"
#include "tests/test_util.h"

namespace laminar {
namespace {

std::vector<nlohmann::json> ReadRecords(const std::filesystem::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    out.push_back(nlohmann::json::parse(line));  // throws on a torn line: the test fails
  }
  return out;
}

TEST(FaultLogTest, RecordsEveryFieldWithRecoveryTime) {
  const auto path = testing::TempDir("faults") / "faults.jsonl";
  FaultLog log(path.string());
  ASSERT_TRUE(log.Record({.kind = FaultKind::kCrash,
                          .role = "rollout/1",
                          .host = "node7",
                          .detail = ExitCodeDetail(128 + 9),
                          .seen_by = "supervisor",
                          .detected_unix_s = 100.0,
                          .recovered_unix_s = 104.5})
                  .ok());
  ASSERT_TRUE(log.Record({.kind = FaultKind::kHang,
                          .role = "rollout/2",
                          .detail = "no heartbeat",
                          .seen_by = "manager",
                          .detected_unix_s = 200.0})
                  .ok());
  const auto records = ReadRecords(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["kind"], "crash");
  EXPECT_EQ(records[0]["role"], "rollout/1");
  EXPECT_EQ(records[0]["host"], "node7");
  EXPECT_EQ(records[0]["rank"], -1);
  EXPECT_EQ(records[0]["detail"], "killed by SIGKILL");
  EXPECT_EQ(records[0]["seen_by"], "supervisor");
  EXPECT_DOUBLE_EQ(records[0]["recovery_s"].get<double>(), 4.5);
  // Not recovered: nulls. An empty host is this process's host.
  EXPECT_EQ(records[1]["kind"], "hang");
  EXPECT_EQ(records[1]["host"], Hostname());
  EXPECT_TRUE(records[1]["recovered_unix_s"].is_null());
  EXPECT_TRUE(records[1]["recovery_s"].is_null());
}

TEST(FaultLogTest, ExitCodesInWords) {
  EXPECT_EQ(ExitCodeDetail(0), "exit 0");
  EXPECT_EQ(ExitCodeDetail(3), "exit 3");
  EXPECT_EQ(ExitCodeDetail(128 + 15), "killed by SIGTERM");
  EXPECT_EQ(ExitCodeDetail(128 + 6), "killed by SIGABRT");
  EXPECT_EQ(ExitCodeDetail(-1), "exit status unknown");
  for (FaultKind k : {FaultKind::kCrash, FaultKind::kHang, FaultKind::kNonFinite,
                      FaultKind::kStraggler, FaultKind::kDiskFull, FaultKind::kLostLink}) {
    EXPECT_NE(FaultKindName(k), "unknown");
  }
}

// The supervisor, the manager and the actor append to one file: whole lines, none lost.
TEST(FaultLogTest, ProcessesAppendWholeLines) {
  const auto path = testing::TempDir("faults") / "faults.jsonl";
  constexpr int kProcesses = 4, kRecords = 200;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FaultLog log(path.string());
      for (int i = 0; i < kRecords; ++i) {
        // A long detail makes a torn write visible.
        if (!log.Record({.role = "p" + std::to_string(p),
                         .detail = std::string(300, static_cast<char>('a' + p)),
                         .detected_unix_s = static_cast<double>(i)})
                 .ok()) {
          _exit(1);
        }
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const auto records = ReadRecords(path);
  ASSERT_EQ(records.size(), static_cast<size_t>(kProcesses * kRecords));
  for (const auto& r : records) {
    const std::string role = r["role"];
    EXPECT_EQ(r["detail"], std::string(300, static_cast<char>('a' + (role[1] - '0'))));
  }
}

// A fault recorded at detection and again at its recovery reads as one fault, the later record;
// faults of other roles or detection times stay apart, in order; other lines are skipped.
TEST(FaultLogTest, ReadFaultsKeepsTheLastRecordOfEachFault) {
  const auto path = testing::TempDir("faults") / "faults.jsonl";
  FaultLog log(path.string());
  ASSERT_TRUE(
      log.Record({.kind = FaultKind::kStraggler, .role = "rollout/0", .detected_unix_s = 10}).ok());
  ASSERT_TRUE(log.Record({.kind = FaultKind::kCrash,
                          .role = "relay",
                          .detected_unix_s = 11,
                          .recovered_unix_s = 12})
                  .ok());
  ASSERT_TRUE(
      log.Record({.kind = FaultKind::kStraggler, .role = "rollout/1", .detected_unix_s = 10}).ok());
  std::ofstream(path, std::ios::app) << "not json\n{\"no_kind\": 1}\n";
  ASSERT_TRUE(log.Record({.kind = FaultKind::kStraggler,
                          .role = "rollout/0",
                          .detected_unix_s = 10,
                          .recovered_unix_s = 30})
                  .ok());
  const auto faults = ReadFaults(path.string());
  ASSERT_EQ(faults.size(), 3u);
  EXPECT_EQ(faults[0]["role"], "rollout/0");
  EXPECT_EQ(faults[0]["recovered_unix_s"], 30);
  EXPECT_EQ(faults[1]["kind"], "crash");
  EXPECT_EQ(faults[2]["role"], "rollout/1");
  EXPECT_TRUE(faults[2]["recovered_unix_s"].is_null());
  EXPECT_TRUE(ReadFaults((path.parent_path() / "none.jsonl").string()).empty());
}

// A record that reclassifies an earlier one (a hang that was a lost link) takes its place; one of
// another role or detection time is left alone.
TEST(FaultLogTest, ASupersedingRecordReplacesTheOneItReclassifies) {
  const auto path = testing::TempDir("faults_superseded") / "faults.jsonl";
  FaultLog log(path.string());
  for (const char* role : {"rollout/0", "rollout/1"}) {
    ASSERT_TRUE(log.Record({.kind = FaultKind::kHang,
                            .role = role,
                            .detected_unix_s = 10,
                            .recovered_unix_s = 10})
                    .ok());
  }
  ASSERT_TRUE(log.Record({.kind = FaultKind::kLostLink,
                          .role = "rollout/0",
                          .detected_unix_s = 10,
                          .recovered_unix_s = 14,
                          .supersedes = "hang"})
                  .ok());
  const auto faults = ReadFaults(path.string());
  ASSERT_EQ(faults.size(), 2u);
  EXPECT_EQ(faults[0]["kind"], "lost_link");
  EXPECT_EQ(faults[0]["role"], "rollout/0");
  EXPECT_EQ(faults[0]["recovery_s"], 4);
  EXPECT_EQ(faults[1]["kind"], "hang");
  EXPECT_EQ(faults[1]["role"], "rollout/1");
}

TEST(FaultLogTest, AnUnwritablePathIsAnErrorNamingIt) {
  FaultLog log("/proc/no/such/faults.jsonl");
  Status st = log.Record({.role = "actor"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("/proc/no/such/faults.jsonl"), std::string::npos) << st;
  // No path: nothing recorded, no error.
  EXPECT_TRUE(FaultLog().Record({.role = "actor"}).ok());
  EXPECT_FALSE(FaultLog().enabled());
}

}  // namespace
}  // namespace laminar
