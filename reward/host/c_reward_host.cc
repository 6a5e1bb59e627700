// laminar-reward-host: one worker of a C ABI reward plug-in (reward/laminar_reward_plugin.h),
// started by reward/worker_pool.h's pool as
//
//   laminar-reward-host <library.so> <symbol> <parent pid> <cpu_time_s> <memory_mb>
//                       <max_open_files> <network: 0 or 1> <cgroup dir or ->
//
// It sandboxes itself before it loads the library (the pids cgroup the pool made for it, no core
// dumps, a network namespace of its own unless network is 1, RLIMIT_NOFILE and RLIMIT_AS), kills
// what is in its cgroup and its process group once its parent is gone, and serves the pool's
// protocol: a ready line, then per request line one reply, with RLIMIT_CPU set before each call.
// Requests hold the four strings hex-coded (the ABI passes bytes, which need not be UTF-8):
// {"data_source", "solution_str", "ground_truth", "extra_info"}. What the plug-in writes to stdout
// goes to stderr, so it never corrupts replies.
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "reward/laminar_reward_plugin.h"

namespace {

FILE* g_reply = nullptr;  // a private copy of the original stdout

void Send(const nlohmann::json& reply) {
  // replace: a plug-in's message (or a path in dlerror's) need not be UTF-8.
  const std::string line =
      reply.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(line.data(), 1, line.size(), g_reply);
  std::fflush(g_reply);
}

// Sets `resource`'s soft and hard limit to `value`, never above the hard limit it has (which only
// privileged processes may raise: Slurm or `ulimit` may have set one).
void Limit(int resource, rlim_t value) {
  rlimit now{};
  if (getrlimit(resource, &now) == 0 && now.rlim_max != RLIM_INFINITY && value > now.rlim_max) {
    value = now.rlim_max;
  }
  const rlimit want{value, value};
  setrlimit(resource, &want);
}

// Joins the pids cgroup at `dir` ("-": none); returns "limited" or "unlimited[: <why>]".
std::string JoinCgroup(const std::string& dir) {
  if (dir == "-") return "unlimited";
  std::ofstream procs(dir + "/cgroup.procs");
  procs << getpid();
  procs.flush();
  if (!procs) return "unlimited: joining " + dir + ": " + std::strerror(errno);
  return "limited";
}

// SIGKILLs every other process in the cgroup at `dir`, until none is left (bounded).
void KillCgroup(const std::string& dir) {
  if (dir == "-") return;
  for (int round = 0; round < 1000; ++round) {
    std::ifstream procs(dir + "/cgroup.procs");
    bool any = false;
    for (long pid = 0; procs >> pid;) {
      if (pid > 0 && pid != getpid()) {
        any = true;
        kill(static_cast<pid_t>(pid), SIGKILL);
      }
    }
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The sandbox before any plug-in code runs; returns where the network is ("isolated", "host",
// "host: unshare: <why>").
std::string Sandbox(long memory_mb, long open_files, bool network) {
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  std::string where = "host";
  if (!network) {
    if (unshare(CLONE_NEWNET) == 0 || unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0) {
      where = "isolated";
    } else {
      where = std::string("host: unshare: ") + std::strerror(errno);
    }
  }
  if (open_files > 0) Limit(RLIMIT_NOFILE, static_cast<rlim_t>(open_files));
  if (memory_mb > 0) Limit(RLIMIT_AS, static_cast<rlim_t>(memory_mb) << 20);
  return where;
}

// RLIMIT_CPU at the CPU time used so far plus `seconds` (0: none).
void LimitCpu(double seconds) {
  if (seconds <= 0) return;
  rusage used{};
  getrusage(RUSAGE_SELF, &used);
  const double spent = static_cast<double>(used.ru_utime.tv_sec + used.ru_stime.tv_sec) +
                       static_cast<double>(used.ru_utime.tv_usec + used.ru_stime.tv_usec) / 1e6;
  rlimit cpu{};
  getrlimit(RLIMIT_CPU, &cpu);  // the soft limit moves; the hard one stays as it is
  cpu.rlim_cur = static_cast<rlim_t>(std::ceil(spent + seconds));
  if (cpu.rlim_max != RLIM_INFINITY && cpu.rlim_cur > cpu.rlim_max) cpu.rlim_cur = cpu.rlim_max;
  setrlimit(RLIMIT_CPU, &cpu);
}

std::string Unhex(const nlohmann::json& request, const char* key) {
  const std::string hex = request.at(key).get<std::string>();
  if (hex.size() % 2 != 0) throw std::invalid_argument(std::string(key) + " is not hex");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

// One call of the plug-in: {"score": x, "extra": {}} or {"error": "..."}.
nlohmann::json Score(laminar_compute_score_fn fn, const nlohmann::json& request, double cpu_s) {
  const std::string data_source = Unhex(request, "data_source"),
                    solution = Unhex(request, "solution_str"),
                    truth = Unhex(request, "ground_truth"), extra = Unhex(request, "extra_info");
  const laminar_reward_input input{
      .data_source = data_source.c_str(),
      .data_source_size = data_source.size(),
      .solution_str = solution.c_str(),
      .solution_str_size = solution.size(),
      .ground_truth = truth.c_str(),
      .ground_truth_size = truth.size(),
      .extra_info_json = extra.c_str(),
      .extra_info_json_size = extra.size(),
  };
  double score = 0;
  char error[1024] = {0};
  LimitCpu(cpu_s);
  const int rc = fn(&input, &score, error, sizeof(error));
  error[sizeof(error) - 1] = '\0';  // a plug-in that forgot the NUL
  if (rc != 0) {
    return {{"error", "returned " + std::to_string(rc) + ": " +
                          (error[0] != '\0' ? std::string(error) : "(no message)")}};
  }
  if (!std::isfinite(score)) {
    return {{"error", "returned the score " + std::to_string(score) + ", which is not finite"}};
  }
  return {{"score", score}, {"extra", nlohmann::json::object()}};
}

std::string DlError() {
  const char* e = dlerror();  // NOLINT(concurrency-mt-unsafe): one thread loads
  return e != nullptr ? e : "unknown dlopen error";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr,
                 "usage: %s LIBRARY SYMBOL PARENT_PID CPU_TIME_S MEMORY_MB MAX_OPEN_FILES "
                 "NETWORK CGROUP\n(started by laminar's reward worker pool, not by hand)\n",
                 argv[0]);
    return 2;
  }
  const std::string path = argv[1], symbol = argv[2];
  const pid_t parent = static_cast<pid_t>(std::atol(argv[3]));
  const double cpu_s = std::atof(argv[4]);
  const long memory_mb = std::atol(argv[5]), open_files = std::atol(argv[6]);
  const bool network = std::string(argv[7]) == "1";
  const std::string cgroup = argv[8];
  // Replies on a private copy of stdout; fd 1 itself (the plug-in's printf) goes to stderr.
  // Close-on-exec: a process the plug-in starts must not hold the reply pipe open.
  g_reply = fdopen(fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3), "w");
  if (g_reply == nullptr) return 1;
  dup2(STDERR_FILENO, STDOUT_FILENO);
  signal(SIGINT, SIG_IGN);  // the pool decides when workers stop
  // The cgroup first: the namespace may drop the privileges joining it needs.
  const std::string processes = JoinCgroup(cgroup);
  const std::string where = Sandbox(memory_mb, open_files, network);  // single-threaded still
  std::thread([parent, cgroup] {
    // The owner's death re-parents this process; under a wrapper that forks, the parent is the
    // wrapper, so the owner is also watched directly.
    const pid_t start = getppid();
    auto owner_alive = [parent] { return kill(parent, 0) == 0 || errno == EPERM; };
    while (getppid() == start && (start == parent || owner_alive())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    KillCgroup(cgroup);  // what the plug-in started, also outside this worker's group
    kill(0, SIGKILL);    // this worker's group: it and whatever the plug-in started
  }).detach();

  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    Send({{"error", "dlopen: " + DlError()}});
    return 1;
  }
  dlerror();  // NOLINT(concurrency-mt-unsafe): clear, so a null symbol can be told from an error
  auto version =
      reinterpret_cast<laminar_reward_abi_version_fn>(dlsym(handle, "laminar_reward_abi_version"));
  if (version == nullptr) {
    Send({{"error", "exports no laminar_reward_abi_version (" + DlError() +
                        "); build it against reward/laminar_reward_plugin.h"}});
    return 1;
  }
  if (const int v = version(); v != LAMINAR_REWARD_ABI_VERSION) {
    Send({{"error", "built for reward plug-in ABI version " + std::to_string(v) +
                        ", but this laminar speaks version " +
                        std::to_string(LAMINAR_REWARD_ABI_VERSION) +
                        "; rebuild it against reward/laminar_reward_plugin.h"}});
    return 1;
  }
  auto fn = reinterpret_cast<laminar_compute_score_fn>(dlsym(handle, symbol.c_str()));
  if (fn == nullptr) {
    Send({{"error", "exports no '" + symbol + "' (" + DlError() + ")"}});
    return 1;
  }
  Send({{"ready", true}, {"network", where}, {"processes", processes}});
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::json reply;
    try {
      reply = Score(fn, nlohmann::json::parse(line), cpu_s);
    } catch (const std::exception& e) {
      reply = {{"error", std::string("a request the host cannot read: ") + e.what()}};
    }
    Send(reply);
  }
  return 0;
}
