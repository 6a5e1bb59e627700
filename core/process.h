// Child processes for launchers and multi-process tests: spawn a command, read its stdout line by
// line with a deadline, signal it, wait for it with a deadline. POSIX (posix_spawn, pipes, poll).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "core/status.h"

namespace laminar {

// One running child. Owns it: the destructor sends SIGTERM, then SIGKILL after kTermGraceMs, and
// reaps it if it is still running, so a failed test never leaves a process behind. Not
// thread-safe.
class Process {
 public:
  static constexpr int kTermGraceMs = 2000;
  // Starts `argv[0]` (looked up in PATH when it has no '/') with `argv` and no signal blocked.
  // The child's stdout is a pipe read by ReadLine; its stderr is inherited, or appended to
  // `stderr_path` when non-empty. With `new_session` the child leads a session of its own
  // (setsid), so a terminal's Ctrl-C reaches only the launcher, which then stops its children in
  // the order it chooses. Errors: InvalidArgument for an empty argv, Unavailable naming the program
  // when it cannot start.
  static StatusOr<Process> Spawn(const std::vector<std::string>& argv,
                                 const std::string& stderr_path = "", bool new_session = false);
  Process() = default;  // holds no child
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  pid_t pid() const { return pid_; }
  // The next line the child wrote to stdout, without the newline. DeadlineExceeded after
  // `timeout_ms`; Unavailable when the child closed stdout (exited) first.
  StatusOr<std::string> ReadLine(int timeout_ms);
  // Sends `signal` (SIGTERM, SIGKILL, ...). A child already reaped is not an error.
  void Signal(int signal);
  // Waits for the child to exit; returns its exit code, or 128 + the signal that ended it.
  // DeadlineExceeded after `timeout_ms` (the child keeps running).
  StatusOr<int> Wait(int timeout_ms);
  // True while the child has not been reaped and has not exited.
  bool Running();

 private:
  void Close();
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;  // bytes read from stdout past the last returned line
  bool reaped_ = false;
  int exit_code_ = -1;
};

}  // namespace laminar
