// A pids cgroup of this process's own; see pids_cgroup.h.
#include "core/pids_cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/host.h"

namespace laminar {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}

bool HasWord(const std::string& list, const std::string& word, char sep) {
  for (const std::string& w : Split(list, sep)) {
    if (w == word) return true;
  }
  return false;
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  if (!out)
    return UnavailableError("writing '" + text + "' to " + path + ": " + std::strerror(errno));
  return OkStatus();
}

// This process's cgroup directory in the pids hierarchy, and whether it is cgroup v2.
struct Hierarchy {
  std::string dir;
  bool v2 = false;
};

StatusOr<Hierarchy> OwnPidsCgroup() {
  // /proc/self/cgroup: "N:pids:/path" (v1) or "0::/path" (v2).
  std::string v1_path, v2_path;
  bool have_v1 = false, have_v2 = false;
  std::ifstream cgroups("/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (HasWord(controllers, "pids", ',')) {
      have_v1 = true;
      v1_path = path;
    } else if (line.compare(0, 3, "0::") == 0) {
      have_v2 = true;
      v2_path = path;
    }
  }
  // /proc/self/mountinfo: "id parent dev root mountpoint options [tags] - fstype source super".
  std::ifstream mounts("/proc/self/mountinfo");
  for (std::string line; std::getline(mounts, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    const std::vector<std::string> head = Split(line.substr(0, dash), ' ');
    const std::vector<std::string> tail = Split(line.substr(dash + 3), ' ');
    if (head.size() < 5 || tail.size() < 3) continue;
    const std::string &root = head[3], &mountpoint = head[4], &fstype = tail[0];
    const bool v1 = have_v1 && fstype == "cgroup" && HasWord(tail[2], "pids", ',');
    const bool v2 = !have_v1 && have_v2 && fstype == "cgroup2";
    if (!v1 && !v2) continue;
    std::string own = v1 ? v1_path : v2_path;
    // The mount shows the hierarchy from `root` down (a container sees its own subtree): it holds
    // this process's cgroup only when `root` is a whole-component prefix of its path.
    if (root != "/") {
      if (own != root && own.compare(0, root.size() + 1, root + "/") != 0) continue;
      own = own.substr(root.size());
    }
    const std::string dir = (fs::path(mountpoint) / fs::path(own).relative_path()).string();
    if (v2) {
      std::ifstream controllers(dir + "/cgroup.controllers");
      std::string have;
      std::getline(controllers, have);
      if (!HasWord(have, "pids", ' ')) {
        return UnavailableError("cgroup v2 at " + dir + " offers no pids controller");
      }
    }
    return Hierarchy{.dir = dir, .v2 = v2};
  }
  return UnavailableError("no pids cgroup hierarchy is mounted");
}

}  // namespace

StatusOr<PidsCgroup> PidsCgroup::Create(const std::string& name, int64_t max_tasks) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
    return InvalidArgumentError("pids cgroup: '" + name + "' is not a single path component");
  }
  if (max_tasks < 1) {
    return InvalidArgumentError("pids cgroup: max_tasks " + std::to_string(max_tasks) +
                                " is not >= 1");
  }
  LAMINAR_ASSIGN_OR_RETURN(Hierarchy h, OwnPidsCgroup());
  if (h.v2) {
    // Children get the controller only when their parent hands it down.
    std::ifstream subtree(h.dir + "/cgroup.subtree_control");
    std::string enabled;
    std::getline(subtree, enabled);
    if (!HasWord(enabled, "pids", ' ')) {
      LAMINAR_RETURN_IF_ERROR(WriteFile(h.dir + "/cgroup.subtree_control", "+pids"),
                              "enabling the pids controller");
    }
  }
  const std::string dir = h.dir + "/" + name;
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return UnavailableError("pids cgroup: mkdir " + dir + ": " + std::strerror(errno));
  }
  PidsCgroup cgroup(dir);
  LAMINAR_RETURN_IF_ERROR(WriteFile(dir + "/pids.max", std::to_string(max_tasks)), "pids cgroup");
  return cgroup;
}

void PidsCgroup::RemoveStale(const std::string& prefix) {
  StatusOr<Hierarchy> h = OwnPidsCgroup();
  if (!h.ok()) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(h->dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size() + 1, prefix + "-") != 0) continue;
    const pid_t owner = static_cast<pid_t>(std::atol(name.c_str() + prefix.size() + 1));
    if (owner <= 0 || kill(owner, 0) == 0 || errno == EPERM) continue;
    // Only empty ones: members mean a live owner this process cannot see (another pid
    // namespace sharing the hierarchy). rmdir refuses a cgroup that has members anyway.
    PidsCgroup stale(entry.path().string());
    if (stale.Pids().empty()) {
      rmdir(stale.dir_.c_str());
    }
    stale.dir_.clear();  // never killed or removed by its destructor
  }
}

PidsCgroup::PidsCgroup(PidsCgroup&& other) noexcept : dir_(std::move(other.dir_)) {
  other.dir_.clear();
}

PidsCgroup& PidsCgroup::operator=(PidsCgroup&& other) noexcept {
  if (this != &other) {
    Remove();
    dir_ = std::move(other.dir_);
    other.dir_.clear();
  }
  return *this;
}

PidsCgroup::~PidsCgroup() { Remove(); }

void PidsCgroup::Remove() {
  if (dir_.empty()) return;
  KillAll();
  // A killed member leaves the cgroup once the kernel has torn it down, shortly after the signal.
  for (int i = 0; i < 100 && rmdir(dir_.c_str()) != 0 && errno == EBUSY; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  dir_.clear();
}

std::vector<pid_t> PidsCgroup::Pids() const {
  std::vector<pid_t> pids;
  if (dir_.empty()) return pids;
  std::ifstream procs(dir_ + "/cgroup.procs");
  for (long pid = 0; procs >> pid;) {
    if (pid > 0) pids.push_back(static_cast<pid_t>(pid));
  }
  return pids;
}

bool PidsCgroup::KillAll(int timeout_ms) const {
  const int64_t deadline = SteadyNowMs() + timeout_ms;
  for (;;) {
    const std::vector<pid_t> pids = Pids();
    if (pids.empty()) return true;
    if (SteadyNowMs() > deadline) return false;
    for (pid_t pid : pids) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace laminar
