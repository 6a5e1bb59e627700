// The rollout manager under load (`laminar bench manager`): R simulated rollouts, driven by a few
// client threads over the manager's real ZeroMQ endpoint, each heartbeating every interval while
// it holds a group (its samples listed as running, with KV numbers so repack rounds plan over
// them), finishing the group after a few heartbeats with its n trajectories and asking for the
// next. Reported: the round trip of the heartbeats (p50, p99, max) against the round trip of an
// empty request to a bare ZeroMQ echo server measured by the same clients in the same run (the
// transport's floor), how late the clients sent them (a manager that keeps up keeps this near 0),
// and what the manager saw: rollouts alive and declared dead, groups completed and re-issued.
#pragma once

#include <cstdint>

#include "core/status.h"

namespace laminar::bench {

struct ManagerLoadConfig {
  int rollouts = 1000;
  int client_threads = 8;  // each drives rollouts / client_threads rollouts over one socket
  double seconds = 10;     // of load, after every rollout took its first group
  int heartbeat_interval_ms = 200;
  int samples = 4;                 // n per group
  int heartbeats_per_group = 5;    // a group is finished after this many heartbeats
  double heartbeat_timeout_s = 5;  // the manager's: a rollout silent this long is dead
  bool repack = true;              // repack rounds every 5 s over every rollout's heartbeat
};

struct Percentiles {
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

struct ManagerLoadResult {
  int64_t heartbeats = 0, work_requests = 0, trajectories = 0;
  double seconds = 0;
  double offered_heartbeats_per_s = 0;  // rollouts / interval
  double heartbeats_per_s = 0;          // achieved
  Percentiles heartbeat;                // round trip of a heartbeat
  Percentiles echo;                     // round trip of an empty request to a bare echo server
  Percentiles lateness;                 // how long after its due time each heartbeat went out
  double manager_cpu_s = 0;             // CPU seconds of this process (manager and clients)
  int64_t rollouts_alive = 0, rollouts_dead = 0;
  int64_t groups_completed = 0, groups_reissued = 0, trajectories_dropped = 0;
  int64_t repack_rounds = 0;
};

// Errors: a bad config (InvalidArgument naming the field), a manager that does not start, or a
// request the manager refuses (the simulated rollouts follow the protocol, so that is a bug).
StatusOr<ManagerLoadResult> BenchManagerLoad(const ManagerLoadConfig& config);

}  // namespace laminar::bench
