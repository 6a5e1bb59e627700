// libFuzzer target: random bytes into the decoder of every wire message a role accepts
// (proto/codec.h). Decode checks the protocol version before Validate, so a message that parses is
// also validated as it is, whatever its header says: the validators see every parsed shape.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/codec.h"

namespace {

template <typename M>
void Check(std::string_view bytes) {
  (void)laminar::proto::Decode<M>(bytes, "fuzz").ok();
  M message;
  if (message.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    (void)laminar::proto::Validate(message).ok();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::proto;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Check<PromptGroup>(bytes);
  Check<PartialResponse>(bytes);
  Check<Trajectory>(bytes);
  Check<MigratedSample>(bytes);
  Check<WeightManifest>(bytes);
  Check<WeightChunk>(bytes);
  Check<Heartbeat>(bytes);
  Check<Stats>(bytes);
  Check<WorkRequest>(bytes);
  Check<WorkReply>(bytes);
  Check<RepackCommand>(bytes);
  Check<VersionQuery>(bytes);
  Check<VersionReply>(bytes);
  Check<RelayBroadcast>(bytes);
  Check<RelayRequest>(bytes);
  Check<RelayReply>(bytes);
  Check<ManagerRequest>(bytes);  // every request the manager serves, nested batches included
  Check<ManagerReply>(bytes);
  return 0;
}
