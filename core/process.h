// Child processes for launchers, worker pools and multi-process tests: spawn a command, optionally
// write to its stdin, read its stdout line by line with a deadline, signal it, wait for it with a
// deadline. POSIX (posix_spawn, pipes, a socket for stdin, poll).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar {

// One running child. Owns it: the destructor sends SIGTERM, then SIGKILL after kTermGraceMs, and
// reaps it if it is still running, so a failed test never leaves a process behind. Not
// thread-safe.
class Process {
 public:
  static constexpr int kTermGraceMs = 2000;
  struct SpawnOptions {
    // The child's stderr is inherited, or appended to this file when non-empty.
    std::string stderr_path;
    // The child's stdin is inherited, or with stdin_pipe a stream socket that WriteStdin writes
    // to (a socket rather than a pipe so that writing to a child that has died is an error, not
    // SIGPIPE).
    bool stdin_pipe = false;
    // The child leads a session of its own (setsid), so a terminal's Ctrl-C reaches only the
    // launcher, which then stops its children in the order it chooses.
    bool new_session = false;
  };
  // Starts `argv[0]` (looked up in PATH when it has no '/') with `argv` and no signal blocked. The
  // child's stdout is a pipe read by ReadLine. Errors: InvalidArgument for an empty argv,
  // Unavailable naming the program when it cannot start.
  static StatusOr<Process> Spawn(const std::vector<std::string>& argv, const SpawnOptions& options);
  static StatusOr<Process> Spawn(const std::vector<std::string>& argv,
                                 const std::string& stderr_path = "") {
    return Spawn(argv, SpawnOptions{.stderr_path = stderr_path});
  }
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
  // Writes all of `data` to the child's stdin (Spawn with `stdin_pipe`). DeadlineExceeded when it
  // is not all written within `timeout_ms` (the child does not read); Unavailable when the child
  // closed its stdin (exited) or there is no stdin pipe.
  Status WriteStdin(std::string_view data, int timeout_ms);
  // Closes the child's stdin: it reads end of file. Idempotent.
  void CloseStdin();
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
  int stdin_fd_ = -1;   // our end of the child's stdin socket, or -1
  std::string buffer_;  // bytes read from stdout past the last returned line
  bool reaped_ = false;
  int exit_code_ = -1;
};

}  // namespace laminar
