// `laminar relay`: one relay process (DESIGN.md §2). Without --master it is the master relay,
// the chain's head that the actor publishes to; with --master it joins that master's chain.
// Prints one JSON line on stdout once it serves ({"id","control","bulk","host","pid"}), then runs
// until SIGTERM or SIGINT, when it stops cleanly and removes its shared-memory segments.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "core/bulk_transport.h"
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
  int ping_interval_ms = 200;
  int dead_after = 3;
  int join_timeout_ms = 5000;
  double fault_corrupt = 0;
  double fault_drop = 0;
};

int Fail(const std::string& message) { return CommandFail("relay", message); }

int Run(const RelayArgs& a) {
  // Block the stop signals before any thread starts, so that only sigwait below takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

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
  (*r)->Stop();
  return 0;
}

std::function<int()> SetupRelay(CLI::App* app) {
  auto a = std::make_shared<RelayArgs>();
  app->add_option("--id", a->id, "this relay's name in logs and in the master's chain");
  app->add_option("--listen", a->listen,
                  "control endpoint to bind (ZeroMQ; tcp://HOST:* picks a free port)");
  app->add_option("--master", a->master,
                  "the master relay's control endpoint; without it this relay is the master");
  app->add_option("--transport", a->transport, "bulk transport for weight chunks")
      ->check(CLI::IsMember({"ucx", "zmq"}));
  app->add_option("--host", a->host, "address other machines reach this relay's bulk plane at");
  app->add_option("--topology", a->topology,
                  "master only: chain (pipelined, Laminar) or star (master sends to each relay)")
      ->check(CLI::IsMember({"chain", "star"}));
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
  return [a] { return Run(*a); };
}

LAMINAR_REGISTER_COMMAND("relay", "run a relay (the master without --master) of the weight tier",
                         SetupRelay);

}  // namespace
}  // namespace laminar::cli
