// Logging facade: levels and subsystem tags. Each line carries time, role/rank, pid and file:line.
//   LAMINAR_LOG(INFO, ROLLOUT) << "pulled version " << v;
// Thread-safe (one line is written with one call). Never log in per-token loops; metrics go to the
// metrics sink.
#pragma once

#include <sstream>
#include <string_view>

namespace laminar {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Subsystem tags from docs/architecture.md; CORE and MODEL for the foundation, CLI for the binary.
enum class LogSubsystem : int {
  kCore,
  kModel,
  kKernel,
  kNet,
  kActor,
  kRollout,
  kRelay,
  kManager,
  kReward,
  kTrainer,
  kCli
};

std::string_view LogLevelName(LogLevel level);
std::string_view LogSubsystemName(LogSubsystem sub);

// Lines below this level are dropped. Default kInfo, or LAMINAR_LOG_LEVEL=debug|info|warn|error.
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// The role shown in each line, e.g. "rollout/3". Default: the program name.
void SetLogRole(std::string_view role);

namespace internal {
class LogMessage {
 public:
  LogMessage(LogLevel level, LogSubsystem sub, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  LogSubsystem sub_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};
struct LogVoidify {
  void operator&(std::ostream&) {}
};
}  // namespace internal
}  // namespace laminar

// Names used by LAMINAR_LOG(LEVEL, SUBSYSTEM) so call sites read LAMINAR_LOG(INFO, ROLLOUT).
namespace laminar::internal {
inline constexpr LogLevel kLevel_DEBUG = LogLevel::kDebug;
inline constexpr LogLevel kLevel_INFO = LogLevel::kInfo;
inline constexpr LogLevel kLevel_WARN = LogLevel::kWarn;
inline constexpr LogLevel kLevel_ERROR = LogLevel::kError;
inline constexpr LogSubsystem kSub_CORE = LogSubsystem::kCore;
inline constexpr LogSubsystem kSub_MODEL = LogSubsystem::kModel;
inline constexpr LogSubsystem kSub_KERNEL = LogSubsystem::kKernel;
inline constexpr LogSubsystem kSub_NET = LogSubsystem::kNet;
inline constexpr LogSubsystem kSub_ACTOR = LogSubsystem::kActor;
inline constexpr LogSubsystem kSub_ROLLOUT = LogSubsystem::kRollout;
inline constexpr LogSubsystem kSub_RELAY = LogSubsystem::kRelay;
inline constexpr LogSubsystem kSub_MANAGER = LogSubsystem::kManager;
inline constexpr LogSubsystem kSub_REWARD = LogSubsystem::kReward;
inline constexpr LogSubsystem kSub_TRAINER = LogSubsystem::kTrainer;
inline constexpr LogSubsystem kSub_CLI = LogSubsystem::kCli;
}  // namespace laminar::internal

#define LAMINAR_LOG(level, subsystem)                                                        \
  (::laminar::internal::kLevel_##level < ::laminar::GetLogLevel())                           \
      ? (void)0                                                                              \
      : ::laminar::internal::LogVoidify() &                                                  \
            ::laminar::internal::LogMessage(::laminar::internal::kLevel_##level,             \
                                            ::laminar::internal::kSub_##subsystem, __FILE__, \
                                            __LINE__)                                        \
                .stream()
