// Child processes: posix_spawn with a stdout pipe and optionally a stdin socket, line reads and
// writes with poll(2) deadlines.
#include "core/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "core/host.h"

extern char** environ;

namespace laminar {
StatusOr<Process> Process::Spawn(const std::vector<std::string>& argv,
                                 const SpawnOptions& options) {
  if (argv.empty()) return InvalidArgumentError("Process::Spawn: empty argv");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return UnavailableError("pipe for " + argv[0] + ": " + std::strerror(errno));
  }
  // in[0] is ours, in[1] becomes the child's stdin. Both are close-on-exec, so that a child another
  // thread spawns meanwhile never holds them (and the child sees end of file when we close ours).
  int in[2] = {-1, -1};
  if (options.stdin_pipe && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    const int err = errno;
    close(fds[0]);
    close(fds[1]);
    return UnavailableError("stdin socket for " + argv[0] + ": " + std::strerror(err));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (options.stdin_pipe) posix_spawn_file_actions_adddup2(&actions, in[1], STDIN_FILENO);
  if (!options.stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, options.stderr_path.c_str(),
                                     O_WRONLY | O_CREAT | O_APPEND, 0644);
  }
  // A launcher may block SIGINT/SIGTERM to sigwait for them; its children start with none blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  short flags = POSIX_SPAWN_SETSIGMASK;
  if (options.new_session) flags |= POSIX_SPAWN_SETSID;
  posix_spawnattr_setflags(&attr, flags);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = argv[0].find('/') == std::string::npos
                     ? posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ)
                     : posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (options.stdin_pipe) close(in[1]);
  if (rc != 0) {
    close(fds[0]);
    if (options.stdin_pipe) close(in[0]);
    return UnavailableError("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  Process p;
  p.pid_ = pid;
  p.stdout_fd_ = fds[0];
  p.stdin_fd_ = in[0];
  return p;
}

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    Close();
    pid_ = std::exchange(other.pid_, -1);
    stdout_fd_ = std::exchange(other.stdout_fd_, -1);
    stdin_fd_ = std::exchange(other.stdin_fd_, -1);
    buffer_ = std::move(other.buffer_);
    reaped_ = std::exchange(other.reaped_, false);
    exit_code_ = other.exit_code_;
  }
  return *this;
}

Process::~Process() { Close(); }

void Process::Close() {
  CloseStdin();
  if (pid_ > 0 && !reaped_) {
    // SIGTERM first, so that the child can clean up (a relay removes its shared memory).
    kill(pid_, SIGTERM);
    if (!Wait(kTermGraceMs).ok()) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    reaped_ = true;
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdout_fd_ = -1;
  pid_ = -1;
}

StatusOr<std::string> Process::ReadLine(int timeout_ms) {
  const int64_t deadline = SteadyNowMs() + timeout_ms;
  while (true) {
    if (size_t nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (stdout_fd_ < 0)
      return UnavailableError("process " + std::to_string(pid_) + " has no stdout");
    const int64_t left = deadline - SteadyNowMs();
    if (left <= 0) {
      return DeadlineExceededError("no line from process " + std::to_string(pid_) + " within " +
                                   std::to_string(timeout_ms) + " ms");
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(left));
    if (ready < 0 && errno != EINTR) {
      return UnavailableError(std::string("poll on process stdout: ") + std::strerror(errno));
    }
    if (ready <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return UnavailableError("process " + std::to_string(pid_) +
                              " closed stdout (exited?) before a full line");
    }
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

Status Process::WriteStdin(std::string_view data, int timeout_ms) {
  if (stdin_fd_ < 0) {
    return UnavailableError("process " + std::to_string(pid_) + " has no stdin pipe");
  }
  const int64_t deadline = SteadyNowMs() + timeout_ms;
  while (!data.empty()) {
    // MSG_NOSIGNAL: a child that died is an EPIPE error here, never a SIGPIPE for the parent.
    const ssize_t n = send(stdin_fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return UnavailableError("writing to process " + std::to_string(pid_) +
                              " stdin: " + std::strerror(errno));
    }
    const int64_t left = deadline - SteadyNowMs();
    if (left <= 0) {
      return DeadlineExceededError("process " + std::to_string(pid_) +
                                   " did not read its stdin within " + std::to_string(timeout_ms) +
                                   " ms");
    }
    pollfd pfd{stdin_fd_, POLLOUT, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) < 0 && errno != EINTR) {
      return UnavailableError(std::string("poll on process stdin: ") + std::strerror(errno));
    }
  }
  return OkStatus();
}

void Process::CloseStdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

void Process::Signal(int signal) {
  if (pid_ > 0 && !reaped_) kill(pid_, signal);
}

StatusOr<int> Process::Wait(int timeout_ms) {
  if (reaped_) return exit_code_;
  const int64_t deadline = SteadyNowMs() + timeout_ms;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (r < 0 && errno != EINTR) {
      return UnavailableError("waitpid " + std::to_string(pid_) + ": " + std::strerror(errno));
    }
    if (SteadyNowMs() >= deadline) {
      return DeadlineExceededError("process " + std::to_string(pid_) + " still running after " +
                                   std::to_string(timeout_ms) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool Process::Running() {
  if (pid_ <= 0 || reaped_) return false;
  return !Wait(0).ok();
}

}  // namespace laminar
