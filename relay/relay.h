// A relay (docs/architecture.md; Laminar §4.2): keeps the newest complete policy version, and the
// one in flight, in shared memory on its machine; forwards each version down a pipelined chain as
// its chunks arrive (relay i sends chunk k while it receives chunk k+1); serves pulls from
// rollouts. The master relay is the chain's head: it receives versions from the actor's Publisher,
// keeps the chain (relays join it; a relay that stops answering pings is dropped and whoever still
// lacks the version gets it again along the rebuilt chain), and re-sends to relays that stall.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/bulk_transport.h"
#include "core/mutex.h"
#include "core/status.h"
#include "core/zmq_transport.h"
#include "proto/relay.pb.h"
#include "relay/chunk_assembler.h"
#include "relay/send_worker.h"
#include "relay/shm_version.h"

namespace laminar::relay {

// How the master sends a version to the other relays. kChain: down a pipelined chain (Laminar's
// design). kStar: the master sends every chunk to every relay itself (the naive baseline).
enum class Topology { kChain, kStar };
StatusOr<Topology> ParseTopology(std::string_view name);

struct RelayOptions {
  std::string id = "relay";
  std::string control_endpoint = "tcp://127.0.0.1:*";  // ZeroMQ request/reply
  std::string bulk_kind = "zmq";                       // CreateBulkTransport: "ucx" or "zmq"
  std::string host = "127.0.0.1";                      // address peers reach the bulk plane at
  std::string master_endpoint;  // the master's control endpoint; empty: this relay is the master
  Topology topology = Topology::kChain;  // master only
  std::string shm_prefix;                // segment names "/<prefix>-v<version>"; default
                                         // "laminar-<id>-<pid>"
  int ping_interval_ms = 200;            // master: liveness pings to each relay
  int ping_timeout_ms = 1000;
  int dead_after_failures = 3;  // master: consecutive failed pings before a relay is dropped
  // Missing chunks are asked for again after this long without progress (a corrupted chunk at
  // once). Not much shorter than a busy upstream's queue, or the resends only add load.
  int stall_resend_ms = 2000;
  int rebroadcast_after_ms = 3000;  // master: a relay lagging without progress gets it again
  int send_timeout_ms = 5000;
  int join_timeout_ms = 5000;   // non-master: how long to keep trying to reach the master
  size_t max_queued_pulls = 8;  // whole versions queued for pulls before new pulls are refused
  int busy_retry_ms = 100;      // ... with this hint to ask again (RelayClient waits, jittered)
  // Use this transport instead of creating one (tests wrap a FaultyTransport around one).
  std::unique_ptr<BulkTransport> transport;
};

// Owns its threads (control server, receiver, two senders; the master adds a monitor) and its
// shared-memory segments, which it unlinks on Stop. Thread-safe accessors.
class Relay {
 public:
  // Binds, and for a non-master relay joins the master's chain. Errors: Unavailable when an
  // endpoint cannot be bound or the master does not answer, InvalidArgument for bad options.
  static StatusOr<std::unique_ptr<Relay>> Start(RelayOptions options);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  const proto::RelayInfo& info() const { return info_; }
  bool is_master() const { return options_.master_endpoint.empty(); }
  // -1 until a version is complete.
  int64_t latest_complete_version() const LAMINAR_EXCLUDES(mu_);
  // The master's chain, head first (empty on other relays).
  std::vector<proto::RelayInfo> Chain() const LAMINAR_EXCLUDES(chain_mu_);
  uint64_t chain_rebuilds() const LAMINAR_EXCLUDES(chain_mu_);
  // Pulls of whole versions queued for sending, and pulls refused while the queue was full.
  uint64_t pulls_served() const { return pulls_served_.load(); }
  uint64_t pulls_refused_busy() const { return pulls_refused_busy_.load(); }
  void Stop();

 private:
  struct Slot;
  struct Member;
  explicit Relay(RelayOptions options);
  Status Init();
  void ReceiveLoop();
  void HandleBroadcast(const std::string& bytes);
  void HandleChunk(int64_t version, uint32_t index, const std::string& bytes);
  std::string HandleRequest(std::string_view request, std::string_view peer);
  proto::RelayReply HandleRequestImpl(const proto::RelayRequest& request) LAMINAR_EXCLUDES(mu_);
  // A rollout's pull of the newest version, and a downstream relay's or rollout's resend.
  void HandlePull(const proto::PullRequest& pull, proto::RelayReply* reply) LAMINAR_EXCLUDES(mu_);
  void HandleResend(const proto::ResendRequest& resend, proto::RelayReply* reply)
      LAMINAR_EXCLUDES(mu_);
  // Master: join, leave, complete and chain requests.
  void HandleChainRequest(const proto::RelayRequest& request, proto::RelayReply* reply)
      LAMINAR_EXCLUDES(chain_mu_);
  void HandleJoinLocked(const proto::RelayInfo& info, proto::RelayReply* reply)
      LAMINAR_REQUIRES(chain_mu_);
  // Sends `slot` on: its broadcast header, then every chunk it holds; later chunks follow as
  // they arrive.
  void StartForwardLocked(const std::shared_ptr<Slot>& slot) LAMINAR_REQUIRES(mu_);
  void ForwardChunkLocked(const std::shared_ptr<Slot>& slot, uint32_t index) LAMINAR_REQUIRES(mu_);
  void ServeLocked(const std::shared_ptr<Slot>& slot, const std::string& dest,
                   const std::vector<uint32_t>& chunks, bool with_header) LAMINAR_REQUIRES(mu_);
  // By value: it resets inflight_.
  void CompleteLocked(std::shared_ptr<Slot> slot) LAMINAR_REQUIRES(mu_) LAMINAR_EXCLUDES(chain_mu_);
  void ReportComplete(int64_t version);
  StatusOr<std::shared_ptr<Slot>> NewSlotLocked(const proto::WeightManifest& manifest)
      LAMINAR_REQUIRES(mu_);
  // Master: routes `slot` to the chain's relays (all, or those in `only_ids`), new epoch.
  void RouteFromChainLocked(const std::shared_ptr<Slot>& slot,
                            const std::set<std::string>& only_ids) LAMINAR_REQUIRES(mu_)
      LAMINAR_EXCLUDES(chain_mu_);
  void RequestResend(const std::shared_ptr<Slot>& slot, std::vector<uint32_t> chunks)
      LAMINAR_EXCLUDES(mu_);
  Status Join();
  // Master: every ping_interval_ms, pings the chain, drops relays past dead_after_failures, and
  // sends the version again to those that lack it (PingMembers, UpdateMembersLocked,
  // RerouteLocked).
  void MonitorLoop() LAMINAR_EXCLUDES(mu_, chain_mu_);
  // Each member's ping reply (or error), by relay id; `clients` keeps one socket per member.
  std::map<std::string, StatusOr<proto::RelayReply>> PingMembers(
      const std::vector<proto::RelayInfo>& members,
      std::map<std::string, std::unique_ptr<ZmqRequestClient>>& clients);
  // The replies into chain_; drops the dead. True when the chain changed since the last round.
  bool UpdateMembersLocked(const std::map<std::string, StatusOr<proto::RelayReply>>& replies,
                           std::map<std::string, std::unique_ptr<ZmqRequestClient>>& clients)
      LAMINAR_REQUIRES(chain_mu_);
  // The relays to send `target` again (empty: none), with the reason logged.
  std::set<std::string> RerouteLocked(const Slot& target, bool removed)
      LAMINAR_REQUIRES(mu_, chain_mu_);
  StatusOr<proto::RelayReply> Call(const std::string& endpoint, const proto::RelayRequest& r,
                                   int timeout_ms, int attempts);

  RelayOptions options_;
  proto::RelayInfo info_;
  std::unique_ptr<BulkTransport> transport_;
  std::unique_ptr<ZmqReplyServer> control_;
  Mutex send_mu_;                             // the bulk transport's sends (SendWorker takes it)
  std::unique_ptr<SendWorker> chain_sender_;  // the broadcast along the chain
  std::unique_ptr<SendWorker> serve_sender_;  // pulls and resends

  // Lock order: mu_ before chain_mu_.
  mutable Mutex mu_;
  std::shared_ptr<Slot> newest_ LAMINAR_GUARDED_BY(mu_);  // newest complete version
  // The segments this relay created whose slot may still live (a freed slot unlinks its own):
  // Stop unlinks them all, also one an old version's stuck send still holds, so that a process
  // killed after Stop leaves none. Pruned of freed slots as versions come.
  std::vector<std::pair<std::string, std::weak_ptr<Slot>>> segments_ LAMINAR_GUARDED_BY(mu_);
  std::shared_ptr<Slot> inflight_ LAMINAR_GUARDED_BY(mu_);  // the version being assembled
  uint64_t forward_generation_ LAMINAR_GUARDED_BY(mu_) = 0;
  uint64_t serve_generation_ LAMINAR_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ LAMINAR_GUARDED_BY(mu_) = 0;                        // master: broadcasts started
  std::map<std::string, std::unique_ptr<ZmqRequestClient>> clients_;  // receiver thread only

  // Master only.
  mutable Mutex chain_mu_;
  std::vector<std::unique_ptr<Member>> chain_ LAMINAR_GUARDED_BY(chain_mu_);
  uint64_t chain_rebuilds_ LAMINAR_GUARDED_BY(chain_mu_) = 0;
  // A relay left since the monitor last looked.
  bool chain_changed_ LAMINAR_GUARDED_BY(chain_mu_) = false;
  // Relay id -> newest complete version.
  std::map<std::string, int64_t> completions_ LAMINAR_GUARDED_BY(chain_mu_);

  std::atomic<int64_t> last_ping_ms_{0};
  std::atomic<uint64_t> pulls_served_{0}, pulls_refused_busy_{0};
  std::atomic<bool> stop_{false};
  // Set once Init has filled in info_ and the senders: the control server answers from the moment
  // it binds (a relay restarted on a known endpoint is asked at once), and refuses until then.
  std::atomic<bool> serving_{false};
  Mutex stop_mu_;  // with stop_cv_: wakes the monitor when stop_ is set
  CondVar stop_cv_;
  std::thread receiver_;
  std::thread monitor_;
};

}  // namespace laminar::relay
