// The relay tier's bulk-plane framing (docs/architecture.md): what the 64-bit BulkTransport tag of
// each message means, and how a version's flat buffer is cut into checksummed chunks.
//   tag = kind (4 bits) | version (36 bits) | chunk index (24 bits)
// kind kBroadcast carries an encoded proto::RelayBroadcast; kind kChunk carries the raw bytes of
// chunk `index` of `version`, checked against the manifest's chunk_xxhash64[index].
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "proto/relay.pb.h"
#include "proto/weights.pb.h"

namespace laminar::relay {

enum class BulkKind : uint8_t { kBroadcast = 1, kChunk = 2 };

inline constexpr int64_t kMaxVersion = (int64_t{1} << 36) - 1;
inline constexpr uint32_t kMaxChunks = 1u << 24;

struct BulkTag {
  BulkKind kind = BulkKind::kBroadcast;
  int64_t version = 0;
  uint32_t index = 0;
};

// Packs a tag; versions and indices must be in range (checked: a bug otherwise).
uint64_t EncodeTag(const BulkTag& tag);
// Unpacks a tag from a peer; InvalidArgument for an unknown kind.
StatusOr<BulkTag> DecodeTag(uint64_t tag);

// One tensor of a version as the publisher hands it over: bytes in host memory.
struct TensorBytes {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};

// The manifest of `version` for tensors laid out back to back (each at a 64-byte aligned offset)
// in a flat buffer, without checksums (FillChecksums adds them once the bytes are in place).
// Errors: InvalidArgument when a tensor's bytes disagree with its shape and dtype, a name repeats,
// the version is out of [0, kMaxVersion], or chunk_bytes is 0 or gives more than kMaxChunks.
StatusOr<proto::WeightManifest> LayoutManifest(int64_t version,
                                               const std::vector<TensorBytes>& tensors,
                                               uint64_t chunk_bytes);
// Copies `tensors` (the ones LayoutManifest laid out as `manifest`, in the same order) into
// `data` (total_bytes long) at their offsets, and zeroes the alignment padding between them.
void CopyToLayout(const proto::WeightManifest& manifest, const std::vector<TensorBytes>& tensors,
                  std::span<uint8_t> data);
// Sets manifest.chunk_xxhash64 from `data` (total_bytes long).
void FillChecksums(std::span<const uint8_t> data, proto::WeightManifest* manifest);

// Byte range [offset, offset + size) of chunk `index`.
struct ChunkRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};
ChunkRange ChunkAt(const proto::WeightManifest& manifest, uint32_t index);

}  // namespace laminar::relay
