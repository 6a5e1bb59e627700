// Multi-machine launches: the recipe's cluster: section as a plan (which role
// instance runs on which node), and the coordinator, a small rendezvous served by the manager at
// one well-known address (`--coordinator tcp://HOST:PORT`) where relays, the manager and the actor
// register their endpoints and every role looks up the peers it needs (docs/multi-machine.md).
#pragma once

#include <csignal>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "core/zmq_transport.h"

namespace laminar::launch {

// One role instance of a plan: `laminar <role> --rank <rank>` on node `node` (0 = the head).
struct ClusterRole {
  std::string role;  // manager, relay, actor, rollout
  int rank = 0;
  int node = 0;
};

// Where each role instance of a run goes, from the recipe's cluster.* keys and
// rollout.num_workers. Node 0, the head, runs the manager (which serves the coordinator), the
// actor and relay 0, the master relay that the actor publishes to. The rollout nodes are the last
// cluster.rollout_nodes nodes (0: all of them); each rollout node other than the head gets its own
// relay, chained behind the master, and the rollouts are spread evenly over the rollout nodes in
// rank order. A rollout lists its node's relay first, then the master. Data-parallel actor ranks
// (actor.world_size) are spread evenly, in rank order, over the nodes before the rollout nodes
// (over every node when all of them run rollouts): rank 0 always on the head.
struct ClusterPlan {
  int num_nodes = 1;
  int coordinator_port = 0;
  double connect_timeout_s = 0;
  double stop_grace_s = 0;
  std::vector<int> relay_node;     // [relays] node of each relay rank
  std::vector<int> rollout_node;   // [rollouts] node of each rollout rank
  std::vector<int> actor_node;     // [actor ranks] node of each actor rank
  std::vector<int> relay_of_node;  // [nodes] the relay rank on each node, -1 for none
  // Every role instance in launch order: manager, relay 0, actor 0, the other actor ranks, the
  // other relays, rollouts.
  std::vector<ClusterRole> roles;

  // {"nodes", "coordinator_port", "connect_timeout_s", "roles": [{"role","rank","node"}, ...]}.
  nlohmann::json ToJson() const;
  // A short hash of the layout; roles with another layout (other overrides) are refused.
  std::string Fingerprint() const;
};

// Errors: InvalidArgument naming the key when the layout is impossible (more rollout nodes than
// nodes, fewer rollouts than rollout nodes).
StatusOr<ClusterPlan> ClusterPlanOf(const Config& recipe);

// A tcp:// endpoint: an IPv4 address or a host name, and a port.
struct TcpAddress {
  std::string host;
  int port = 0;
  std::string ToString() const { return "tcp://" + host + ":" + std::to_string(port); }
};
// Parses "tcp://HOST:PORT" (PORT in [1, 65535]). InvalidArgument naming `text` otherwise.
StatusOr<TcpAddress> ParseTcpAddress(std::string_view text);
// "localhost" or 127.x.y.z.
bool IsLoopbackHost(std::string_view host);
// The IPv4 address of this machine's interface on the route to `to` (a UDP socket connected to it,
// then getsockname: nothing is sent), the address other machines on that network reach us at.
// 127.0.0.1 for a loopback `to`. Errors: Unavailable when `to` does not resolve or has no route.
StatusOr<std::string> RouteAddress(const TcpAddress& to);
// `bound` ("tcp://0.0.0.0:5555", what a socket bound to every interface reports) with the
// wildcard host replaced by `host`; other endpoints unchanged.
std::string AdvertisedEndpoint(const std::string& bound, const std::string& host);

// The rendezvous server (the manager runs it). Request/reply over ZeroMQ, one JSON object each:
//   {"protocol": 1, "plan": FINGERPRINT, "from": "rollout/3", "op": "ping"|"register"|"lookup",
//    "role": "relay", "rank": 1, "info": {...}}       (role, rank, info as the op needs)
//   -> {"ok": true, "found": bool, "info": {...}, "registered": ["manager/0", ...]}
//   or {"ok": false, "error": "..."} for another protocol or another plan fingerprint.
// A later registration of the same role and rank replaces the earlier one (a restarted relay).
// Thread-safe: the server thread answers requests; Register may be called from any thread.
class CoordinatorServer {
 public:
  // Binds port `address.port` on 127.0.0.1 for a loopback host, else on every interface (so the
  // name the others use, a DNS name or a Slurm node name, need not be one of ours). Errors:
  // Unavailable naming the endpoint when it cannot bind (the port is taken).
  static StatusOr<std::unique_ptr<CoordinatorServer>> Start(const TcpAddress& address,
                                                            std::string plan_fingerprint);
  ~CoordinatorServer();
  // Registers a role instance of this process (the manager registers itself without a socket).
  void Register(const std::string& role, int rank, nlohmann::json info);
  // The info `role` `rank` registered, if it has.
  std::optional<nlohmann::json> Find(const std::string& role, int rank);
  const std::string& endpoint() const { return server_->endpoint(); }

 private:
  CoordinatorServer() = default;
  std::string Handle(std::string_view request);

  std::string fingerprint_;
  std::mutex mu_;
  std::map<std::pair<std::string, int>, nlohmann::json> registry_;
  std::unique_ptr<ZmqReplyServer> server_;
};

// A role's side of the rendezvous. Every call keeps retrying, while the coordinator does not
// answer yet or the peer asked for has not registered, for up to `timeout_s` (each call: a role
// may load a model between calls), then fails with Unavailable naming the coordinator, what was
// missing and cluster.connect_timeout_s. `stopped` is polled between tries (a stop signal);
// when it returns true the call returns Aborted. A refusal (another plan) is FailedPrecondition at
// once. Not thread-safe.
class CoordinatorClient {
 public:
  CoordinatorClient(TcpAddress coordinator, std::string plan_fingerprint, std::string from,
                    double timeout_s, std::function<bool()> stopped);
  ~CoordinatorClient();
  // Waits until the coordinator answers.
  Status WaitReady();
  Status Register(const std::string& role, int rank, nlohmann::json info);
  // The info `role` `rank` registered, once it has.
  StatusOr<nlohmann::json> Lookup(const std::string& role, int rank);
  // One lookup without waiting: the info, or nullopt when `role` `rank` has not registered or the
  // coordinator does not answer one call.
  std::optional<nlohmann::json> Peek(const std::string& role, int rank);
  const TcpAddress& coordinator() const { return coordinator_; }

 private:
  // Sends `request` until the coordinator answers it with ok and `done(reply)`; `what` names the
  // wait in the error.
  StatusOr<nlohmann::json> CallUntil(nlohmann::json request, const std::string& what,
                                     const std::function<bool(const nlohmann::json&)>& done);

  TcpAddress coordinator_;
  std::string fingerprint_;
  std::string from_;
  double timeout_s_;
  std::function<bool()> stopped_;
  std::unique_ptr<ZmqRequestClient> client_;
};

// For `laminar ROLE --rank RANK --coordinator ENDPOINT`: checks that `plan` has that role instance
// and returns a client that speaks as "ROLE/RANK" with the plan's connect timeout. Errors:
// InvalidArgument naming --rank (no such instance in the plan) or --coordinator (not
// tcp://HOST:PORT).
StatusOr<std::unique_ptr<CoordinatorClient>> JoinCluster(const ClusterPlan& plan,
                                                         const std::string& role, int rank,
                                                         const std::string& coordinator,
                                                         std::function<bool()> stopped);

// This process as another process on the same machine can tell it apart: {"host", "pid",
// "pid_ns" (the pid namespace's inode), "start_ticks" (its start time, /proc/PID/stat)}. The
// actor registers it at the coordinator for OutliveActor.
nlohmann::json ProcessIdentity();

// For a role that the actor's last checkpoint needs (the manager for its snapshot, the master
// relay for a version being published), stopped while the actor may still run: when `actor` (the
// actor's registration, holding its ProcessIdentity) names a live process that this one can see
// (the same host and pid namespace, the same start time: not a reused pid), waits until it has
// exited (or is a zombie) or `grace_s` has passed, logging the wait as `who`. Returns at once
// otherwise (no registration, another host or container).
void OutliveActor(const std::optional<nlohmann::json>& actor, double grace_s,
                  const std::string& who);

// A `stopped` function for CoordinatorClient: takes SIGTERM or SIGINT if one is pending in
// `signals` (blocked in every thread, as the role commands do).
std::function<bool()> StopSignalPending(sigset_t signals);

}  // namespace laminar::launch
