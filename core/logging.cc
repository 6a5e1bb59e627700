// Logging facade implementation: one fprintf per line to stderr.
#include "core/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

namespace laminar {
namespace {

LogLevel LevelFromEnv() {
  const char* env = std::getenv("LAMINAR_LOG_LEVEL");
  if (env == nullptr) return LogLevel::kInfo;
  std::string v(env);
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warn") return LogLevel::kWarn;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<int>& LevelStorage() {
  static std::atomic<int> level{static_cast<int>(LevelFromEnv())};
  return level;
}

std::mutex& RoleMutex() {
  static std::mutex mu;
  return mu;
}
std::string& RoleStorage() {
  static std::string role = "laminar";
  return role;
}

}  // namespace

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "?";
}

std::string_view LogSubsystemName(LogSubsystem sub) {
  switch (sub) {
    case LogSubsystem::kCore:
      return "CORE";
    case LogSubsystem::kModel:
      return "MODEL";
    case LogSubsystem::kKernel:
      return "KERNEL";
    case LogSubsystem::kNet:
      return "NET";
    case LogSubsystem::kActor:
      return "ACTOR";
    case LogSubsystem::kRollout:
      return "ROLLOUT";
    case LogSubsystem::kRelay:
      return "RELAY";
    case LogSubsystem::kManager:
      return "MANAGER";
    case LogSubsystem::kReward:
      return "REWARD";
    case LogSubsystem::kTrainer:
      return "TRAINER";
    case LogSubsystem::kCli:
      return "CLI";
  }
  return "?";
}

void SetLogLevel(LogLevel level) { LevelStorage().store(static_cast<int>(level)); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(LevelStorage().load()); }
void SetLogRole(std::string_view role) {
  std::lock_guard<std::mutex> lock(RoleMutex());
  RoleStorage() = std::string(role);
}

namespace internal {

LogMessage::LogMessage(LogLevel level, LogSubsystem sub, const char* file, int line)
    : level_(level), sub_(sub), file_(file), line_(line) {}

LogMessage::~LogMessage() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm_buf{};
  gmtime_r(&t, &tm_buf);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm_buf);
  const char* base = std::strrchr(file_, '/');
  base = base ? base + 1 : file_;
  std::string role;
  {
    std::lock_guard<std::mutex> lock(RoleMutex());
    role = RoleStorage();
  }
  std::fprintf(stderr, "%s.%03d %-5s %-7s %s pid=%d %s:%d] %s\n", when, ms,
               LogLevelName(level_).data(), LogSubsystemName(sub_).data(), role.c_str(),
               static_cast<int>(getpid()), base, line_, stream_.str().c_str());
}

}  // namespace internal
}  // namespace laminar
