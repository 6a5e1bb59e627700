// Fault records in faults.jsonl; see fault_log.h.
#include "core/fault_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>

#include "core/host.h"

namespace laminar {

std::string_view FaultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::kCrash:
      return "crash";
    case FaultKind::kHang:
      return "hang";
    case FaultKind::kNonFinite:
      return "non_finite";
    case FaultKind::kStraggler:
      return "straggler";
    case FaultKind::kDiskFull:
      return "disk_full";
    case FaultKind::kLostLink:
      return "lost_link";
  }
  return "unknown";
}

std::string FaultJson(const Fault& f) {
  nlohmann::json j = {{"kind", FaultKindName(f.kind)},
                      {"role", f.role},
                      {"host", f.host},
                      {"rank", f.rank},
                      {"detail", f.detail},
                      {"seen_by", f.seen_by},
                      {"detected_unix_s", f.detected_unix_s}};
  if (!f.supersedes.empty()) j["supersedes"] = f.supersedes;
  if (std::isfinite(f.recovered_unix_s)) {
    j["recovered_unix_s"] = f.recovered_unix_s;
    j["recovery_s"] = f.recovered_unix_s - f.detected_unix_s;
  } else {
    j["recovered_unix_s"] = nullptr;
    j["recovery_s"] = nullptr;
  }
  // Replacement of invalid UTF-8 (a detail may quote a log line) rather than an exception.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ExitCodeDetail(int code) {
  if (code > 128 && code < 128 + 65) {
    const char* name = sigabbrev_np(code - 128);
    return "killed by " +
           (name != nullptr ? "SIG" + std::string(name) : "signal " + std::to_string(code - 128));
  }
  if (code < 0) return "exit status unknown";
  return "exit " + std::to_string(code);
}

Status FaultLog::Record(Fault fault) const {
  if (path_.empty()) return OkStatus();
  if (fault.host.empty()) fault.host = Hostname();
  const std::string line = FaultJson(fault) + "\n";
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError("cannot open " + path_ + ": " + std::strerror(errno));
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    return InternalError("cannot write " + path_ + ": " +
                         (n < 0 ? std::strerror(err) : "short write"));
  }
  return OkStatus();
}

FaultLog FaultLogFromEnvironment() {
  const char* path = std::getenv(kFaultsEnv);
  return path != nullptr ? FaultLog(path) : FaultLog();
}

double FaultClockNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<nlohmann::json> ReadFaults(const std::string& path) {
  std::vector<nlohmann::json> faults;
  std::map<std::tuple<std::string, std::string, double>, size_t> index;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string()) continue;
    const auto key = std::make_tuple(j["kind"].get<std::string>(), j.value("role", std::string()),
                                     j.value("detected_unix_s", 0.0));
    const std::string supersedes = j.value("supersedes", std::string());
    if (auto old = index.find(std::make_tuple(supersedes, std::get<1>(key), std::get<2>(key)));
        !supersedes.empty() && old != index.end()) {
      // The earlier record, reclassified: this one takes its place.
      const size_t at = old->second;
      index.erase(old);
      index[key] = at;
      faults[at] = std::move(j);
    } else if (auto it = index.find(key); it != index.end()) {
      faults[it->second] = std::move(j);
    } else {
      index.emplace(key, faults.size());
      faults.push_back(std::move(j));
    }
  }
  return faults;
}

}  // namespace laminar
