// Multi-machine runs for real: three hosts made of network, UTS and mount namespaces
// (scripts/netns_cluster.sh) with a real Slurm (slurmctld, a slurmd per host, munge). A job
// submitted with sbatch runs scripts/launch_slurm.sh across them: every role on its own host's
// address, each rollout pulling from its own host's relay, the run's files in its folder, every
// sample trained once; a role pointed at an address where no host is fails in bounded time. A job
// that loses a relay (its rollout then pulls from the head's relay, the chain repaired) and every
// process of a rollout host midway, or a host's link for 10 s, goes on and loses nothing, and the
// fault is recorded with its host and kind; one that loses the host of an actor rank resumes from
// its last checkpoint with a spare host in its place. Each test tears the cluster down, also when
// it fails, and checks that nothing of it is left. Needs root and Slurm (scripts/setup.sh --dev
// installs it); skips without them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "launch/run_audit.h"
#include "tests/cli/cli_util.h"
#include "tests/test_util.h"

namespace laminar::testing {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::string kScript = std::string(LAMINAR_SOURCE_DIR) + "/scripts/netns_cluster.sh";

// Why this machine cannot run the cluster, or empty when it can.
std::string MissingForCluster() {
  if (geteuid() != 0) return "network namespaces need root";
  auto r = RunBash(
      "for c in ip nsenter unshare tc sbatch squeue scancel slurmctld slurmd munged; "
      "do command -v $c > /dev/null || echo $c; done");
  if (!r.out.empty()) {
    return "missing " + r.out +
           "(scripts/setup.sh --dev installs iproute2, slurmctld, slurmd, slurm-client, munge)";
  }
  return "";
}

// Where the tests' cluster keeps its state: one path (short enough for munge's socket), so that
// bringing a cluster up also removes one that a killed test left behind.
const char kState[] = "/run/laminar-cluster-test";

// The cluster of `hosts` hosts with Slurm, for the life of the object. One cluster at a time on the
// machine (the hosts' names and addresses are fixed): ctest runs these tests one at a time
// (RESOURCE_LOCK netns_cluster), and a file lock keeps other runs of them in turn.
class SlurmCluster {
 public:
  explicit SlurmCluster(int hosts)
      : env_("LAMINAR_CLUSTER_STATE=" + std::string(kState) + " "),
        lock_fd_(open("/run/laminar-cluster-test.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0600)) {
    EXPECT_GE(lock_fd_, 0) << "cannot open /run/laminar-cluster-test.lock";
    if (lock_fd_ >= 0) flock(lock_fd_, LOCK_EX);
    auto r = RunBash(env_ + kScript + " up " + std::to_string(hosts) + " --slurm");
    up_ = r.exit_code == 0;
    EXPECT_TRUE(up_) << r.out << r.err;
  }
  ~SlurmCluster() {
    Down();
    if (lock_fd_ >= 0) close(lock_fd_);  // and with it the lock
  }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  bool up() const { return up_; }
  // `command` (bash) run in host `n`.
  CliResult Run(int n, const std::string& command) {
    return RunBash(env_ + kScript + " run " + std::to_string(n) + " bash -c \"" + command + "\"");
  }
  // Submits with sbatch on h1 (`command`: Sbatch(...) with --parsable) and returns the job id;
  // empty, with a test failure, when sbatch refused.
  std::string Submit(const std::string& command) {
    auto r = Run(1, command);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    return r.exit_code == 0 ? r.out.substr(0, r.out.find_first_of(";\n")) : "";
  }
  // Whether job `job` is neither pending nor running (`all`: nor completing, which a job with
  // steps on a dead node stays in until Slurm gives the node up).
  bool Ended(const std::string& job, bool all = false) {
    return Run(1, "squeue --noheader " + std::string(all ? "" : "--states=PD,R ") + "--jobs " +
                      job + " 2> /dev/null")
        .out.empty();
  }
  CliResult Kill(int n) { return RunBash(env_ + kScript + " kill " + std::to_string(n)); }
  CliResult Link(int n, const std::string& state) {
    return RunBash(env_ + kScript + " link " + std::to_string(n) + " " + state);
  }
  void Down() {
    if (!down_) RunBash(env_ + kScript + " down");
    down_ = true;
  }

 private:
  std::string env_;
  int lock_fd_ = -1;
  bool up_ = false, down_ = false;
};

// The recipe of a run over three hosts on the synthetic policy: the head runs the manager, the
// actor, relay 0 and rollout 0; hosts 2 and 3 each a relay and a rollout; host 2 also the actor's
// second data-parallel rank (the ranks shard the optimizer state, ZeRO-1). With `reward_delay_s`, a
// Python reward that takes that long per sample paces the run (the tiny policy alone trains a step
// in a few milliseconds).
std::string WriteThreeHostRecipe(const fs::path& dir, int max_steps, double reward_delay_s = 0,
                                 int save_every = 1) {
  StoriesRun run;
  if (reward_delay_s > 0) {
    std::ofstream(dir / "reward.py")
        << "import time\n"
        << "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        << "    time.sleep(" << reward_delay_s << ")\n"
        << "    return float(ground_truth in solution_str)\n";
    run.reward = "{python: {path: " + (dir / "reward.py").string() + ", num_workers: 1}}";
  }
  run.num_prompts = 32;
  run.rollout = "num_workers: 3";
  run.actor = "max_steps: " + std::to_string(max_steps) +
              ", save_every: " + std::to_string(save_every) + ", world_size: 2, zero_stage: 1";
  run.heartbeat_timeout_s = 3;
  run.extra = "cluster: {nodes: 3, connect_timeout_s: 60, stop_grace_s: 10}\n";
  return WriteStoriesRecipe(dir, TinyModel(), TinyModel(), run);
}

// "sbatch ... scripts/launch_slurm.sh ..." for the run folder `run` on `nodes` nodes (extra sbatch
// options first, the launcher's last), the job's output in dir/`out`. The launcher is the batch
// script itself: a wrapping shell would die at scancel's SIGTERM and leave it outside the job's
// processes.
std::string Sbatch(const std::string& options, const fs::path& dir, const std::string& recipe,
                   const fs::path& run, const std::string& launcher_options = "",
                   const std::string& out = "job.out", int nodes = 3) {
  return "sbatch " + options + " -N " + std::to_string(nodes) + " -o " + (dir / out).string() +
         " -D " + LAMINAR_SOURCE_DIR + " --export=ALL,LAMINAR_BIN=" + LAMINAR_BINARY + " " +
         LAMINAR_SOURCE_DIR + "/scripts/launch_slurm.sh " + launcher_options + " --run-dir " +
         run.string() + " " + recipe;
}

std::vector<int> Steps(const fs::path& metrics) {
  std::vector<int> steps;
  for (const Json& m : launch::ReadJsonLines(metrics)) {
    steps.push_back(static_cast<int>(m.value("training/global_step", -1.0)));
  }
  return steps;
}

// 1, 2, ..., n: the steps of a run that trained each once.
std::vector<int> StepsOneTo(int n) {
  std::vector<int> steps(n);
  for (int i = 0; i < n; ++i) steps[i] = i + 1;
  return steps;
}

// Waits up to `seconds` for `done`; returns whether it came.
template <typename F>
bool WaitFor(double seconds, F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  return true;
}

// Nothing of the cluster is left on the machine: no namespace, link, mount, route, process of
// the run or of the cluster (munged, Slurm's daemons).
void ExpectNothingLeft(const fs::path& run) {
  auto left = RunBash(
      "ip netns list | grep -E \"^lam-\"; ip -o link | grep -E \" lam-\"; "
      "grep -F " +
      std::string(kState) +
      " /proc/self/mountinfo; "
      "ip route show 10.78.1.0/24; "
      "ps -eo args | grep -E \"" +
      run.string() + "|" + kState + "\" | grep -v grep; true");
  EXPECT_EQ(left.out, "") << "left behind by the cluster";
}

// No relay segment left in host `n`'s /dev/shm (the relays there were stopped, not killed).
void ExpectNoRelaySegments(SlurmCluster& cluster, int n) {
  auto shm = cluster.Run(n, "ls /dev/shm | grep -E ^laminar-relay-; true");
  EXPECT_EQ(shm.out, "") << "relay segments left in h" << n << "'s /dev/shm";
}

// The newest version a relay's log says it holds complete (-1: none).
int64_t LastCompleteVersion(const std::string& log) {
  int64_t last = -1;
  for (size_t at = log.find(": version "); at != std::string::npos;
       at = log.find(": version ", at + 1)) {
    const size_t number = at + std::string(": version ").size();
    const size_t end = log.find(' ', number);
    if (end == std::string::npos || log.compare(end, 10, " complete ") != 0) continue;
    last = std::max<int64_t>(last, std::stoll(log.substr(number, end - number)));
  }
  return last;
}

std::string Logs(const fs::path& run) {
  std::string out;
  for (const char* log : {"actor_0", "actor_1", "manager_0", "relay_0", "relay_1", "relay_2",
                          "rollout_0", "rollout_1", "rollout_2"}) {
    out += std::string("---- ") + log + "\n" + Slurp(run / "logs" / (std::string(log) + ".log"));
  }
  return out;
}

// Submits `sbatch` (an Sbatch(...) with --parsable) and waits up to 150 s for the run's first three
// steps. Returns the job's id; empty, with a test failure, when it did not get there.
std::string SubmitAndWaitForThreeSteps(SlurmCluster& cluster, const std::string& sbatch,
                                       const fs::path& dir, const fs::path& run) {
  const std::string job = cluster.Submit(sbatch);
  if (job.empty()) return job;
  const bool trained = WaitFor(150, [&] { return Steps(run / "metrics.jsonl").size() >= 3; });
  EXPECT_TRUE(trained) << Slurp(dir / "job.out") << Logs(run);
  return trained ? job : "";
}

TEST(SlurmClusterTest, AJobRunsOnThreeHostsEachRoleOnItsHostsAddress) {
  if (const std::string why = MissingForCluster(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = TempDir("slurm_job");
  const fs::path run = dir / "run";
  const std::string recipe = WriteThreeHostRecipe(dir, 3);
  {
    SlurmCluster cluster(3);
    ASSERT_TRUE(cluster.up());
    auto job = cluster.Run(1, "timeout 240 " + Sbatch("--wait", dir, recipe, run));
    const std::string out = Slurp(dir / "job.out");
    ASSERT_EQ(job.exit_code, 0) << job.out << job.err << out << Logs(run);
    EXPECT_NE(
        out.find("9 role instances on 3 node(s) (h1 h2 h3), coordinator tcp://10.78.1.1:29555"),
        std::string::npos)
        << out;
    // The actor's second rank on host 2 met rank 0 on the head, at the port after the
    // coordinator's, and trained its half of every step.
    const std::string rank1 = Slurp(run / "logs" / "actor_1.log");
    EXPECT_NE(rank1.find("rank 1 of 2 joined at tcp://10.78.1.1:29556 (pairs on 10.78.1.2)"),
              std::string::npos)
        << rank1;
    EXPECT_NE(rank1.find("step 3: trained 2 of 4 samples"), std::string::npos) << rank1;
    EXPECT_NE(rank1.find("rank 0 ended the run at step 3"), std::string::npos) << rank1;
    // The run's files, as laminar run lays them out.
    EXPECT_EQ(Steps(run / "metrics.jsonl"), StepsOneTo(3));
    EXPECT_TRUE(fs::exists(run / "checkpoints" / "latest"));
    EXPECT_TRUE(fs::exists(run / "run.keys"));
    // Each role on its host's address: the relays register theirs, each rollout lists its own
    // host's relay first and pulled versions from it.
    EXPECT_NE(Slurp(run / "logs" / "manager_0.log").find("\"endpoint\":\"tcp://10.78.1.1:"),
              std::string::npos);
    for (int host = 2; host <= 3; ++host) {
      const std::string rank = std::to_string(host - 1);
      const std::string address = "tcp://10.78.1." + std::to_string(host) + ":";
      const std::string relay = Slurp(run / "logs" / ("relay_" + rank + ".log"));
      EXPECT_NE(relay.find("registered " + address), std::string::npos) << relay;
      EXPECT_NE(relay.find("\"host\":\"h" + std::to_string(host) + "\""), std::string::npos)
          << relay;
      const std::string rollout = Slurp(run / "logs" / ("rollout_" + rank + ".log"));
      EXPECT_NE(rollout.find("relays " + address), std::string::npos) << rollout;
      EXPECT_NE(rollout.find("(pulled from " + address), std::string::npos) << rollout;
      EXPECT_NE(rollout.find(" by shm)"), std::string::npos) << rollout;
    }
    double own = 0;
    for (const Json& m : launch::ReadJsonLines(run / "metrics.jsonl")) {
      own += m.value("relay/pulls_own_relay", 0.0);
    }
    EXPECT_GT(own, 0) << "the metrics show no pull served by a rollout's own relay";
    // Every sample trained once, every prompt handed out accounted for.
    auto audit = RunLaminar("audit " + run.string());
    EXPECT_EQ(audit.exit_code, 0) << audit.out << audit.err;
    // A role pointed at an address where no host is fails in the time it was given, naming it.
    const auto start = std::chrono::steady_clock::now();
    auto lost = cluster.Run(2, std::string(LAMINAR_BINARY) + " rollout --recipe " + recipe +
                                   " --rank 1 --coordinator tcp://10.78.1.9:29555 " +
                                   "cluster.connect_timeout_s=3 run.insecure=true");
    const double took_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(lost.exit_code, 1) << lost.err;
    EXPECT_NE(lost.err.find("no coordinator answered at tcp://10.78.1.9:29555 within 3 s"),
              std::string::npos)
        << lost.err;
    EXPECT_LT(took_s, 15);
    for (int n = 1; n <= 3; ++n) ExpectNoRelaySegments(cluster, n);
  }
  ExpectNothingLeft(run);
}

// scancel after step 3 stops every role on every host and leaves a checkpoint (the actor saves it
// while the manager and the master relay wait for it); a new job on that run folder is refused
// without --resume and resumes with it, and the run ends with every step once and nothing lost.
TEST(SlurmClusterTest, ScancelLeavesACheckpointAndAResubmittedJobResumes) {
  if (const std::string why = MissingForCluster(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = TempDir("slurm_scancel");
  const fs::path run = dir / "run";
  constexpr int kSteps = 10;
  const std::string recipe = WriteThreeHostRecipe(dir, kSteps, 0.5, /*save_every=*/0);
  {
    SlurmCluster cluster(3);
    ASSERT_TRUE(cluster.up());
    const std::string job =
        SubmitAndWaitForThreeSteps(cluster, Sbatch("--parsable", dir, recipe, run), dir, run);
    ASSERT_FALSE(job.empty());
    ASSERT_EQ(cluster.Run(1, "scancel " + job).exit_code, 0);
    ASSERT_TRUE(WaitFor(90, [&] { return cluster.Ended(job, /*all=*/true); })) << Logs(run);
    std::string latest = Slurp(run / "checkpoints" / "latest");
    while (!latest.empty() && latest.back() == '\n') latest.pop_back();
    ASSERT_FALSE(latest.empty()) << Logs(run);
    auto left = RunBash("ps -eo args | grep -F " + run.string() + " | grep -v grep; true");
    EXPECT_EQ(left.out, "") << "processes of the cancelled job";
    const std::string manager = Slurp(run / "logs" / "manager_0.log");
    EXPECT_NE(manager.find("manager: stopping after the actor"), std::string::npos) << manager;

    auto again =
        cluster.Run(1, "timeout 60 " + Sbatch("--wait", dir, recipe, run, "", "again.out"));
    EXPECT_NE(again.exit_code, 0);
    EXPECT_NE(Slurp(dir / "again.out").find("holds an earlier run's checkpoints: pass --resume"),
              std::string::npos)
        << Slurp(dir / "again.out");
    auto resumed = cluster.Run(
        1, "timeout 240 " + Sbatch("--wait", dir, recipe, run, "--resume", "resumed.out"));
    ASSERT_EQ(resumed.exit_code, 0) << Slurp(dir / "resumed.out") << Logs(run);
    EXPECT_EQ(Steps(run / "metrics.jsonl"), StepsOneTo(kSteps));
    // The logs keep the cancelled job's lines.
    EXPECT_NE(Slurp(run / "logs" / "manager_0.log").find("manager: stopping after the actor"),
              std::string::npos);
    auto audit = RunLaminar("audit " + run.string());
    EXPECT_EQ(audit.exit_code, 0) << audit.out << audit.err;
    std::printf("cancelled at checkpoint %s; resumed: %s", latest.c_str(), audit.out.c_str());
  }
  ExpectNothingLeft(run);
}

// After step 3 the relay of host 2 is killed: the master relay drops it from its chain, host 3's
// relay gets the versions along the repaired chain, and host 2's rollout pulls them from the
// head's relay over the bulk transport, at its own host's address. Then every process of host 3
// (its relay, its rollout, its slurmd) is killed: the job goes on with the other hosts and trains
// every sample once.
TEST(SlurmClusterTest, ARunLosesARelayThenARolloutHostAndGoesOnLosingNothing) {
  if (const std::string why = MissingForCluster(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = TempDir("slurm_host_kill");
  const fs::path run = dir / "run";
  constexpr int kSteps = 30;
  const std::string recipe = WriteThreeHostRecipe(dir, kSteps, 0.2);
  {
    SlurmCluster cluster(3);
    ASSERT_TRUE(cluster.up());
    // --no-kill: the job outlives a node that fails, as a fault-tolerant job does.
    const std::string job = SubmitAndWaitForThreeSteps(
        cluster, Sbatch("--no-kill --parsable", dir, recipe, run), dir, run);
    ASSERT_FALSE(job.empty());
    // Host 2's relay alone (the hosts share one process table: only processes in h2's network
    // namespace are candidates).
    const int steps_at_relay_kill = static_cast<int>(Steps(run / "metrics.jsonl").size());
    auto killed = RunBash(
        "for p in $(ip netns pids lam-h2); do "
        "tr \"\\0\" \" \" < /proc/$p/cmdline 2> /dev/null | grep -q \" relay --recipe \" && "
        "kill -KILL $p && echo $p; done; true");
    ASSERT_NE(killed.out, "") << "no relay process in h2";
    ASSERT_TRUE(WaitFor(60,
                        [&] {
                          return LastCompleteVersion(Slurp(run / "logs" / "relay_2.log")) >
                                 steps_at_relay_kill + 2;
                        }))
        << "h3's relay got no version after h2's relay died\n"
        << Logs(run);
    const int steps_at_kill = static_cast<int>(Steps(run / "metrics.jsonl").size());
    const auto killed_at = std::chrono::steady_clock::now();
    const double killed_unix_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    ASSERT_EQ(cluster.Kill(3).exit_code, 0);
    ASSERT_TRUE(WaitFor(200, [&] { return cluster.Ended(job); }))
        << Slurp(dir / "job.out") << Logs(run);
    const double recovery_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
    EXPECT_EQ(Steps(run / "metrics.jsonl"), StepsOneTo(kSteps))
        << Slurp(dir / "job.out") << Logs(run);
    // The manager saw the lost rollout and named it, on its host.
    bool named = false;
    double detection_s = -1, recovery_s_of_fault = -1;
    for (const Json& f : launch::ReadJsonLines(run / "faults.jsonl")) {
      if (f.value("role", "").starts_with("rollout/") && f.value("host", "") == "h3") {
        named = true;
        detection_s = f.value("detected_unix_s", 0.0) - killed_unix_s;
        if (f["recovery_s"].is_number()) recovery_s_of_fault = f["recovery_s"].get<double>();
      }
    }
    EXPECT_TRUE(named) << Slurp(run / "faults.jsonl") << Logs(run);
    // The master relay dropped both relays from its chain; host 2's rollout pulled from the head's
    // relay over the bulk transport once its own was gone.
    const std::string master = Slurp(run / "logs" / "relay_0.log");
    EXPECT_NE(master.find("pings; dropped from the chain"), std::string::npos) << master;
    const std::string rollout1 = Slurp(run / "logs" / "rollout_1.log");
    EXPECT_NE(rollout1.find("; pulls arrive at 10.78.1.2"), std::string::npos) << rollout1;
    EXPECT_NE(rollout1.find("(pulled from tcp://10.78.1.1:"), std::string::npos) << rollout1;
    EXPECT_NE(rollout1.find(" by bulk)"), std::string::npos) << rollout1;
    double other = 0;
    for (const Json& m : launch::ReadJsonLines(run / "metrics.jsonl")) {
      other += m.value("relay/pulls_other_relay", 0.0);
    }
    EXPECT_GT(other, 0) << "the metrics show no pull from another node's relay";
    auto audit = RunLaminar("audit " + run.string());
    EXPECT_EQ(audit.exit_code, 0) << audit.out << audit.err;
    std::printf(
        "h2's relay killed after step %d; host 3 killed after step %d: detected after %.1f s, its "
        "groups re-issued %.1f s later; the job ended %.1f s after the kill: %s",
        steps_at_relay_kill, steps_at_kill, detection_s, recovery_s_of_fault, recovery_s,
        audit.out.c_str());
  }
  ExpectNothingLeft(run);
}

// Every process of host 2 (the actor's second rank, relay 1, rollout 1, its slurmd) is killed
// after step 3 of a job on three hosts and a spare: rank 0 loses its peer and the actor ends with
// exit 75; the launcher stops the other roles, finds h2 dead, gives its roles to the spare h4 and
// starts them again from the last checkpoint, in the same job. Every step is trained once and no
// sample lost; the lost rank is a fault recovered at the resumed first step.
TEST(SlurmClusterTest, LosingAnActorRanksHostResumesOnASpareNode) {
  if (const std::string why = MissingForCluster(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = TempDir("slurm_actor_host_kill");
  const fs::path run = dir / "run";
  constexpr int kSteps = 10;
  const std::string recipe = WriteThreeHostRecipe(dir, kSteps, 0.2);
  {
    SlurmCluster cluster(4);
    ASSERT_TRUE(cluster.up());
    // --no-kill: the job outlives the node that dies.
    const std::string job = SubmitAndWaitForThreeSteps(
        cluster, Sbatch("--no-kill --parsable", dir, recipe, run, "", "job.out", 4), dir, run);
    ASSERT_FALSE(job.empty());
    const int steps_at_kill = static_cast<int>(Steps(run / "metrics.jsonl").size());
    const double killed_unix_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    ASSERT_EQ(cluster.Kill(2).exit_code, 0);
    ASSERT_TRUE(WaitFor(240, [&] { return cluster.Ended(job); }))
        << Slurp(dir / "job.out") << Logs(run);
    const std::string out = Slurp(dir / "job.out");
    EXPECT_EQ(Steps(run / "metrics.jsonl"), StepsOneTo(kSteps)) << out << Logs(run);
    EXPECT_NE(out.find("node h2 does not answer; spare node h4 takes its roles "),
              std::string::npos)
        << out;
    const std::string actor0 = Slurp(run / "logs" / "actor_0.log");
    EXPECT_NE(actor0.find("a data-parallel rank is lost"), std::string::npos) << actor0;
    const std::string rank1 = Slurp(run / "logs" / "actor_1.log");
    EXPECT_NE(rank1.find("rank 1 of 2 joined at tcp://10.78.1.1:29556 (pairs on 10.78.1.4)"),
              std::string::npos)
        << rank1;
    double detection_s = -1, recovery_s = -1;
    for (const Json& f : launch::ReadJsonLines(run / "faults.jsonl")) {
      if (f.value("kind", "") == "lost_link" && f.value("role", "") == "actor" &&
          f["recovery_s"].is_number()) {
        detection_s = f.value("detected_unix_s", 0.0) - killed_unix_s;
        recovery_s = f["recovery_s"].get<double>();
      }
    }
    EXPECT_GT(recovery_s, 0) << Slurp(run / "faults.jsonl");
    auto audit = RunLaminar("audit " + run.string());
    EXPECT_EQ(audit.exit_code, 0) << audit.out << audit.err;
    std::printf(
        "h2 (actor rank 1) killed after step %d: the lost rank detected after %.1f s, the run "
        "training again on the spare h4 %.1f s later: %s",
        steps_at_kill, detection_s, recovery_s, audit.out.c_str());
  }
  ExpectNothingLeft(run);
}

// Host 3's link goes down for 10 s after step 3, then up again: the manager declares its rollout
// hung, and when it comes back with requests that went unanswered, records a lost link instead;
// the run goes on and trains every sample once.
TEST(SlurmClusterTest, ALinkDownForTenSecondsIsALostLinkAndLosesNothing) {
  if (const std::string why = MissingForCluster(); !why.empty()) GTEST_SKIP() << why;
  const fs::path dir = TempDir("slurm_link_down");
  const fs::path run = dir / "run";
  // About a step a second with two rollouts: the run outlasts the outage by about ten steps.
  constexpr int kSteps = 25;
  const std::string recipe = WriteThreeHostRecipe(dir, kSteps, 0.5);
  {
    SlurmCluster cluster(3);
    ASSERT_TRUE(cluster.up());
    const std::string job =
        SubmitAndWaitForThreeSteps(cluster, Sbatch("--parsable", dir, recipe, run), dir, run);
    ASSERT_FALSE(job.empty());
    ASSERT_EQ(cluster.Link(3, "down").exit_code, 0);
    std::this_thread::sleep_for(std::chrono::seconds(10));
    ASSERT_EQ(cluster.Link(3, "up").exit_code, 0);
    ASSERT_TRUE(WaitFor(200, [&] { return cluster.Ended(job); }))
        << Slurp(dir / "job.out") << Logs(run);
    EXPECT_EQ(Steps(run / "metrics.jsonl"), StepsOneTo(kSteps))
        << Slurp(dir / "job.out") << Logs(run);
    bool lost_link = false;
    for (const Json& f : launch::ReadJsonLines(run / "faults.jsonl")) {
      lost_link |= f.value("kind", "") == "lost_link" && f.value("role", "") == "rollout/2" &&
                   f.value("host", "") == "h3";
    }
    EXPECT_TRUE(lost_link) << Slurp(run / "faults.jsonl") << Logs(run);
    auto audit = RunLaminar("audit " + run.string());
    EXPECT_EQ(audit.exit_code, 0) << audit.out << audit.err;
    std::printf("faults: %saudit: %s", Slurp(run / "faults.jsonl").c_str(), audit.out.c_str());
  }
  ExpectNothingLeft(run);
}

}  // namespace
}  // namespace laminar::testing
