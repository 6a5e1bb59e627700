// A background thread that sends queued bulk messages in order: manifests it owns and chunks it
// reads in place from a version buffer kept alive by a shared pointer. Items carry a generation;
// Supersede(g) drops queued items of older generations (a newer broadcast replaces the route).
// A destination that fails once is skipped for the rest of its generation, so a dead peer costs
// one timeout, not one per chunk; a later generation tries it again.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "core/bulk_transport.h"

namespace laminar::relay {

struct SendItem {
  std::string dest;
  uint64_t tag = 0;
  std::string owned;              // the payload, when `view` is empty
  std::span<const uint8_t> view;  // or bytes kept alive by `keep_alive`
  std::shared_ptr<const void> keep_alive;
  uint64_t generation = 0;

  // A message whose payload the item owns (a manifest).
  static SendItem Owned(std::string dest, uint64_t tag, std::string payload,
                        uint64_t generation = 0) {
    SendItem i;
    i.dest = std::move(dest);
    i.tag = tag;
    i.owned = std::move(payload);
    i.generation = generation;
    return i;
  }
  // A message read in place from memory that `keep_alive` owns (a chunk of a version).
  static SendItem View(std::string dest, uint64_t tag, std::span<const uint8_t> bytes,
                       std::shared_ptr<const void> keep_alive, uint64_t generation = 0) {
    SendItem i;
    i.dest = std::move(dest);
    i.tag = tag;
    i.view = bytes;
    i.keep_alive = std::move(keep_alive);
    i.generation = generation;
    return i;
  }
};

// Thread-safe. Sends go through `transport` under `send_mu` (shared with other workers, since a
// BulkTransport allows one sending thread at a time).
class SendWorker {
 public:
  SendWorker(std::string name, BulkTransport* transport, std::mutex* send_mu, int timeout_ms);
  ~SendWorker();  // Stop()
  SendWorker(const SendWorker&) = delete;
  SendWorker& operator=(const SendWorker&) = delete;

  void Push(SendItem item);
  void Supersede(uint64_t generation);
  // Blocks until the queue is empty and nothing is being sent, or `timeout_ms` passes.
  bool WaitIdle(int timeout_ms);
  void Stop();
  // Items waiting to be sent.
  size_t queued() const;
  uint64_t failures() const;

 private:
  void Loop();
  std::string name_;
  BulkTransport* transport_;
  std::mutex* send_mu_;
  int timeout_ms_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<SendItem> queue_;
  uint64_t min_generation_ = 0;
  std::map<std::string, uint64_t> failed_;  // dest -> the generation whose send to it failed
  bool busy_ = false;
  bool stop_ = false;
  uint64_t failures_ = 0;
  std::thread thread_;
};

}  // namespace laminar::relay
