// Fault demarcation: each fault a role sees (a process crash with its signal or exit code, a hang
// from missed heartbeats, non-finite numbers, a straggling step, a full disk, a lost link) is
// recorded as one JSON line in the run's faults.jsonl, naming the role, host and rank it struck,
// who saw it, and when it was detected and recovered. Several processes (the supervisor, the
// manager, the actor) append to the same file: each record is one write(2) on a file opened with
// O_APPEND, so lines never interleave. A fault that lasts (a straggler) is recorded when it is
// detected, recovered_unix_s null, so that a recorder killed meanwhile loses nothing, and again
// when it recovers with the same kind, role and detected_unix_s: ReadFaults keeps the last record
// of each.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar {

enum class FaultKind {
  kCrash,      // a process exited or was killed
  kHang,       // a process stopped answering (missed heartbeats)
  kNonFinite,  // non-finite logits, loss or gradient
  kStraggler,  // a step far slower than the ones before it
  kDiskFull,   // a write failed for want of space
  kLostLink,   // a peer's connection went away
};

// "crash", "hang", "non_finite", "straggler", "disk_full", "lost_link".
std::string_view FaultKindName(FaultKind kind);

struct Fault {
  FaultKind kind = FaultKind::kCrash;
  std::string role{};     // the role it struck: "rollout/1", "actor", "manager", "relay", ...
  std::string host{};     // that role's host (empty: this process's host)
  int rank = -1;          // the actor rank, where one applies
  std::string detail{};   // e.g. "killed by SIGKILL", "exit 3", "no heartbeat for 10 s"
  std::string seen_by{};  // the role that detected it: "supervisor", "manager", "actor"
  double detected_unix_s = 0;
  double recovered_unix_s = NAN;  // NaN: not recovered (the run went on without the role, or ended)
  // Non-empty: this record reclassifies the fault recorded earlier as this kind ("hang") with the
  // same role and detection time (a rollout declared hung turned out alive behind a lost link);
  // ReadFaults keeps this record in its place.
  std::string supersedes{};
};

// The fault as one JSON object (no newline): kind, role, host, rank, detail, seen_by,
// detected_unix_s, recovered_unix_s (null if not recovered), recovery_s (null likewise).
std::string FaultJson(const Fault& fault);

// "killed by SIGKILL" for 128 + 9 and "exit 3" for 3: Process::Wait's code in words.
std::string ExitCodeDetail(int code);

// Appends faults to a faults.jsonl. A default-constructed log (no path) records nothing.
class FaultLog {
 public:
  FaultLog() = default;
  explicit FaultLog(std::string path) : path_(std::move(path)) {}

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // Appends `fault` (host filled in with this host when empty) as one line. Errors: Internal
  // naming the file when it cannot be opened or written (a full disk included).
  Status Record(Fault fault) const;

 private:
  std::string path_;
};

// The environment variable by which `laminar run` names its faults.jsonl to every role, for code
// with no recipe at hand (the reward worker pools).
inline constexpr char kFaultsEnv[] = "LAMINAR_FAULTS";
// A log of the file $LAMINAR_FAULTS names; records nothing when it is unset or empty.
FaultLog FaultLogFromEnvironment();

// Seconds since the epoch, as the records store them.
double FaultClockNow();

// The faults of a faults.jsonl, one object per fault in the order each was first recorded: of the
// records that share kind, role and detected_unix_s, the last (a recovery after its detection);
// a record that `supersedes` another kind with its role and detection time replaces that one.
// Lines that are not fault records are skipped; a missing file has none.
std::vector<nlohmann::json> ReadFaults(const std::string& path);

}  // namespace laminar
