// `laminar relay`: one relay process (docs/architecture.md). Without --master it is the master
// relay, the chain's head that the actor publishes to; with --master it joins that master's chain.
// With --recipe R --rank K --coordinator tcp://HEAD:PORT (a multi-machine launch, launch/cluster.h)
// relay 0 is the master and relay K > 0 finds the master there and joins its chain; each
// registers its control endpoint for the actor and the rollouts to look up. Prints one JSON line
// on stdout once it serves ({"id","control","bulk","host","pid"}), then runs until SIGTERM or
// SIGINT, when it stops cleanly and removes its shared-memory segments.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "core/bulk_transport.h"
#include "core/logging.h"
#include "core/zmq_transport.h"
#include "launch/cluster.h"
#include "launch/run_keys.h"
#include "recipe/recipe.h"
#include "relay/relay.h"

namespace laminar::cli {
namespace {

struct RelayArgs {
  std::string id = "relay";
  std::string listen = "tcp://127.0.0.1:*";
  std::string master;
  std::string transport = "zmq";
  std::string host = "127.0.0.1";
  std::string topology = "chain";
  std::string shm_prefix;
  std::string keys;  // run.keys: CURVE for every connection (core/zmq_transport.h)
  int ping_interval_ms = 200;
  int dead_after = 3;
  int join_timeout_ms = 5000;
  double fault_corrupt = 0;
  double fault_drop = 0;
  // A multi-machine launch (launch/cluster.h).
  std::string recipe;
  std::vector<std::string> overrides;
  int rank = 0;
  std::string coordinator;
  double stop_grace_s = 0;  // with --coordinator: the recipe's cluster.stop_grace_s
  bool id_set = false, listen_set = false, host_set = false;
};

int Fail(const std::string& message) { return CommandFail("relay", message); }

// With --coordinator: fills in the master, the id and the addresses of relay `a->rank` from the
// recipe's cluster plan, and returns the client to register with once the relay serves.
StatusOr<std::unique_ptr<launch::CoordinatorClient>> JoinAsRelay(RelayArgs* a,
                                                                 sigset_t stop_signals, int* node) {
  if (a->recipe.empty()) {
    return InvalidArgumentError("--coordinator needs --recipe (its cluster: section)");
  }
  LAMINAR_ASSIGN_OR_RETURN(Config recipe, recipe::LoadRecipe(a->recipe, a->overrides));
  LAMINAR_RETURN_IF_ERROR(launch::SecureRunTransport(recipe));
  LAMINAR_ASSIGN_OR_RETURN(launch::ClusterPlan plan, launch::ClusterPlanOf(recipe));
  LAMINAR_ASSIGN_OR_RETURN(auto client,
                           launch::JoinCluster(plan, "relay", a->rank, a->coordinator,
                                               launch::StopSignalPending(stop_signals)));
  *node = plan.relay_node[static_cast<size_t>(a->rank)];
  a->stop_grace_s = plan.stop_grace_s;
  if (a->rank == 0) {
    LAMINAR_RETURN_IF_ERROR(client->WaitReady());
  } else {
    LAMINAR_ASSIGN_OR_RETURN(nlohmann::json master, client->Lookup("relay", 0));
    a->master = master["control"].get<std::string>();
  }
  if (!a->host_set) {
    // The coordinator answered, so its name resolves: our address on the route to it is one
    // the other machines reach.
    LAMINAR_ASSIGN_OR_RETURN(a->host, launch::RouteAddress(client->coordinator()));
  }
  if (!a->listen_set) a->listen = "tcp://" + a->host + ":*";
  if (!a->id_set) a->id = "relay-" + std::to_string(a->rank);
  return client;
}

int Run(RelayArgs a) {
  // Block the stop signals before any thread starts, so that only sigwait below takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (!a.keys.empty()) {
    auto keys = ReadCurveKeys(a.keys);
    if (!keys.ok()) return Fail("--keys: " + std::string(keys.status().message()));
    if (Status s = EnableCurve(*keys); !s.ok()) return Fail(std::string(s.message()));
  }
  std::unique_ptr<launch::CoordinatorClient> coordinator;
  int node = 0;
  if (!a.coordinator.empty()) {
    auto client = JoinAsRelay(&a, stop_signals, &node);
    if (!client.ok()) return Fail(std::string(client.status().message()));
    coordinator = std::move(*client);
  }
  relay::RelayOptions o;
  o.id = a.id;
  o.control_endpoint = a.listen;
  o.master_endpoint = a.master;
  o.bulk_kind = a.transport;
  o.host = a.host;
  o.shm_prefix = a.shm_prefix;
  o.ping_interval_ms = a.ping_interval_ms;
  o.ping_timeout_ms = std::max(4 * a.ping_interval_ms, 200);
  o.dead_after_failures = a.dead_after;
  o.join_timeout_ms = a.join_timeout_ms;
  auto topology = relay::ParseTopology(a.topology);
  if (!topology.ok()) return Fail(topology.status().message());
  o.topology = *topology;
  if (a.fault_corrupt > 0 || a.fault_drop > 0) {
    auto inner = CreateBulkTransport(a.transport, a.host);
    if (!inner.ok()) return Fail(inner.status().message());
    o.transport = std::make_unique<FaultyTransport>(
        std::move(*inner), FaultOptions{.drop_probability = a.fault_drop,
                                        .corrupt_probability = a.fault_corrupt,
                                        .seed = static_cast<uint64_t>(getpid())});
  }
  auto r = relay::Relay::Start(std::move(o));
  if (!r.ok()) return Fail(r.status().message());
  const auto& info = (*r)->info();
  if (coordinator) {
    const std::string control = launch::AdvertisedEndpoint(info.control_endpoint(), a.host);
    Status st = coordinator->Register(
        "relay", a.rank, {{"control", control}, {"host", info.host()}, {"node", node}});
    if (!st.ok()) return Fail(std::string(st.message()));
    LAMINAR_LOG(INFO, RELAY) << a.id << " (relay " << a.rank << ", node " << node << ") registered "
                             << control << " at the coordinator " << a.coordinator
                             << (a.master.empty() ? "" : "; master " + a.master);
  }
  nlohmann::json ready = {{"id", info.id()},
                          {"control", info.control_endpoint()},
                          {"bulk", info.bulk_address()},
                          {"host", info.host()},
                          {"pid", getpid()},
                          {"master", (*r)->is_master()}};
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  if (coordinator && a.rank == 0)
    launch::OutliveActor(coordinator->Peek("actor", 0), a.stop_grace_s, a.id);
  (*r)->Stop();
  return 0;
}

std::function<int()> SetupRelay(CLI::App* app) {
  auto a = std::make_shared<RelayArgs>();
  CLI::Option* coordinator = app->add_option(
      "--coordinator", a->coordinator,
      "tcp://HEAD:PORT of a multi-machine launch: relay --rank 0 is the master, the others find "
      "it there (needs --recipe)");
  app->add_option("--recipe", a->recipe, "with --coordinator: the run's recipe (its cluster:)");
  app->add_option("overrides", a->overrides, "with --recipe: dotted overrides");
  app->add_option("--rank", a->rank, "with --coordinator: this relay's place (0: the master)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--id", a->id, "this relay's name in logs and in the master's chain");
  app->add_option("--listen", a->listen,
                  "control endpoint to bind (ZeroMQ; tcp://HOST:* picks a free port)");
  app->add_option("--master", a->master,
                  "the master relay's control endpoint; without it this relay is the master")
      ->excludes(coordinator);
  app->add_option("--transport", a->transport, "bulk transport for weight chunks")
      ->check(CLI::IsMember({"ucx", "zmq"}));
  app->add_option("--host", a->host,
                  "address other machines reach this relay's bulk plane at (with --coordinator "
                  "by default this machine's address on the route to the coordinator)");
  app->add_option("--topology", a->topology,
                  "master only: chain (pipelined, Laminar) or star (master sends to each relay)")
      ->check(CLI::IsMember({"chain", "star"}));
  app->add_option("--keys", a->keys,
                  "the run's CURVE key file (`laminar keys FILE`; with --recipe, its run.keys)");
  app->add_option("--shm-prefix", a->shm_prefix,
                  "shared-memory names /PREFIX-vN (default laminar-ID-PID)");
  app->add_option("--ping-interval-ms", a->ping_interval_ms,
                  "the master pings each relay this often; a relay not pinged for 15 intervals "
                  "checks that it is still in the chain")
      ->check(CLI::Range(10, 60000));
  app->add_option("--dead-after", a->dead_after,
                  "master only: missed pings before a relay leaves the chain")
      ->check(CLI::Range(1, 100));
  app->add_option("--join-timeout-ms", a->join_timeout_ms,
                  "how long to keep trying to reach the master before giving up")
      ->check(CLI::Range(10, 600000));
  app->add_option("--fault-corrupt", a->fault_corrupt,
                  "testing: probability that a sent chunk has a byte flipped")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--fault-drop", a->fault_drop, "testing: probability that a sent message is lost")
      ->check(CLI::Range(0.0, 1.0));
  return [a, app] {
    a->id_set = app->count("--id") > 0;
    a->listen_set = app->count("--listen") > 0;
    a->host_set = app->count("--host") > 0;
    return Run(*a);
  };
}

LAMINAR_REGISTER_COMMAND("relay", "run a relay (the master without --master) of the weight tier",
                         SetupRelay);

}  // namespace
}  // namespace laminar::cli
