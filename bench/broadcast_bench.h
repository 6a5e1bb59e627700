// Relay-tier benchmarks (`laminar bench broadcast|publish`), docs/architecture.md and Laminar §4.2:
// - broadcast: one version of B bytes from the actor's publisher to N relay processes on this
//   machine, down the pipelined chain and by the naive star (the master sends to each relay),
//   each divided by one point-to-point transfer of the same bytes (publisher -> master relay,
//   same code path) measured in the same run;
// - broadcast across hosts: the same against relays already running one per host (network
//   namespaces with shaped links, bench/relay_hosts.sh), against the link's own transfer time,
//   with the rollouts' pulls from their host's relay timed by `laminar bench pull` processes;
// - publish: the actor's stall (the copy into host memory) for a real model's weights.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "relay/wire.h"

namespace laminar::bench {

struct BroadcastConfig {
  std::string laminar_binary;     // spawned as `laminar relay` processes
  std::string transport = "zmq";  // "zmq" or "ucx"
  uint64_t bytes = 500'000'000;
  uint64_t chunk_bytes = uint64_t{4} << 20;
  std::vector<int> relay_counts = {1, 2, 4, 8};
  int repeats = 3;
  std::string log_dir;  // the relays' logs (<topology>-<id>.log); empty: discarded
};

struct BroadcastRow {
  std::string transport;
  std::string topology;  // "p2p", "chain" or "star"
  int relays = 0;        // relays besides the master (0 for p2p)
  double median_s = 0;   // from the end of Publish until every relay holds the version
  double spread_s = 0;   // max - min over repeats
  double ratio_to_p2p = 0;
  // CPU seconds of all processes per broadcast (relays' start-up included). On a machine with
  // fewer cores than relays, cpu_s / cores bounds the time from below whatever the topology.
  double cpu_s = 0;
};

// Runs p2p once, then chain and star for each relay count. Errors: a relay process that does
// not start, or a broadcast that does not finish within a minute.
StatusOr<std::vector<BroadcastRow>> BenchBroadcast(const BroadcastConfig& config);

// Relays that run elsewhere: the master (on this host) and `relays` more that joined its chain.
struct HostsBroadcastConfig {
  std::string master;  // the master relay's control endpoint
  int relays = 1;      // relays besides the master to wait for in its chain
  std::string transport = "zmq";
  std::string host;  // this host's address (the publisher's bulk plane)
  uint64_t bytes = 128'000'000;
  uint64_t chunk_bytes = uint64_t{1} << 20;
  int repeats = 2;
  double link_bits_per_s = 0;          // each host's shaped rate: one transfer takes bytes*8/rate
  std::vector<std::string> pull_logs;  // `laminar bench pull --out` files, one per rollout
  int timeout_s = 120;                 // for the chain to form, and for each version
};

struct HostsBroadcastRow {
  int relays = 0;
  double median_s = 0;  // from the end of Publish until every relay in the chain holds it
  double spread_s = 0;
  double link_s = 0;  // bytes*8 / link_bits_per_s (0 when the rate is not given)
  double ratio_to_link = 0;
  double busy_cores = 0;     // the machine's busy cores (/proc/stat) during the broadcasts
  int pulls = 0;             // versions pulled by the rollouts
  double pull_median_s = 0;  // a rollout's pull, from seeing a complete version to holding it
  double pull_max_s = 0;
  double held_max_s = 0;  // from the end of Publish until the last rollout holds the version
};

// Publishes `repeats` versions to the master and times each until every relay holds it, then
// waits (up to timeout_s) for each pull log to list it. Errors: the chain not formed, a
// version not everywhere within timeout_s, a pull log that never lists a version.
StatusOr<HostsBroadcastRow> BenchBroadcastAcrossHosts(const HostsBroadcastConfig& config);

// `laminar bench pull`: a rollout's weight loads from its host's relay.
struct PullConfig {
  std::string relay;  // control endpoint of this host's relay
  std::string host;   // this host's address (for a bulk pull)
  std::string transport = "zmq";
  int versions = 1;  // returns once it holds this version (the driver numbers them from 1)
  int timeout_s = 300;
  std::string out;  // JSON lines: {"version", "seen_s", "pulled_s", "source", "bytes"}
};

// Polls the relay every 10 ms and pulls each newer complete version; times are seconds of
// CLOCK_MONOTONIC, which every process on the machine shares. Errors: timeout_s passing first,
// an unwritable `out`.
Status RunPuller(const PullConfig& config);

struct PublishStall {
  uint64_t bytes = 0;
  double median_stall_s = 0;  // relay/publish_stall_s
  double spread_s = 0;
  double send_s = 0;  // background: until the master relay holds the version
};

// Publishes `tensors` `repeats` times to a master relay in this process.
StatusOr<PublishStall> BenchPublishStall(const std::vector<relay::TensorBytes>& tensors,
                                         const std::string& transport, int repeats);

}  // namespace laminar::bench
