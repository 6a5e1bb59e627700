// Checked, order-free reassembly of a version's chunks.
#include "relay/chunk_assembler.h"

#include <cstring>

#include "core/check.h"
#include "proto/codec.h"
#include "relay/wire.h"

namespace laminar::relay {

ChunkAssembler::ChunkAssembler(proto::WeightManifest manifest, std::span<uint8_t> dest)
    : manifest_(std::move(manifest)), dest_(dest), present_(manifest_.num_chunks(), false) {
  LAMINAR_CHECK(dest_.size() == manifest_.total_bytes())
      << "destination of " << dest_.size() << " bytes for " << manifest_.total_bytes();
}

StatusOr<bool> ChunkAssembler::Accept(uint32_t index, std::span<const uint8_t> bytes) {
  const std::string what =
      "chunk " + std::to_string(index) + " of version " + std::to_string(manifest_.version());
  if (index >= present_.size()) {
    return InvalidArgumentError(what + ": the version has " + std::to_string(present_.size()) +
                                " chunks");
  }
  const ChunkRange r = ChunkAt(manifest_, index);
  if (bytes.size() != r.size) {
    return InvalidArgumentError(what + " has " + std::to_string(bytes.size()) +
                                " bytes, expected " + std::to_string(r.size));
  }
  if (present_[index]) return false;
  const uint64_t sum = proto::Checksum({reinterpret_cast<const char*>(bytes.data()), bytes.size()});
  if (sum != manifest_.chunk_xxhash64(static_cast<int>(index))) {
    return DataLossError(what + " fails its xxHash64 checksum");
  }
  if (!bytes.empty()) std::memcpy(dest_.data() + r.offset, bytes.data(), bytes.size());
  present_[index] = true;
  ++num_present_;
  return true;
}

std::vector<uint32_t> ChunkAssembler::Missing() const {
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < present_.size(); ++i) {
    if (!present_[i]) out.push_back(i);
  }
  return out;
}

std::span<const uint8_t> ChunkAssembler::Chunk(uint32_t index) const {
  const ChunkRange r = ChunkAt(manifest_, index);
  return {dest_.data() + r.offset, static_cast<size_t>(r.size)};
}

}  // namespace laminar::relay
