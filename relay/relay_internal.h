// What the relay's files share inside Relay: a version it holds and a member of the master's
// chain. Not part of the relay's interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "proto/relay.pb.h"
#include "relay/chunk_assembler.h"
#include "relay/relay.h"
#include "relay/shm_version.h"

namespace laminar::relay {

inline std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// One version this relay holds, with where it goes next.
struct Relay::Slot {
  std::unique_ptr<ShmVersion> shm;
  std::unique_ptr<ChunkAssembler> assembler;
  // (destination bulk address, the route it forwards to) for the current broadcast.
  std::vector<std::pair<std::string, std::vector<std::string>>> targets;
  uint64_t epoch = 0;
  uint64_t generation = 0;
  std::string upstream_control;
  int64_t last_progress_ms = 0;
  int64_t version() const { return shm->version(); }
};

// A relay in the master's chain.
struct Relay::Member {
  proto::RelayInfo info;
  int failures = 0;
  int64_t complete_version = -1;
  int64_t inflight_version = -1;
  uint32_t inflight_chunks = 0;
  int64_t last_progress_ms = 0;
  bool needs_version = true;  // joined since the last broadcast was routed to it
};

}  // namespace laminar::relay
