// libFuzzer target: random bytes into the decoder of every wire message (proto/codec.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "proto/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::proto;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  (void)Decode<PromptGroup>(bytes, "fuzz").ok();
  (void)Decode<PartialResponse>(bytes, "fuzz").ok();
  (void)Decode<Trajectory>(bytes, "fuzz").ok();
  (void)Decode<WeightManifest>(bytes, "fuzz").ok();
  (void)Decode<WeightChunk>(bytes, "fuzz").ok();
  (void)Decode<Heartbeat>(bytes, "fuzz").ok();
  (void)Decode<Stats>(bytes, "fuzz").ok();
  (void)Decode<WorkRequest>(bytes, "fuzz").ok();
  (void)Decode<WorkReply>(bytes, "fuzz").ok();
  (void)Decode<RepackCommand>(bytes, "fuzz").ok();
  (void)Decode<VersionReply>(bytes, "fuzz").ok();
  (void)Decode<RelayBroadcast>(bytes, "fuzz").ok();
  (void)Decode<RelayRequest>(bytes, "fuzz").ok();
  (void)Decode<RelayReply>(bytes, "fuzz").ok();
  return 0;
}
