// Python reward plug-ins: scores, dict results, exceptions, deadlines, prints, crashes, concurrent
// calls, creation errors, the registry's `python` spec, and no process left behind. Skipped when
// python3 cannot run.
#include "reward/python_reward.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/mapped_file.h"
#include "core/pids_cgroup.h"
#include "core/process.h"
#include "tests/reward/reward_test_util.h"
#include "tests/test_util.h"

namespace laminar::reward {
namespace {

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

bool PythonRuns() {
  static const bool runs = [] {
    auto p = Process::Spawn({"python3", "-c", "print('ok')"});
    if (!p.ok()) return false;
    auto line = p->ReadLine(30000);
    return line.ok() && *line == "ok" && p->Wait(30000).ok();
  }();
  return runs;
}

// Processes whose parent is this one (zombies included), from /proc/<pid>/stat.
int CountChildren() {
  int n = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return -1;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (sscanf(text.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 && ppid == getpid()) ++n;
  }
  closedir(proc);
  return n;
}

// The reward file every test uses: behaviour chosen by the response text.
constexpr const char* kRewardPy = R"py(
import os, resource, socket, subprocess, sys, time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "raise":
        return 1 / 0
    if solution_str == "sleep":
        time.sleep(3600)
    if solution_str == "exit":
        os._exit(3)
    if solution_str == "print":
        print("noise on stdout\n{\"score\": 99}")
        os.write(1, b"raw noise on fd 1\n")
        sys.__stdout__.write("more noise\n")
    if solution_str == "dict":
        return {"score": 0.5, "acc": True, "pred": "7", "len": len(ground_truth)}
    if solution_str == "nan":
        return float("nan")
    if solution_str == "text":
        return "1.0"
    if solution_str == "extra":
        return float(extra_info["index"]) if extra_info else -1.0
    if solution_str == "limits":
        return {"score": 0, "core": resource.getrlimit(resource.RLIMIT_CORE)[0],
                "files": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                "mb": resource.getrlimit(resource.RLIMIT_AS)[0] >> 20}
    if solution_str == "alloc":
        return float(len(bytearray(8 << 30)))
    if solution_str == "spin":
        while True:
            pass
    if solution_str == "connect":
        try:
            socket.create_connection(("127.0.0.1", int(ground_truth)), timeout=5).close()
            return 1.0
        except OSError:
            return 0.0
    if solution_str in ("spawn", "daemon"):
        # daemon: a session of its own, out of the worker's process group.
        child = subprocess.Popen(["sleep", "600"], start_new_session=solution_str == "daemon")
        with open(ground_truth, "w") as f:
            f.write(str(child.pid))
        return 1.0
    if solution_str in ("count", "bomb"):
        # Only inside a laminar pids cgroup, which bounds it; anywhere else it refuses.
        with open("/proc/self/cgroup") as f:
            if "laminar-reward-" not in f.read():
                return -1.0
    if solution_str == "count":
        # Children that wait, until a fork fails: how many the bound allows.
        children = []
        while len(children) < 1000:
            try:
                pid = os.fork()
            except OSError:
                break
            if pid == 0:
                time.sleep(600)
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        return float(len(children))
    if solution_str == "bomb":
        while True:  # every child forks too
            try:
                os.fork()
            except OSError:
                pass
    return 1.0 if solution_str.strip() == ground_truth.strip() else 0.0

def length_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(len(solution_str))
)py";

class PythonRewardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PythonRuns()) GTEST_SKIP() << "python3 does not run here";
    char tmpl[] = "/tmp/laminar_python_reward_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = Write("my_reward.py", kRewardPy);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  PythonRewardOptions Options() const {
    return {.path = path_,
            .function = "compute_score",
            .num_workers = 2,
            .timeout_s = 10,  // ample: only the deadline test wants one to pass
            .startup_timeout_s = 30,
            .python = "python3"};
  }
  static StatusOr<RewardResult> Call(const RewardFn& f, std::string_view response,
                                     std::string_view truth = "7",
                                     std::string_view extra_info = "") {
    return f({.data_source = "test",
              .solution_str = response,
              .ground_truth = truth,
              .extra_info_json = extra_info});
  }
  std::string dir_;
  std::string path_;
};

TEST_F(PythonRewardTest, ScoresAFloat) {
  auto f = MakePythonReward(Options());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Score(*f, " 7 ", "7"), 1.0);
  EXPECT_EQ(Score(*f, "8", "7"), 0.0);
  // Newlines, quotes, non-ASCII and invalid UTF-8 travel intact (the last as U+FFFD).
  EXPECT_EQ(Score(*f, "a\n\"b\"\u00e9", "a\n\"b\"\u00e9"), 1.0);
  EXPECT_EQ(Score(*f, "\xff", "\xef\xbf\xbd"), 1.0);
  auto r = Call(*f, "extra", "7", R"({"index": 12})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->score, 12.0);
  EXPECT_EQ(Score(*f, "extra", "7"), -1.0);  // "" extra_info is None
}

TEST_F(PythonRewardTest, DictResultGivesItsNumbersAsExtra) {
  auto f = MakePythonReward(Options());
  ASSERT_TRUE(f.ok()) << f.status();
  auto r = Call(*f, "dict", "1234");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->score, 0.5);
  EXPECT_EQ(r->extra, (std::map<std::string, double>{{"acc", 1.0}, {"len", 4.0}}));
}

TEST_F(PythonRewardTest, RaisingIsAnErrorWithTheExceptionAndThePoolGoesOn) {
  auto f = MakePythonReward(Options());
  ASSERT_TRUE(f.ok()) << f.status();
  auto r = Call(*f, "raise");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status(), "ZeroDivisionError: division by zero")) << r.status();
  EXPECT_TRUE(Contains(r.status(), "my_reward.py:6 in compute_score")) << r.status();
  EXPECT_TRUE(Contains(r.status(), "python reward " + path_ + ":compute_score")) << r.status();
  for (const char* bad : {"nan", "text"}) {
    auto b = Call(*f, bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument) << b.status();
  }
  EXPECT_EQ(Score(*f, "7", "7"), 1.0);
}

TEST_F(PythonRewardTest, SleepingForeverIsKilledAtTheDeadline) {
  PythonRewardOptions o = Options();
  o.timeout_s = 0.5;
  auto f = MakePythonReward(o);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(CountChildren(), 1);  // the worker started to check the file
  auto r = Call(*f, "sleep");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_TRUE(Contains(r.status(), "0.5")) << r.status();
  EXPECT_EQ(CountChildren(), 0);  // killed and reaped
  // Both workers (one restarted) keep scoring.
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Score(*f, "7", "7"), 1.0);
}

TEST_F(PythonRewardTest, PrintsDoNotCorruptReplies) {
  auto f = MakePythonReward(Options());
  ASSERT_TRUE(f.ok()) << f.status();
  for (int i = 0; i < 3; ++i) {
    auto r = Call(*f, "print");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->score, 0.0);
  }
  EXPECT_EQ(Score(*f, "7", "7"), 1.0);
}

TEST_F(PythonRewardTest, ExitingWorkerIsAnErrorAndThePoolRecovers) {
  auto f = MakePythonReward(Options());
  ASSERT_TRUE(f.ok()) << f.status();
  auto r = Call(*f, "exit");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status();
  EXPECT_TRUE(Contains(r.status(), "exited with code 3")) << r.status();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Score(*f, "7", "7"), 1.0);
}

// The sandbox: limits as asked, no core dumps; memory past the limit is an error of that call and
// CPU past it a timeout, and the pool goes on.
TEST_F(PythonRewardTest, WorkersRunInsideTheirLimits) {
  PythonRewardOptions o = Options();
  o.sandbox.memory_mb = 1024;
  o.sandbox.max_open_files = 64;
  o.sandbox.cpu_time_s = 1;
  o.timeout_s = 60;
  auto f = MakePythonReward(o);
  ASSERT_TRUE(f.ok()) << f.status();
  auto limits = Call(*f, "limits");
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_EQ(limits->extra,
            (std::map<std::string, double>{{"core", 0}, {"files", 64}, {"mb", 1024}}));
  auto alloc = Call(*f, "alloc");
  ASSERT_FALSE(alloc.ok());
  EXPECT_EQ(alloc.status().code(), StatusCode::kInvalidArgument) << alloc.status();
  EXPECT_TRUE(Contains(alloc.status(), "MemoryError")) << alloc.status();
  auto spin = Call(*f, "spin");
  ASSERT_FALSE(spin.ok());
  EXPECT_EQ(spin.status().code(), StatusCode::kDeadlineExceeded) << spin.status();
  EXPECT_TRUE(Contains(spin.status(), "cpu_time_s")) << spin.status();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Score(*f, "7", "7"), 1.0);
  o.sandbox.max_open_files = -1;
  EXPECT_EQ(MakePythonReward(o).status().code(), StatusCode::kInvalidArgument);
}

// A limit above the hard one the worker inherits (Slurm's, ulimit's) is clamped to it rather than
// failing every call. CTest runs each test in a process of its own, so lowering this process's
// hard limit touches no other test.
TEST_F(PythonRewardTest, LimitsAboveTheInheritedHardLimitAreClamped) {
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max = 100;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  rlimit cpu{};
  ASSERT_EQ(getrlimit(RLIMIT_CPU, &cpu), 0);
  cpu.rlim_max = 3600;
  cpu.rlim_cur = std::min<rlim_t>(cpu.rlim_cur, cpu.rlim_max);
  ASSERT_EQ(setrlimit(RLIMIT_CPU, &cpu), 0);
  PythonRewardOptions o = Options();
  o.sandbox.max_open_files = 256;
  auto f = MakePythonReward(o);
  ASSERT_TRUE(f.ok()) << f.status();
  auto limits = Call(*f, "limits");
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_EQ(limits->extra.at("files"), 100);
  EXPECT_EQ(Score(*f, "7", "7"), 1.0);
}

// A worker has no network unless the options ask for it: a port listening on this process's
// loopback is out of reach from inside its namespace.
TEST_F(PythonRewardTest, WorkersHaveNoNetworkUnlessAsked) {
  int listening_port = 0;
  const int listener = ::laminar::testing::ListenOnLoopback(&listening_port);
  ASSERT_GE(listener, 0);
  const std::string port = std::to_string(listening_port);
  PythonRewardOptions o = Options();
  auto isolated = MakePythonReward(o);
  ASSERT_TRUE(isolated.ok()) << isolated.status();
  EXPECT_EQ(Score(*isolated, "connect", port), 0.0);
  o.sandbox.network = true;
  auto host = MakePythonReward(o);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_EQ(Score(*host, "connect", port), 1.0);
  close(listener);
}

// Whether this process may make pids cgroups (root, or a delegated subtree).
bool CgroupsWork() {
  static const bool work = PidsCgroup::Create("laminar-probe-" + std::to_string(getpid()), 8).ok();
  return work;
}

// Live processes (zombies, dead and waiting for their parent to reap them, do not count) in a
// cgroup of a reward worker this process started.
int CountInRewardCgroups() {
  int n = 0;
  const std::string mine = "laminar-reward-" + std::to_string(getpid()) + "-";
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    auto cgroup = ReadFileToString(entry.path().string() + "/cgroup");
    const char state = testing::ProcessState(std::stoi(name));
    if (cgroup.ok() && cgroup->find(mine) != std::string::npos && state != 0 && state != 'Z') ++n;
  }
  return n;
}

bool Gone(int pid) {
  const char state = testing::ProcessState(pid);
  return state == 0 || state == 'Z';
}

// What the user's code starts goes with its worker: the worker's process group is killed whole,
// and what left the group (a session of its own) with the worker's cgroup.
TEST_F(PythonRewardTest, ProcessesTheRewardStartsDieWithTheReward) {
  const std::string spawned = dir_ + "/child.pid", daemon = dir_ + "/daemon.pid";
  {
    auto f = MakePythonReward(Options());
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(Score(*f, "spawn", spawned), 1.0);
    if (CgroupsWork()) {
      EXPECT_EQ(Score(*f, "daemon", daemon), 1.0);
    }
  }
  std::vector<int> children = {std::stoi(*ReadFileToString(spawned))};
  if (CgroupsWork()) children.push_back(std::stoi(*ReadFileToString(daemon)));
  for (int child : children) {
    EXPECT_TRUE(testing::WaitFor([&] { return Gone(child); }, 10000))
        << "sleep " << child << " outlived the reward";
    if (!Gone(child)) kill(child, SIGKILL);
  }
  if (!CgroupsWork()) GTEST_SKIP() << "no pids cgroup can be made here: the daemon case is not run";
}

// max_processes bounds a worker's processes and threads (the worker itself has two: its main
// thread and its parent watcher); a fork bomb stops at the bound, the call times out, every
// process of it is killed and the pool goes on.
TEST_F(PythonRewardTest, AForkBombStopsAtMaxProcessesAndIsKilledWhole) {
  if (!CgroupsWork()) GTEST_SKIP() << "no pids cgroup can be made here (needs root)";
  PythonRewardOptions o = Options();
  o.num_workers = 1;
  o.timeout_s = 5;
  o.sandbox.max_processes = 16;
  auto f = MakePythonReward(o);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(Score(*f, "count", ""), 16 - 2);
  auto bomb = Call(*f, "bomb");
  ASSERT_FALSE(bomb.ok());
  EXPECT_EQ(bomb.status().code(), StatusCode::kDeadlineExceeded) << bomb.status();
  EXPECT_TRUE(testing::WaitFor([] { return CountInRewardCgroups() == 0; }, 5000))
      << CountInRewardCgroups() << " processes of the bomb live on";
  EXPECT_EQ(Score(*f, "7", "7"), 1.0);
  o.sandbox.max_processes = -1;
  EXPECT_EQ(MakePythonReward(o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(PythonRewardTest, ConcurrentCallsFromFourThreads) {
  PythonRewardOptions o = Options();
  o.function = "length_score";
  auto f = MakePythonReward(o);
  ASSERT_TRUE(f.ok()) << f.status();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        const std::string response(static_cast<size_t>(t * 100 + i), 'x');
        auto r = Call(*f, response);
        if (!r.ok() || r->score != static_cast<double>(response.size())) ++wrong;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GE(CountChildren(), 1);
  EXPECT_LE(CountChildren(), 2);  // never more than num_workers
}

TEST_F(PythonRewardTest, BadFilesFailAtCreation) {
  PythonRewardOptions o = Options();
  o.path = Write("syntax.py", "def compute_score(data_source, solution_str:\n    return 1\n");
  auto syntax = MakePythonReward(o);
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(syntax.status(), "SyntaxError")) << syntax.status();
  EXPECT_TRUE(Contains(syntax.status(), "syntax.py")) << syntax.status();
  EXPECT_TRUE(Contains(syntax.status(), "line 1")) << syntax.status();

  o.path = Write("import.py", "import no_such_module_for_laminar\n");
  auto import = MakePythonReward(o);
  ASSERT_FALSE(import.ok());
  EXPECT_TRUE(Contains(import.status(), "No module named 'no_such_module_for_laminar'"))
      << import.status();

  o.path = path_;
  o.function = "score_it";
  auto no_function = MakePythonReward(o);
  ASSERT_FALSE(no_function.ok());
  EXPECT_EQ(no_function.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_function.status(), "no function 'score_it'")) << no_function.status();
  EXPECT_TRUE(Contains(no_function.status(), "compute_score, length_score"))
      << no_function.status();

  o.path = dir_ + "/missing.py";
  o.function = "compute_score";
  auto missing = MakePythonReward(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(missing.status(), "missing.py: no such file")) << missing.status();

  o.path = path_;
  o.python = "/nonexistent/python3";
  EXPECT_FALSE(MakePythonReward(o).ok());
  o.python = "python3";
  o.num_workers = 0;
  EXPECT_EQ(MakePythonReward(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CountChildren(), 0);
}

TEST_F(PythonRewardTest, NoProcessOutlivesTheReward) {
  EXPECT_EQ(CountChildren(), 0);
  {
    auto f = MakePythonReward(Options());
    ASSERT_TRUE(f.ok()) << f.status();
    RewardFn copy = *f;
    std::thread other([&] { EXPECT_EQ(Score(copy, "7", "7"), 1.0); });
    EXPECT_EQ(Score(*f, "8", "7"), 0.0);
    other.join();
    EXPECT_GE(CountChildren(), 1);
    EXPECT_LE(CountChildren(), 2);
  }
  EXPECT_EQ(CountChildren(), 0);
}

TEST_F(PythonRewardTest, RecipeSpecsCombineWithBuiltinsAndResolvePaths) {
  auto specs = ParseRewardSpecs(
      YAML::Load("[exact_match, {python: {path: my_reward.py, function: compute_score, "
                 "timeout_s: 5, num_workers: 1}, weight: 0.5}]"),
      "reward", dir_);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  EXPECT_EQ((*specs)[1].name, "python");
  EXPECT_EQ((*specs)[1].weight, 0.5);
  EXPECT_EQ((*specs)[1].params.at("path"), path_);
  {
    auto f = CombineRewards(*specs);
    ASSERT_TRUE(f.ok()) << f.status();
    auto r = Call(*f, "7", "7");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->score, 1.5);
    EXPECT_EQ(r->extra.at("reward/python"), 1.0);
    r = Call(*f, "dict", "7");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->extra.at("reward/python/acc"), 1.0);
    r = Call(*f, "raise");
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(Contains(r.status(), "reward/python")) << r.status();
  }
  // The `name:` form is the same spec.
  EXPECT_TRUE(
      ParseRewardSpecs(YAML::Load("{name: python, path: my_reward.py}"), "reward", dir_).ok());

  Write("syntax.py", "def f(:\n");
  auto syntax = ParseRewardSpecs(YAML::Load("[gsm8k, {python: {path: syntax.py, function: f}}]"),
                                 "reward", dir_);
  ASSERT_FALSE(syntax.ok());
  EXPECT_TRUE(Contains(syntax.status(), "reward[1].python: ")) << syntax.status();
  EXPECT_TRUE(Contains(syntax.status(), "SyntaxError")) << syntax.status();
  auto no_path = ParseRewardSpecs(YAML::Load("{python: {function: f}}"), "reward", dir_);
  EXPECT_TRUE(Contains(no_path.status(), "reward.python: reward python: param path: missing"))
      << no_path.status();
  auto nested = ParseRewardSpecs(YAML::Load("{python: {path: [a, b]}}"), "reward", dir_);
  EXPECT_TRUE(Contains(nested.status(), "reward.python.path: expected a scalar value"))
      << nested.status();
  auto scalar = ParseRewardSpecs(YAML::Load("{python: my_reward.py}"), "reward", dir_);
  EXPECT_TRUE(Contains(scalar.status(), "reward.python: expected a map")) << scalar.status();
  auto workers = ParseRewardSpecs(YAML::Load("{python: {path: my_reward.py, num_workers: 1.5}}"),
                                  "reward", dir_);
  EXPECT_TRUE(Contains(workers.status(), "num_workers")) << workers.status();
  EXPECT_EQ(CountChildren(), 0);
}

}  // namespace
}  // namespace laminar::reward
