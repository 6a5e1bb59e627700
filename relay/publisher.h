// The actor's side of the relay tier (docs/architecture.md; Laminar §4.2): Publish copies a new
// policy version into host memory, which is the only time the actor waits (relay/publish_stall_s),
// and a background thread checksums it and sends it to the master relay as a manifest plus chunks.
// A newer version supersedes one still being sent. The publisher answers the master's resend
// requests for chunks that arrived corrupted, and sends the newest version again to a master
// restarted on the same control endpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/bulk_transport.h"
#include "core/mutex.h"
#include "core/status.h"
#include "core/zmq_transport.h"
#include "proto/relay.pb.h"
#include "relay/send_worker.h"
#include "relay/wire.h"

namespace laminar::relay {

struct PublisherOptions {
  std::string id = "actor";
  std::string master_endpoint;                         // the master relay's control endpoint
  std::string control_endpoint = "tcp://127.0.0.1:*";  // where resend requests reach us
  std::string bulk_kind = "zmq";
  std::string host = "127.0.0.1";
  uint64_t chunk_bytes = uint64_t{8} << 20;
  int send_timeout_ms = 10000;
  int connect_timeout_ms = 5000;      // how long Create keeps trying to reach the master
  int watch_interval_ms = 300;        // how often to check that the master got the newest version
  int keep_watch_interval_ms = 1000;  // then, how often to check that it still has it
  std::unique_ptr<BulkTransport> transport;  // optional, as in RelayOptions
};

// Thread-safe. Owns a background thread, two send workers and a control server.
class Publisher {
 public:
  // Asks the master for its bulk address. Errors: Unavailable when the master does not answer.
  static StatusOr<std::unique_ptr<Publisher>> Create(PublisherOptions options);
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Copies `tensors` (host memory; names unique, bytes matching shape and dtype) into a new
  // buffer and queues it as `version`; returns the seconds the caller waited (the stall).
  // Errors: InvalidArgument from LayoutManifest, or a version not above the last published.
  StatusOr<double> Publish(int64_t version, const std::vector<TensorBytes>& tensors);
  // Blocks until every queued version has been handed to the transport. DeadlineExceeded.
  Status WaitSent(int timeout_ms);
  // The metrics of docs/architecture.md for the newest Publish: relay/publish_stall_s, relay/bytes.
  struct Stats {
    double publish_stall_s = 0;
    uint64_t bytes = 0;
    int64_t versions_published = 0;
    int64_t versions_superseded = 0;  // replaced before they were fully queued
  };
  Stats stats() const;
  const std::string& control_endpoint() const;

 private:
  struct Version;
  class BufferPool;
  explicit Publisher(PublisherOptions options);
  void Loop() LAMINAR_EXCLUDES(mu_);
  void Watch(const std::shared_ptr<Version>& v, const proto::RelayBroadcast& header)
      LAMINAR_EXCLUDES(mu_);
  std::string HandleRequest(std::string_view request, std::string_view peer) LAMINAR_EXCLUDES(mu_);

  PublisherOptions options_;
  std::unique_ptr<BulkTransport> transport_;
  std::unique_ptr<ZmqReplyServer> control_;
  std::shared_ptr<BufferPool> pool_;
  std::string master_bulk_;              // Create's, then the Loop thread's
  Mutex send_mu_;                        // transport_'s sends (both workers take it)
  std::unique_ptr<SendWorker> stream_;   // versions, in order
  std::unique_ptr<SendWorker> resends_;  // chunks the master asks for again

  mutable Mutex mu_;
  CondVar cv_;  // a version was published, its sends were queued, or stop
  std::shared_ptr<Version> pending_ LAMINAR_GUARDED_BY(mu_);  // copied, not yet queued
  std::shared_ptr<Version> current_ LAMINAR_GUARDED_BY(mu_);  // queued (answers resends)
  int64_t last_version_ LAMINAR_GUARDED_BY(mu_) = -1;
  bool hashing_ LAMINAR_GUARDED_BY(mu_) = false;
  bool stop_ LAMINAR_GUARDED_BY(mu_) = false;
  Stats stats_ LAMINAR_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace laminar::relay
