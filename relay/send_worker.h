// A background thread that sends queued bulk messages in order: manifests it owns and chunks it
// reads in place from a version buffer kept alive by a shared pointer. Items carry a generation;
// Supersede(g) drops queued items of older generations (a newer broadcast replaces the route).
// A destination that fails once is skipped for the rest of its generation, so a dead peer costs
// one timeout, not one per chunk; a later generation tries it again.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "core/bulk_transport.h"
#include "core/mutex.h"

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
  SendWorker(std::string name, BulkTransport* transport, Mutex* send_mu, int timeout_ms);
  ~SendWorker();  // Stop()
  SendWorker(const SendWorker&) = delete;
  SendWorker& operator=(const SendWorker&) = delete;

  void Push(SendItem item) LAMINAR_EXCLUDES(mu_);
  void Supersede(uint64_t generation) LAMINAR_EXCLUDES(mu_);
  // Blocks until the queue is empty and nothing is being sent, or `timeout_ms` passes.
  bool WaitIdle(int timeout_ms) LAMINAR_EXCLUDES(mu_);
  void Stop() LAMINAR_EXCLUDES(mu_);
  // Items waiting to be sent.
  size_t queued() const LAMINAR_EXCLUDES(mu_);
  uint64_t failures() const LAMINAR_EXCLUDES(mu_);

 private:
  void Loop() LAMINAR_EXCLUDES(mu_);
  const std::string name_;
  BulkTransport* const transport_;  // used under *send_mu_
  Mutex* const send_mu_;
  const int timeout_ms_;
  mutable Mutex mu_;
  CondVar cv_;  // the queue grew, the worker went idle, or Stop
  std::deque<SendItem> queue_ LAMINAR_GUARDED_BY(mu_);
  uint64_t min_generation_ LAMINAR_GUARDED_BY(mu_) = 0;
  // dest -> the generation whose send to it failed
  std::map<std::string, uint64_t> failed_ LAMINAR_GUARDED_BY(mu_);
  bool busy_ LAMINAR_GUARDED_BY(mu_) = false;
  bool stop_ LAMINAR_GUARDED_BY(mu_) = false;
  uint64_t failures_ LAMINAR_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace laminar::relay
