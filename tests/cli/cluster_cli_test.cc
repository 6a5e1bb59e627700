// Multi-machine launches on one machine: every role started with only --rank and
// --coordinator finds the others through the manager's coordinator, as real processes on real
// sockets on the synthetic tiny-llama policy; the cluster plan, the Slurm launcher's dry run and
// the Kubernetes example agree with it; a role whose coordinator never comes up fails in bounded
// time naming it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/process.h"
#include "tests/cli/cli_util.h"
#include "tests/test_util.h"

namespace laminar::testing {
namespace {

namespace fs = std::filesystem;

// A TCP port on 127.0.0.1 that nothing listens on right now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);
  return ntohs(addr.sin_port);
}

// A recipe for two nodes that are both this machine: the head runs the manager, the actor, relay
// 0 and rollout 0; node 1 runs relay 1 (chained behind relay 0) and rollout 1. With `keys`, the
// roles authenticate with that key file (run.keys).
std::string WriteClusterRecipe(const fs::path& dir, const std::string& model,
                               const std::string& tok, const std::string& keys = "") {
  StoriesRun run;
  run.rollout = "num_workers: 2";
  run.actor = "max_steps: 2, metrics: " + (dir / "metrics.jsonl").string();
  run.extra = "cluster: {nodes: 2, connect_timeout_s: 60}\n";
  if (!keys.empty()) run.extra += "run: {keys: " + keys + "}\n";
  return WriteStoriesRecipe(dir, model, tok, run);
}

// `laminar <role> --recipe R --rank i --coordinator C`, stderr in dir/<role><rank>.log.
Process StartRole(const fs::path& dir, const std::string& recipe, const std::string& role, int rank,
                  const std::string& coordinator, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> argv = {LAMINAR_BINARY,  role,       "--recipe",
                                   recipe,          "--rank",   std::to_string(rank),
                                   "--coordinator", coordinator};
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto p = Process::Spawn(argv, (dir / (role + std::to_string(rank) + ".log")).string());
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : Process();
}

nlohmann::json ReadyLine(Process* p, const fs::path& log) {
  auto line = p->ReadLine(30000);
  EXPECT_TRUE(line.ok()) << line.status() << "; " << log << ":\n" << Slurp(log);
  return nlohmann::json::parse(line.ok() ? *line : "{}", nullptr, false);
}

size_t CountLines(const fs::path& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

TEST(ClusterCliTest, RolesFindEachOtherThroughTheCoordinatorAlone) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  const fs::path dir = TempDir("cluster_run");
  // Every connection between the processes is CURVE-authenticated with the run's keys.
  const std::string keys = (dir / "run.keys").string();
  ASSERT_EQ(RunLaminar("keys " + keys).exit_code, 0);
  const std::string recipe = WriteClusterRecipe(dir, model, tok, keys);
  const std::string coordinator = "tcp://127.0.0.1:" + std::to_string(FreePort());
  // The manager, which serves the coordinator, comes last: the others wait for it.
  Process rollout0 = StartRole(dir, recipe, "rollout", 0, coordinator);
  Process rollout1 = StartRole(dir, recipe, "rollout", 1, coordinator);
  Process actor = StartRole(dir, recipe, "actor", 0, coordinator);
  Process relay1 = StartRole(dir, recipe, "relay", 1, coordinator);
  Process relay0 = StartRole(dir, recipe, "relay", 0, coordinator);
  Process manager = StartRole(dir, recipe, "manager", 0, coordinator);
  const nlohmann::json manager_ready = ReadyLine(&manager, dir / "manager0.log");
  const nlohmann::json relay0_ready = ReadyLine(&relay0, dir / "relay0.log");
  const nlohmann::json relay1_ready = ReadyLine(&relay1, dir / "relay1.log");
  EXPECT_EQ(relay0_ready.value("master", false), true) << relay0_ready;
  EXPECT_EQ(relay1_ready.value("master", true), false) << relay1_ready;
  const std::string relay0_control = relay0_ready.value("control", "?");
  const std::string relay1_control = relay1_ready.value("control", "?");

  auto code = actor.Wait(120000);
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << Slurp(dir / "actor0.log");
  ASSERT_EQ(*code, 0) << Slurp(dir / "actor0.log");
  EXPECT_EQ(CountLines(dir / "metrics.jsonl"), 2u) << Slurp(dir / "actor0.log");
  // Relay 1 joined relay 0's chain; each rollout was given its node's relay first.
  EXPECT_NE(Slurp(dir / "relay1.log").find("master " + relay0_control), std::string::npos)
      << Slurp(dir / "relay1.log");
  const std::string manager_endpoint = manager_ready.value("endpoint", "?");
  // A rollout may still be joining when the actor is done (the other can serve both steps):
  // wait for its line rather than read its log at once (failed a fresh-clone CI once).
  auto log_has = [&](const std::string& log, const std::string& line) {
    return WaitFor([&] { return Slurp(dir / log).find(line) != std::string::npos; }, 30000, 20);
  };
  // Each pulls over the bulk transport at its machine's address on the coordinator's route.
  EXPECT_TRUE(log_has("rollout0.log", "manager " + manager_endpoint + ", relays " + relay0_control +
                                          "; pulls arrive at 127.0.0.1\n"))
      << Slurp(dir / "rollout0.log");
  EXPECT_TRUE(log_has("rollout1.log", "manager " + manager_endpoint + ", relays " + relay1_control +
                                          " " + relay0_control + "; pulls arrive at 127.0.0.1\n"))
      << Slurp(dir / "rollout1.log");
  EXPECT_NE(Slurp(dir / "actor0.log").find("master relay " + relay0_control), std::string::npos)
      << Slurp(dir / "actor0.log");
  // Stop the rest together (the destructors would one by one).
  for (Process* p : {&rollout0, &rollout1, &relay1, &relay0, &manager}) p->Signal(SIGTERM);
}

// A role whose coordinator never comes up stops after cluster.connect_timeout_s with an error that
// names the coordinator and the key; usage errors are refused at once.
TEST(ClusterCliTest, ARoleWithoutACoordinatorFailsInBoundedTimeNamingIt) {
  const fs::path dir = TempDir("cluster_none");
  std::ofstream(dir / "recipe.yaml") << "model: {path: m}\ndata: {path: d}\n"
                                     << "cluster: {nodes: 2, connect_timeout_s: 0.5}\n"
                                     << "run: {insecure: true}\n";
  const std::string recipe = (dir / "recipe.yaml").string();
  const std::string nobody = "tcp://127.0.0.1:" + std::to_string(FreePort());
  for (int rank : {0, 1}) {
    auto r = RunLaminar("relay --recipe " + recipe + " --rank " + std::to_string(rank) +
                        " --coordinator " + nobody);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("no coordinator answered at " + nobody), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("cluster.connect_timeout_s"), std::string::npos) << r.err;
  }
  auto rank = RunLaminar("relay --recipe " + recipe + " --rank 2 --coordinator " + nobody);
  EXPECT_EQ(rank.exit_code, 1);
  EXPECT_NE(rank.err.find("--rank 2: the recipe's cluster plan has 2 relay ranks (0-1)"),
            std::string::npos)
      << rank.err;
  auto address = RunLaminar("relay --recipe " + recipe + " --coordinator 127.0.0.1:5");
  EXPECT_EQ(address.exit_code, 1);
  EXPECT_NE(address.err.find("--coordinator: '127.0.0.1:5'"), std::string::npos) << address.err;
  auto both = RunLaminar("actor --recipe " + recipe + " --coordinator " + nobody +
                         " --manager tcp://127.0.0.1:9");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--coordinator excludes --manager"), std::string::npos) << both.err;
  auto neither = RunLaminar("rollout --recipe " + recipe);
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_NE(neither.err.find("give --coordinator, or --manager and --relay"), std::string::npos)
      << neither.err;
  // A rollout loads its model before it looks for the coordinator: the same bound holds.
  const fs::path model = TinyModel();
  {
    std::ofstream(dir / "model.yaml")
        << "model: {path: " << model.string() << "}\n"
        << "data: {path: d}\nreward: {name: contains}\nrollout: {kv_cache_mb: 2}\n"
        << "cluster: {connect_timeout_s: 0.5}\n";
    auto r = RunLaminar("rollout --recipe " + (dir / "model.yaml").string() +
                        " --rank 1 --coordinator " + nobody);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("no coordinator answered at " + nobody), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("rollout/1"), std::string::npos) << r.err;
  }
}

// Roles started with other cluster overrides than the manager's are refused, not mixed.
TEST(ClusterCliTest, ARoleWithAnotherLayoutIsRefused) {
  const std::string model = TinyModel();
  const std::string tok = TinyModel();
  const fs::path dir = TempDir("cluster_layout");
  const std::string keys = (dir / "run.keys").string();
  ASSERT_EQ(RunLaminar("keys " + keys).exit_code, 0);
  const std::string recipe = WriteClusterRecipe(dir, model, tok, keys);
  const std::string coordinator = "tcp://127.0.0.1:" + std::to_string(FreePort());
  Process manager = StartRole(dir, recipe, "manager", 0, coordinator);
  ReadyLine(&manager, dir / "manager0.log");
  auto r = RunLaminar("relay --recipe " + recipe + " --rank 0 --coordinator " + coordinator +
                      " cluster.nodes=1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("has another cluster layout"), std::string::npos) << r.err;
  // A second manager on the same coordinator port cannot start.
  auto second = RunLaminar("manager --recipe " + recipe + " --coordinator " + coordinator);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find(coordinator), std::string::npos) << second.err;
}

TEST(ClusterCliTest, ClusterPlanPlacesEveryRoleInstance) {
  const fs::path dir = TempDir("cluster_plan");
  std::ofstream(dir / "recipe.yaml") << "model: {path: m}\ndata: {path: d}\n"
                                     << "rollout: {num_workers: 5}\n"
                                     << "cluster: {nodes: 3, rollout_nodes: 2}\n";
  const std::string recipe = (dir / "recipe.yaml").string();
  auto r = RunLaminar("cluster-plan --recipe " + recipe);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plan = nlohmann::json::parse(r.out);
  EXPECT_EQ(plan["nodes"], 3);
  EXPECT_EQ(plan["coordinator_port"], 29555);
  std::vector<std::string> got;
  for (const auto& role : plan["roles"]) {
    got.push_back(role["role"].get<std::string>() + " " + std::to_string(role["rank"].get<int>()) +
                  " " + std::to_string(role["node"].get<int>()));
  }
  // The head keeps the actor's side; nodes 1 and 2 get a relay each and the rollouts, evenly.
  const std::vector<std::string> want = {"manager 0 0", "relay 0 0",   "actor 0 0",   "relay 1 1",
                                         "relay 2 2",   "rollout 0 1", "rollout 1 1", "rollout 2 1",
                                         "rollout 3 2", "rollout 4 2"};
  EXPECT_EQ(got, want);
  // rollout_nodes 0: every node, the head included, runs rollouts. The run's files go under the
  // run folder, except those the recipe places itself; its checkpoint folder holds one.
  const fs::path run = dir / "run";
  fs::create_directories(run / "checkpoints");
  std::ofstream(run / "checkpoints" / "latest") << "step_1\n";
  auto all = RunLaminar("cluster-plan --recipe " + recipe +
                        " cluster.rollout_nodes=0 cluster.coordinator_port=4000 --format lines " +
                        "run.faults=/elsewhere/faults.jsonl --run-dir " + run.string());
  ASSERT_EQ(all.exit_code, 0) << all.err;
  const std::string folder = run.string();
  EXPECT_EQ(all.out,
            "nodes 3\ncoordinator_port 4000\nconnect_timeout_s 600\nkeys_needed 1\nrun_dir " +
                folder + "\noverride actor.metrics=" + folder +
                "/metrics.jsonl\noverride actor.progress_file=" + folder +
                "/progress.json\noverride actor.checkpoint_dir=" + folder +
                "/checkpoints\noverride actor.export_dir=" + folder +
                "/model\noverride actor.tensorboard_dir=" + folder +
                "/tensorboard\noverride actor.trajectory_log=" + folder +
                "/trajectories.jsonl\ncheckpoint 1\nrole manager 0 0\n"
                "role relay 0 0\nrole actor 0 0\nrole relay 1 1\nrole relay 2 2\nrole rollout 0 0\n"
                "role rollout 1 0\nrole rollout 2 1\nrole rollout 3 1\nrole rollout 4 2\n");
  // Actor ranks go to the nodes before the rollout nodes (the head alone here), or spread over
  // every node when all of them run rollouts.
  auto ranks = [&](const std::string& overrides) {
    auto plan4 = RunLaminar("cluster-plan --recipe " + recipe + " actor.world_size=4 " + overrides);
    EXPECT_EQ(plan4.exit_code, 0) << plan4.err;
    std::vector<int> nodes;
    const auto parsed = nlohmann::json::parse(plan4.exit_code == 0 ? plan4.out : "{}");
    for (const auto& role : parsed.value("roles", nlohmann::json::array())) {
      if (role["role"] == "actor") nodes.push_back(role["node"].get<int>());
    }
    return nodes;
  };
  EXPECT_EQ(ranks(""), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(ranks("cluster.rollout_nodes=1"), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(ranks("cluster.rollout_nodes=0"), (std::vector<int>{0, 0, 1, 2}));
  auto too_many = RunLaminar("cluster-plan --recipe " + recipe + " cluster.rollout_nodes=4");
  EXPECT_EQ(too_many.exit_code, 1);
  EXPECT_NE(too_many.err.find("cluster.rollout_nodes: 4 is more than cluster.nodes 3"),
            std::string::npos)
      << too_many.err;
  auto too_few = RunLaminar("cluster-plan --recipe " + recipe + " rollout.num_workers=1");
  EXPECT_EQ(too_few.exit_code, 1);
  EXPECT_NE(too_few.err.find("rollout.num_workers: 1 rollouts for 2 rollout nodes"),
            std::string::npos)
      << too_few.err;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ClusterCliTest, LaunchSlurmDryRunStartsEachRoleOnItsNode) {
  const fs::path dir = TempDir("cluster_slurm");
  std::ofstream(dir / "recipe.yaml") << "model: {path: m}\ndata: {path: d}\n"
                                     << "rollout: {num_workers: 3}\n"
                                     << "cluster: {nodes: 3, rollout_nodes: 2}\n";
  const std::string script = std::string(LAMINAR_SOURCE_DIR) + "/scripts/launch_slurm.sh";
  const std::string env = "LAMINAR_BIN=" + std::string(LAMINAR_BINARY) + " ";
  const std::string recipe = (dir / "recipe.yaml").string();
  auto r = RunBash("unset SLURM_CONF; " + env + "SLURM_JOB_NODELIST=\"gpu[08-10],spare\" " +
                   script + " --dry-run " + "--run-dir " + (dir / "run").string() + " " + recipe +
                   " actor.lr=2e-6");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string tail = " --recipe " + recipe + " --rank ";
  // The run's files go under the run folder, as laminar run puts them; the recipe names no keys:
  // the launcher passes the run folder's (made only for a real launch).
  const fs::path run = dir / "run";
  std::string coordinator = " --coordinator tcp://gpu08:29555 actor.lr=2e-6";
  for (const auto& [key, file] : std::vector<std::pair<std::string, std::string>>{
           {"actor.metrics", "metrics.jsonl"},
           {"actor.progress_file", "progress.json"},
           {"actor.checkpoint_dir", "checkpoints"},
           {"actor.export_dir", "model"},
           {"run.faults", "faults.jsonl"},
           {"actor.tensorboard_dir", "tensorboard"},
           {"actor.trajectory_log", "trajectories.jsonl"}}) {
    coordinator += " " + key + "=" + (run / file).string();
  }
  coordinator += " run.keys=" + (run / "run.keys").string();
  auto srun = [&](const std::string& node, const std::string& role, int rank) {
    return "srun --nodes=1 --ntasks=1 --overlap -w " + node + " --job-name laminar-" + role + "-" +
           std::to_string(rank) + " " + LAMINAR_BINARY + " " + role + tail + std::to_string(rank) +
           coordinator;
  };
  const std::vector<std::string> want = {srun("gpu08", "manager", 0), srun("gpu08", "relay", 0),
                                         srun("gpu08", "actor", 0),   srun("gpu09", "relay", 1),
                                         srun("gpu10", "relay", 2),   srun("gpu09", "rollout", 0),
                                         srun("gpu09", "rollout", 1), srun("gpu10", "rollout", 2)};
  EXPECT_EQ(SplitLines(r.out), want) << r.out;
  EXPECT_FALSE(fs::exists(dir / "run" / "run.keys"));
  // An allocation smaller than the plan is refused before anything starts.
  auto small =
      RunBash(env + "SLURM_JOB_NODELIST=\"gpu[08-09]\" " + script + " --dry-run " + recipe);
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_NE(small.err.find("cluster.nodes is 3 but the allocation has 2 node(s)"),
            std::string::npos)
      << small.err;
  auto outside =
      RunBash("unset SLURM_JOB_NODELIST SLURM_NODELIST; " + env + script + " --dry-run " + recipe);
  EXPECT_EQ(outside.exit_code, 1);
  EXPECT_NE(outside.err.find("run inside sbatch or salloc"), std::string::npos) << outside.err;
  auto syntax = RunBash("bash -n " + script);
  EXPECT_EQ(syntax.exit_code, 0) << syntax.err;
}

// The Kubernetes example parses, and its containers' ranks are the plan of its own recipe.
TEST(ClusterCliTest, KubernetesExampleMatchesItsClusterPlan) {
  if (std::system("python3 -c 'import yaml' > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 with PyYAML is not available";
  }
  const fs::path dir = TempDir("cluster_k8s");
  const std::string manifest = std::string(LAMINAR_SOURCE_DIR) + "/scripts/k8s/laminar.yaml";
  // Writes the ConfigMap's recipe and prints "role ROLE RANK NODE" for every container, sorted,
  // with each rollout pod's ordinal K put into its shell arithmetic (pod K is node K + 1).
  std::ofstream(dir / "ranks.py") << R"py(import re, sys, yaml
docs = {d["metadata"]["name"]: d for d in yaml.safe_load_all(open(sys.argv[1]))}
open(sys.argv[2], "w").write(docs["laminar-recipe"]["data"]["recipe.yaml"])
def role_rank(command, k):
    text = re.sub(r"\$\(\((.*?)\)\)", lambda m: str(eval(m.group(1), {"K": k})), " ".join(command))
    words = text.split()
    assert "--coordinator" in words, command
    return words[words.index("laminar") + 1], int(words[words.index("--rank") + 1])
lines = []
head = docs["laminar-head"]["spec"]["template"]["spec"]
for c in head["initContainers"] + head["containers"]:
    lines.append("role %s %d 0" % role_rank(c["command"], None))
rollout = docs["laminar-rollout"]["spec"]
for k in range(rollout["replicas"]):
    for c in rollout["template"]["spec"]["containers"]:
        lines.append("role %s %d %d" % (role_rank(c["command"], k) + (k + 1,)))
print("\n".join(sorted(lines)))
)py";
  auto ranks = RunBash("python3 " + (dir / "ranks.py").string() + " " + manifest + " " +
                       (dir / "recipe.yaml").string());
  ASSERT_EQ(ranks.exit_code, 0) << ranks.err;
  auto plan =
      RunLaminar("cluster-plan --recipe " + (dir / "recipe.yaml").string() + " --format lines");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  std::vector<std::string> want;
  for (const std::string& line : SplitLines(plan.out)) {
    if (line.rfind("role ", 0) == 0) want.push_back(line);
  }
  std::sort(want.begin(), want.end());
  EXPECT_EQ(SplitLines(ranks.out), want) << ranks.out;
}

}  // namespace
}  // namespace laminar::testing
