// BulkTransport: point-to-point delivery of large tagged buffers (weight chunks), the interface
// the relay tier sends through (docs/architecture.md). UcxBulkTransport (core/ucx_transport.h) is
// the fast implementation, ZmqBulkTransport the ZeroMQ fallback; CreateBulkTransport picks one by
// name. FaultyTransport wraps any implementation to drop, corrupt, delay, reorder or kill traffic.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/zmq_transport.h"

namespace laminar {

struct BulkMessage {
  uint64_t tag = 0;
  std::string bytes;
};

// One receiving address per instance; Send may target any peer's address. Implementations are
// thread-compatible: one sender thread and one receiver thread at a time.
class BulkTransport {
 public:
  virtual ~BulkTransport() = default;
  // Where peers send to (e.g. "tcp://127.0.0.1:40123").
  virtual const std::string& address() const = 0;
  // Queues `bytes` with `tag` for `peer`; blocks at most `timeout_ms` when the peer is slow.
  // Errors: DeadlineExceeded, Unavailable naming the peer.
  virtual Status Send(const std::string& peer, uint64_t tag, std::span<const uint8_t> bytes,
                      int timeout_ms) = 0;
  // The next message sent to this address; DeadlineExceeded after `timeout_ms`.
  virtual StatusOr<BulkMessage> Receive(int timeout_ms) = 0;
};

// The implementation named `kind`, receiving on `host` (an address of this machine):
//   "ucx"  UcxBulkTransport listening on a free port of host   (address "ucx://HOST:PORT")
//   "zmq"  ZmqBulkTransport bound to tcp://HOST:*               (address "tcp://HOST:PORT")
// Errors: InvalidArgument for another kind (the message lists the choices); the implementation's
// own errors otherwise.
StatusOr<std::unique_ptr<BulkTransport>> CreateBulkTransport(std::string_view kind,
                                                             const std::string& host = "127.0.0.1");

// ZeroMQ PUSH/PULL: messages are [payload | 8-byte tag]; one PUSH socket per peer, kept open.
class ZmqBulkTransport : public BulkTransport {
 public:
  // Messages queued per peer on each side before Send blocks: bounds the memory a slow receiver
  // costs (16 x a 4 MiB chunk = 64 MiB) and gives the sender backpressure.
  static constexpr int kQueueMessages = 16;
  // Binds `bind_endpoint` ("tcp://127.0.0.1:*", "ipc://path", "inproc://name").
  static StatusOr<std::unique_ptr<ZmqBulkTransport>> Create(const std::string& bind_endpoint);
  const std::string& address() const override { return pull_->endpoint(); }
  Status Send(const std::string& peer, uint64_t tag, std::span<const uint8_t> bytes,
              int timeout_ms) override;
  StatusOr<BulkMessage> Receive(int timeout_ms) override;

 private:
  std::unique_ptr<ZmqPull> pull_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<ZmqPush>> pushes_;
};

// Faults injected on the send side of a wrapped transport (for tests only).
struct FaultOptions {
  double drop_probability = 0;     // the message silently vanishes
  double corrupt_probability = 0;  // one byte of the payload is flipped
  int delay_ms = 0;                // every send waits this long first
  double reorder_probability = 0;  // the message is held back and sent after the next one
  uint64_t seed = 1;
};

// Wraps `inner`, injecting FaultOptions' faults into Send. A held-back (reordered) message goes
// out right after the next Send, or at FlushHeld; Kill discards it. Thread-compatible like the
// interface: one sender thread and one receiver thread.
class FaultyTransport : public BulkTransport {
 public:
  FaultyTransport(std::unique_ptr<BulkTransport> inner, FaultOptions options);
  const std::string& address() const override { return inner_->address(); }
  Status Send(const std::string& peer, uint64_t tag, std::span<const uint8_t> bytes,
              int timeout_ms) override;
  StatusOr<BulkMessage> Receive(int timeout_ms) override;
  // Sends the held-back message, if any (call after the last Send when reordering).
  Status FlushHeld(int timeout_ms);
  // From now on every Send and Receive fails with Unavailable, as if the process died.
  void Kill();
  int dropped() const { return dropped_; }
  int corrupted() const { return corrupted_; }
  int reordered() const { return reordered_; }  // sent after their successor

 private:
  std::unique_ptr<BulkTransport> inner_;
  FaultOptions options_;
  std::mt19937_64 rng_;
  bool killed_ = false;
  int dropped_ = 0;
  int corrupted_ = 0;
  int reordered_ = 0;
  struct Held {
    std::string peer;
    uint64_t tag = 0;
    std::string bytes;
  };
  std::optional<Held> held_;
};

}  // namespace laminar
