// Child processes: lines from stdout with deadlines, writes to stdin, exit codes, signals, start
// failures.
#include "core/process.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace laminar {
namespace {

TEST(ProcessTest, ReadsLinesAndExitCode) {
  auto p = Process::Spawn({"sh", "-c", "echo first; printf 'second\\nthird'; exit 3"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p->ReadLine(5000), "first");
  EXPECT_EQ(*p->ReadLine(5000), "second");
  // "third" has no newline: the pipe closes first.
  EXPECT_EQ(p->ReadLine(5000).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(*p->Wait(5000), 3);
  EXPECT_FALSE(p->Running());
}

TEST(ProcessTest, DeadlinesAndSignals) {
  auto p = Process::Spawn({"sleep", "30"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->Running());
  EXPECT_EQ(p->ReadLine(50).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(p->Wait(20).status().code(), StatusCode::kDeadlineExceeded);
  p->Signal(SIGKILL);
  EXPECT_EQ(*p->Wait(5000), 128 + SIGKILL);
  p->Signal(SIGKILL);  // already reaped: nothing happens
}

TEST(ProcessTest, StartFailuresAreErrors) {
  EXPECT_EQ(Process::Spawn({}).status().code(), StatusCode::kInvalidArgument);
  auto missing = Process::Spawn({"/nonexistent/laminar-binary"});
  // posix_spawn reports a missing program either at once or as exit code 127 of the child.
  if (missing.ok()) {
    EXPECT_EQ(*missing->Wait(5000), 127);
  } else {
    EXPECT_NE(missing.status().message().find("/nonexistent/laminar-binary"), std::string::npos);
  }
}

TEST(ProcessTest, WritesToStdinUntilItIsClosed) {
  auto p = Process::Spawn({"head", "-n", "1"},
                          Process::SpawnOptions{.stderr_path = "", .stdin_pipe = true});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(p->WriteStdin("hello\n", 5000).ok());
  EXPECT_EQ(*p->ReadLine(5000), "hello");
  // More than a socket buffer holds, so the write waits for wc to read; wc counts until the end of
  // file that CloseStdin gives it.
  auto wc =
      Process::Spawn({"wc", "-c"}, Process::SpawnOptions{.stderr_path = "", .stdin_pipe = true});
  ASSERT_TRUE(wc.ok()) << wc.status();
  ASSERT_TRUE(wc->WriteStdin(std::string(1 << 20, 'x'), 5000).ok());
  wc->CloseStdin();
  auto count = wc->ReadLine(5000);
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(std::stoll(*count), 1 << 20);
  EXPECT_EQ(*wc->Wait(5000), 0);
  EXPECT_EQ(wc->WriteStdin("x", 1000).code(), StatusCode::kUnavailable);  // closed
  // Writing to a child that has exited is an error, not SIGPIPE.
  ASSERT_EQ(*p->Wait(5000), 0);
  EXPECT_EQ(p->WriteStdin("late\n", 1000).code(), StatusCode::kUnavailable);
  auto none = Process::Spawn({"true"});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->WriteStdin("x", 1000).code(), StatusCode::kUnavailable);
}

TEST(ProcessTest, DestructorKillsTheChild) {
  pid_t pid = -1;
  {
    auto p = Process::Spawn({"sleep", "30"});
    ASSERT_TRUE(p.ok());
    pid = p->pid();
  }
  EXPECT_NE(kill(pid, 0), 0);  // reaped: no such process
}

}  // namespace
}  // namespace laminar
