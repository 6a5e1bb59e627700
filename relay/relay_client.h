// The rollout's side of the relay tier (docs/architecture.md; Laminar §4.2): ask a relay for its
// newest complete version and pull it, from shared memory when the relay runs on this machine and
// over the bulk transport otherwise. Relays are tried in order (the local one first); one that does
// not answer is skipped for the next, so a dead relay never stalls a rollout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/bulk_transport.h"
#include "core/status.h"
#include "core/zmq_transport.h"
#include "proto/weights.pb.h"
#include "relay/shm_version.h"

namespace laminar::relay {

// One complete, verified version. Owns its backing memory (a read-only shared-memory mapping or
// a heap buffer); immutable.
class PulledVersion {
 public:
  int64_t version() const { return manifest_.version(); }
  const proto::WeightManifest& manifest() const { return manifest_; }
  std::span<const uint8_t> data() const { return data_; }
  // "shm" or "bulk", and the relay's control endpoint.
  const std::string& source() const { return source_; }
  const std::string& relay() const { return relay_; }
  // Seconds the pull took (the metric relay/pull_wait_s, docs/architecture.md).
  double pull_wait_s() const { return pull_wait_s_; }
  // Times the pull waited because every relay was busy (back-pressure).
  int64_t busy_waits() const { return busy_waits_; }
  // The bytes of tensor `name`; NotFound naming it.
  StatusOr<std::span<const uint8_t>> Tensor(const std::string& name) const;

 private:
  friend class RelayClient;
  proto::WeightManifest manifest_;
  std::span<const uint8_t> data_;
  std::unique_ptr<ShmVersion> shm_;
  std::vector<uint8_t> heap_;
  std::string source_;
  std::string relay_;
  double pull_wait_s_ = 0;
  int64_t busy_waits_ = 0;
};

struct RelayClientOptions {
  std::string id = "rollout";
  std::vector<std::string> relays;  // control endpoints, the local relay first
  bool allow_shm = true;            // false: always pull over the bulk transport
  bool verify_shm = true;           // re-check the checksums of a mapped version
  std::string bulk_kind = "zmq";
  std::string host = "127.0.0.1";
  int request_timeout_ms = 1000;
  int pull_timeout_ms = 60000;
  int stall_resend_ms = 500;
  // How long PullLatest waits out relays that are busy before it returns ResourceExhausted (the
  // caller asks again later; a rollout keeps heartbeating meanwhile). At most pull_timeout_ms.
  int busy_wait_ms = 1000;
};

// Not thread-safe: one rollout thread uses it.
class RelayClient {
 public:
  static StatusOr<std::unique_ptr<RelayClient>> Create(RelayClientOptions options);
  // The newest complete version at the first relay that answers (-1: none yet).
  // Errors: Unavailable when no relay answers, naming each.
  StatusOr<int64_t> LatestVersion();
  // Pulls the newest complete version if it is above `newer_than`; NotFound when there is none.
  // A relay that refuses because it is busy (its send queue is full) is asked again after the
  // wait it names, jittered, for up to busy_wait_ms. Errors: ResourceExhausted when the relays
  // that answered were all still busy then; Unavailable when no relay could serve it, naming each
  // relay and why.
  StatusOr<std::shared_ptr<const PulledVersion>> PullLatest(int64_t newer_than = -1);

 private:
  explicit RelayClient(RelayClientOptions options) : options_(std::move(options)) {}
  StatusOr<std::shared_ptr<const PulledVersion>> PullFrom(const std::string& relay,
                                                          int64_t newer_than);
  StatusOr<std::shared_ptr<PulledVersion>> PullBulk(const std::string& relay, int64_t version);
  StatusOr<std::string> Call(const std::string& relay, const std::string& request);

  RelayClientOptions options_;
  size_t current_ = 0;
  static constexpr uint32_t kMaxBusyRetryMs = 5000;
  uint32_t busy_retry_ms_ = 0;  // the last busy relay's retry hint
  std::string hostname_;
  std::map<std::string, std::unique_ptr<ZmqRequestClient>> clients_;
  std::unique_ptr<BulkTransport> transport_;  // created at the first bulk pull
};

}  // namespace laminar::relay
