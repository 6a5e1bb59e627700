// Reassembles one version from its chunks, in any order, with duplicates: each chunk is checked
// against the manifest's xxHash64 before it is written into the destination buffer. The version
// is complete when every chunk has arrived verified (docs/architecture.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "proto/weights.pb.h"

namespace laminar::relay {

// Not thread-safe. `dest` (manifest.total_bytes() long) must outlive the assembler.
class ChunkAssembler {
 public:
  ChunkAssembler(proto::WeightManifest manifest, std::span<uint8_t> dest);

  // Writes chunk `index` if it is new and verified: true when written, false for a duplicate.
  // Errors (nothing written): InvalidArgument for an index or size the manifest does not have,
  // DataLoss when the bytes fail the checksum.
  StatusOr<bool> Accept(uint32_t index, std::span<const uint8_t> bytes);

  const proto::WeightManifest& manifest() const { return manifest_; }
  bool has(uint32_t index) const { return index < present_.size() && present_[index]; }
  bool complete() const { return num_present_ == present_.size(); }
  uint32_t num_present() const { return num_present_; }
  // Indices still missing, ascending.
  std::vector<uint32_t> Missing() const;
  // Bytes of chunk `index` in the destination (meaningful once has(index)).
  std::span<const uint8_t> Chunk(uint32_t index) const;

 private:
  proto::WeightManifest manifest_;
  std::span<uint8_t> dest_;
  std::vector<bool> present_;
  uint32_t num_present_ = 0;
};

}  // namespace laminar::relay
