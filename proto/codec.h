// Encoding and decoding of laminar's wire messages (proto/*.proto) with the checks every receiver
// needs: the protocol version, well-formed bytes, and each message's invariants (a trajectory has
// one logprob per response token, a manifest's chunks cover its bytes, a chunk's checksum holds).
// A bad message from a peer is a Status naming the peer and the message type, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "proto/control.pb.h"
#include "proto/relay.pb.h"
#include "proto/trajectory.pb.h"
#include "proto/weights.pb.h"

namespace laminar::proto {

inline constexpr uint32_t kProtocolVersion = 1;

// ReturnedGroups.reason (with no prompt ids) of the message a rollout sends when it starts: the
// manager forgets what an earlier process with the same id held (its groups go back to the pool).
inline constexpr char kRestartReason[] = "restart";
// The largest policy version a manifest may describe (4 TiB): anything above is a bad message,
// not a model, and must not reach an allocation.
inline constexpr uint64_t kMaxVersionBytes = uint64_t{1} << 42;

// XXH64 (seed 0) of `data`: the checksum of weight chunks (docs/architecture.md).
uint64_t Checksum(std::string_view data);

// Invariants of each message; InvalidArgument (DataLoss for a checksum) naming the field.
Status Validate(const PromptGroup& m);
Status Validate(const PartialResponse& m);
Status Validate(const Trajectory& m);
Status Validate(const MigratedSample& m);
Status Validate(const WeightManifest& m);
Status Validate(const WeightChunk& m);
Status Validate(const Heartbeat& m);
Status Validate(const Stats& m);
Status Validate(const WorkRequest& m);
Status Validate(const WorkReply& m);
Status Validate(const RepackCommand& m);
Status Validate(const VersionQuery& m);
Status Validate(const VersionReply& m);
Status Validate(const RelayBroadcast& m);
// The manifest a broadcast carries, checked against its checksum and validated.
StatusOr<WeightManifest> BroadcastManifest(const RelayBroadcast& m);
void SetBroadcastManifest(const WeightManifest& manifest, RelayBroadcast* m);
Status Validate(const ManagerRequest& m);
Status Validate(const ManagerReply& m);
Status Validate(const RelayRequest& m);
Status Validate(const RelayReply& m);

// Serializes `message` with the header's protocol version set.
template <typename M>
std::string Encode(M message) {
  message.mutable_header()->set_protocol_version(kProtocolVersion);
  return message.SerializeAsString();
}

// Parses and checks a message from `peer`. Errors: DataLoss "malformed Trajectory from rollout/3
// (17 bytes)", FailedPrecondition for another protocol version, or Validate's error; each message
// starts with the message type and the peer.
template <typename M>
StatusOr<M> Decode(std::string_view bytes, std::string_view peer) {
  M message;
  const std::string what = message.GetTypeName() + " from " + std::string(peer);
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return DataLossError("malformed " + what + " (" + std::to_string(bytes.size()) + " bytes)");
  }
  if (message.header().protocol_version() != kProtocolVersion) {
    return FailedPreconditionError(what + ": protocol version " +
                                   std::to_string(message.header().protocol_version()) +
                                   ", this build speaks " + std::to_string(kProtocolVersion));
  }
  LAMINAR_RETURN_IF_ERROR(Validate(message), what);
  return message;
}

}  // namespace laminar::proto
