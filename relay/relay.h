// A relay (docs/architecture.md; Laminar §4.2): keeps the newest complete policy version, and the one
// in flight, in shared memory on its machine; forwards each version down a pipelined chain as its
// chunks arrive (relay i sends chunk k while it receives chunk k+1); serves pulls from rollouts.
// The master relay is the chain's head: it receives versions from the actor's Publisher, keeps
// the chain (relays join it; a relay that stops answering pings is dropped and whoever still
// lacks the version gets it again along the rebuilt chain), and re-sends to relays that stall.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/bulk_transport.h"
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
  int64_t latest_complete_version() const;
  // The master's chain, head first (empty on other relays).
  std::vector<proto::RelayInfo> Chain() const;
  uint64_t chain_rebuilds() const;
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
  proto::RelayReply HandleRequestImpl(const proto::RelayRequest& request);
  // Sends `slot` on: its broadcast header, then every chunk it holds; later chunks follow as
  // they arrive. Caller holds mu_.
  void StartForwardLocked(const std::shared_ptr<Slot>& slot);
  void ForwardChunkLocked(const std::shared_ptr<Slot>& slot, uint32_t index);
  void ServeLocked(const std::shared_ptr<Slot>& slot, const std::string& dest,
                   const std::vector<uint32_t>& chunks, bool with_header);
  void CompleteLocked(std::shared_ptr<Slot> slot);  // by value: it resets inflight_
  void ReportComplete(int64_t version);
  StatusOr<std::shared_ptr<Slot>> NewSlotLocked(const proto::WeightManifest& manifest);
  // Master: routes `slot` to the chain's relays (all, or those in `only_ids`), new epoch.
  void RouteFromChainLocked(const std::shared_ptr<Slot>& slot,
                            const std::set<std::string>& only_ids);
  void RequestResend(const std::shared_ptr<Slot>& slot, std::vector<uint32_t> chunks);
  Status Join();
  void MonitorLoop();
  StatusOr<proto::RelayReply> Call(const std::string& endpoint, const proto::RelayRequest& r,
                                   int timeout_ms, int attempts);

  RelayOptions options_;
  proto::RelayInfo info_;
  std::unique_ptr<BulkTransport> transport_;
  std::unique_ptr<ZmqReplyServer> control_;
  std::mutex send_mu_;
  std::unique_ptr<SendWorker> chain_sender_;  // the broadcast along the chain
  std::unique_ptr<SendWorker> serve_sender_;  // pulls and resends

  mutable std::mutex mu_;
  std::shared_ptr<Slot> newest_;    // newest complete version
  std::shared_ptr<Slot> inflight_;  // the version being assembled
  uint64_t forward_generation_ = 0;
  uint64_t serve_generation_ = 0;
  uint64_t epoch_ = 0;                                                // master: broadcasts started
  std::map<std::string, std::unique_ptr<ZmqRequestClient>> clients_;  // receiver thread only

  // Master only.
  mutable std::mutex chain_mu_;
  std::vector<std::unique_ptr<Member>> chain_;
  uint64_t chain_rebuilds_ = 0;
  bool chain_changed_ = false;                  // a relay left since the monitor last looked
  std::map<std::string, int64_t> completions_;  // relay id -> newest complete version

  std::atomic<int64_t> last_ping_ms_{0};
  std::atomic<bool> stop_{false};
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::thread receiver_;
  std::thread monitor_;
};

}  // namespace laminar::relay
