// The rollout manager process's server (docs/architecture.md): ManagerState
// behind a ZeroMQ request/reply endpoint (proto ManagerRequest/ManagerReply), with the mode's
// hand-out rule (sync, one_step_off, async), dead-rollout expiry, repack rounds (PlanRepack over
// the rollouts' heartbeats; orders go to sources in heartbeat replies, exported samples to their
// destination the same way) and the metrics merged into the actor's step line: manager/*,
// repack/*, rollout/kv_util_{mean,peak}, rollouter/idle_ratio (share of heartbeats from idle
// rollouts) and rollout/version_spread_max (newest minus oldest version held by live rollouts).
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/fault_log.h"
#include "core/mutex.h"
#include "core/status.h"
#include "core/zmq_transport.h"
#include "proto/control.pb.h"
#include "rollout/manager/manager_state.h"
#include "rollout/manager/repack.h"

namespace laminar::manager {

enum class RunMode { kSync, kOneStepOff, kAsync };
// "sync", "one_step_off", "async"; InvalidArgument naming the value otherwise.
StatusOr<RunMode> ParseRunMode(std::string_view name);

struct ManagerServerOptions {
  std::string endpoint = "tcp://127.0.0.1:*";
  RunMode mode = RunMode::kAsync;
  // B, the actor's groups per step. sync hands out the groups of batch b only to rollouts holding
  // version >= b (so every group of a batch is on-policy); one_step_off to version >= b - 1;
  // async to any version.
  int32_t groups_per_step = 4;
  double heartbeat_timeout_s = 5;  // a rollout silent this long is dead
  rollout::RepackConfig repack;
  double repack_interval_s = 5;  // also right after each new version (docs/architecture.md)
  // The faults the manager sees, each naming the rollout and its host (core/fault_log.h): a hang
  // (missed heartbeats), non-finite logits that ended a response, a straggler (a rollout whose
  // rate of forwarded tokens per running sample falls below a third of the median of the other
  // busy rollouts').
  FaultLog faults;
  Status Validate() const;
};

// Thread-safe: the server thread handles requests; the accessors lock.
class ManagerServer {
 public:
  // Errors: the options' or the state's Create errors; Unavailable when the endpoint cannot bind.
  static StatusOr<std::unique_ptr<ManagerServer>> Start(
      std::shared_ptr<const PromptDataset> dataset, ManagerConfig config,
      ManagerServerOptions options);
  ~ManagerServer();

  const std::string& endpoint() const { return server_->endpoint(); }
  // The state's metrics plus the server's (repack/*, rollout/kv_util_*, rollouter/idle_ratio).
  std::map<std::string, double> Metrics() const LAMINAR_EXCLUDES(mu_);
  int64_t actor_version() const LAMINAR_EXCLUDES(mu_);
  // Handles one encoded request; what the server thread runs (public for tests).
  std::string Handle(std::string_view request, std::string_view peer) LAMINAR_EXCLUDES(mu_);
  void Stop();

 private:
  ManagerServer(std::unique_ptr<ManagerState> state, ManagerServerOptions options);
  double Now() const;
  // The reply for one decoded request (the lock is held).
  proto::ManagerReply Dispatch(const proto::ManagerRequest& request, double now)
      LAMINAR_REQUIRES(mu_);
  void OnWork(const proto::WorkRequest& work, double now, proto::ManagerReply* reply)
      LAMINAR_REQUIRES(mu_);
  void OnHeartbeat(const proto::Heartbeat& heartbeat, double now, proto::ManagerReply* reply)
      LAMINAR_REQUIRES(mu_);
  void OnMigrated(const proto::MigratedBatch& batch) LAMINAR_REQUIRES(mu_);
  void OnTakeBatch(const proto::TakeBatchRequest& take, proto::ManagerReply* reply)
      LAMINAR_REQUIRES(mu_);
  // One repack round over the rollouts' last heartbeats.
  void Repack(double now) LAMINAR_REQUIRES(mu_);
  // Moves the repack orders and imports waiting for `rollout_id` (the request's sender) into
  // `reply`: whatever a rollout calls next carries them, not only its heartbeat.
  void DeliverOrders(const std::string& rollout_id, proto::ManagerReply* reply)
      LAMINAR_REQUIRES(mu_);
  void ExpireDead(double now) LAMINAR_REQUIRES(mu_);
  // The host rollout `id` named in its heartbeats ("unknown" before the first).
  std::string HostOf(const std::string& id) const LAMINAR_REQUIRES(mu_);
  // Records `fault` (seen by the manager) in options_.faults; a failure is logged.
  void RecordFault(Fault fault) const;
  // Updates the generation rate of heartbeat.id() and records stragglers that recovered.
  void TrackStragglers(const proto::Heartbeat& heartbeat, double now) LAMINAR_REQUIRES(mu_);
  // Records the straggler `id` as not recovered (it died, or the manager stops), if it was one.
  void EndStraggler(const std::string& id) LAMINAR_REQUIRES(mu_);

  ManagerServerOptions options_;
  std::chrono::steady_clock::time_point start_;
  mutable Mutex mu_;  // guards everything below but server_
  std::unique_ptr<ManagerState> state_ LAMINAR_GUARDED_BY(mu_);
  int64_t actor_version_ LAMINAR_GUARDED_BY(mu_) = -1;
  double last_repack_s_ LAMINAR_GUARDED_BY(mu_) = 0;
  bool repack_due_ LAMINAR_GUARDED_BY(mu_) = false;  // a new version arrived since the last round
  std::map<std::string, std::vector<proto::RunningSample>> running_
      LAMINAR_GUARDED_BY(mu_);  // last heartbeat's
  // Groups handed to each rollout (work or imports), with how many of its heartbeats in a row
  // have not listed them. A group a live rollout does not run (a reply it never got, trajectories
  // it could not send) is re-issued after kOrphanHeartbeats such heartbeats, so a prompt handed
  // out is always completed or handed out again (docs/architecture.md).
  std::map<std::string, std::map<std::string, int>> placed_ LAMINAR_GUARDED_BY(mu_);
  // Re-issues the groups placed on heartbeat.id() that it stopped running.
  void ReissueOrphans(const proto::Heartbeat& heartbeat) LAMINAR_REQUIRES(mu_);
  std::map<std::string, int32_t> block_size_ LAMINAR_GUARDED_BY(mu_);
  std::map<std::string, int64_t> kv_at_last_round_
      LAMINAR_GUARDED_BY(mu_);  // KV tokens used at the last repack round
  std::map<std::string, std::vector<proto::RepackCommand>> orders_
      LAMINAR_GUARDED_BY(mu_);  // per source
  std::map<std::string, std::vector<proto::MigratedSample>> imports_
      LAMINAR_GUARDED_BY(mu_);  // per destination
  // Metrics since the last batch.
  struct Window {
    double kv_util_sum = 0, kv_util_peak = 0;
    int64_t heartbeats = 0, idle_heartbeats = 0;
    int64_t version_spread_max = 0;  // max over heartbeats of (newest - oldest version held)
    std::map<std::string, double> counter_growth;  // heartbeat counters' growth in the window
  } window_ LAMINAR_GUARDED_BY(mu_);
  // The heartbeat counters (relay/pull_wait_s, ...) last seen from each rollout, and their growth
  // over the run (a restarted rollout counts from 0 again); the totals also hold
  // reward/{error,timeout}_count, counted from the trajectories' reward outcomes.
  std::map<std::string, std::map<std::string, double>> last_counters_ LAMINAR_GUARDED_BY(mu_);
  std::map<std::string, double> counter_totals_ LAMINAR_GUARDED_BY(mu_);
  // Run totals of repack/* and manager/orphans_reissued.
  std::map<std::string, double> totals_ LAMINAR_GUARDED_BY(mu_);
  // Each rollout's host (from its heartbeats) and generation rate, for fault records.
  std::map<std::string, std::string> hosts_ LAMINAR_GUARDED_BY(mu_);
  // Rollouts declared hung, by when: one that comes back having sent requests that got no answer
  // was behind a lost link, and its record is reclassified.
  std::map<std::string, double> declared_hung_ LAMINAR_GUARDED_BY(mu_);
  // The newest version of the trajectories each rollout sent, in the order they came.
  std::map<std::string, int64_t> newest_sent_ LAMINAR_GUARDED_BY(mu_);
  struct GenerationRate {
    // rollout/tokens_forwarded and relay/pull_wait_s at the last interval's end, and when it was
    double last_tokens = -1, last_pull_s = 0, last_s = 0;
    double running_sum = 0;  // the heartbeats' running samples over this interval, summed
    int64_t running_count = 0;
    double rate = 0;  // forwarded tokens per second (not pulling) per running sample, last interval
    bool busy = false;           // it held groups at its last heartbeat
    double busy_rate = 0;        // the rate of the last interval it held groups
    std::deque<double> history;  // busy rates of its last intervals neither slow nor straggling
    double busy_s = 0;           // when that was (manager clock; 0: never)
    double straggling_since_unix_s = 0;  // 0: not straggling
    int streak = 0;                      // intervals in a row toward a change of state
    double first_slow_unix_s = 0;        // the first slow interval of the streak
    std::string detail;
  };
  std::map<std::string, GenerationRate> rates_ LAMINAR_GUARDED_BY(mu_);
  // The busy rates of the rollouts that held work within 4 heartbeat timeouts, sorted, and each
  // one's value in it: what a straggler is measured against. Rebuilt for every interval with few
  // rollouts, at most every 100 ms with many (each rollout's rate changes every 0.5 s or more).
  struct BusyRates {
    std::vector<double> sorted;
    std::map<std::string, double> of;
    double built_s = -1;
  } busy_rates_ LAMINAR_GUARDED_BY(mu_);
  // The median of the busy rates of every rollout but `id` (nullopt: no other).
  std::optional<double> MedianOfOthers(const std::string& id, double now) LAMINAR_REQUIRES(mu_);
  // When ExpireDead next scans (ManagerState::ExpireDead's next_check_s).
  double next_expiry_check_s_ LAMINAR_GUARDED_BY(mu_) = 0;
  // Each rollout's version in its last heartbeat (the version spread is computed when one changes).
  std::map<std::string, int64_t> heartbeat_version_ LAMINAR_GUARDED_BY(mu_);
  std::unique_ptr<ZmqReplyServer> server_;
};

}  // namespace laminar::manager
