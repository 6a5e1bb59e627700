// Relay-tier benchmarks (`laminar bench broadcast|publish`), docs/architecture.md and Laminar §4.2:
// - broadcast: one version of B bytes from the actor's publisher to N relay processes on this
//   machine, down the pipelined chain and by the naive star (the master sends to each relay),
//   each divided by one point-to-point transfer of the same bytes (publisher -> master relay,
//   same code path) measured in the same run;
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
