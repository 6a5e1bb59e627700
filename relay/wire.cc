// Bulk-plane tags and manifest layout for the relay tier.
#include "relay/wire.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/check.h"
#include "core/tensor.h"
#include "proto/codec.h"

namespace laminar::relay {

uint64_t EncodeTag(const BulkTag& tag) {
  LAMINAR_CHECK(tag.version >= 0 && tag.version <= kMaxVersion) << "version " << tag.version;
  LAMINAR_CHECK(tag.index < kMaxChunks) << "chunk index " << tag.index;
  return (static_cast<uint64_t>(tag.kind) << 60) | (static_cast<uint64_t>(tag.version) << 24) |
         tag.index;
}

StatusOr<BulkTag> DecodeTag(uint64_t tag) {
  BulkTag t;
  const uint64_t kind = tag >> 60;
  if (kind != static_cast<uint64_t>(BulkKind::kBroadcast) &&
      kind != static_cast<uint64_t>(BulkKind::kChunk)) {
    return InvalidArgumentError("bulk message with unknown kind " + std::to_string(kind));
  }
  t.kind = static_cast<BulkKind>(kind);
  t.version = static_cast<int64_t>((tag >> 24) & static_cast<uint64_t>(kMaxVersion));
  t.index = static_cast<uint32_t>(tag & (kMaxChunks - 1));
  return t;
}

StatusOr<proto::WeightManifest> LayoutManifest(int64_t version,
                                               const std::vector<TensorBytes>& tensors,
                                               uint64_t chunk_bytes) {
  if (version < 0 || version > kMaxVersion) {
    return InvalidArgumentError("version " + std::to_string(version) + " is outside [0, " +
                                std::to_string(kMaxVersion) + "]");
  }
  if (chunk_bytes == 0) return InvalidArgumentError("chunk_bytes is 0");
  proto::WeightManifest m;
  m.set_version(version);
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const TensorBytes& t : tensors) {
    if (!names.insert(t.name).second) {
      return InvalidArgumentError("tensor '" + t.name + "' is given twice");
    }
    auto want = CheckedNumBytes(t.shape, DTypeSize(t.dtype));
    if (!want.ok() || static_cast<uint64_t>(*want) != t.bytes.size()) {
      return InvalidArgumentError("tensor '" + t.name + "' has " + std::to_string(t.bytes.size()) +
                                  " bytes, which its shape and dtype do not give");
    }
    offset = (offset + 63) / 64 * 64;
    proto::TensorEntry* e = m.add_tensors();
    e->set_name(t.name);
    e->set_dtype(std::string(DTypeName(t.dtype)));
    for (int64_t d : t.shape) e->add_shape(d);
    e->set_offset(offset);
    e->set_size_bytes(t.bytes.size());
    offset += t.bytes.size();
  }
  const uint64_t num_chunks = (offset + chunk_bytes - 1) / chunk_bytes;
  if (num_chunks > kMaxChunks) {
    return InvalidArgumentError(
        std::to_string(offset) + " bytes in chunks of " + std::to_string(chunk_bytes) + " make " +
        std::to_string(num_chunks) + " chunks, more than " + std::to_string(kMaxChunks));
  }
  m.set_total_bytes(offset);
  m.set_chunk_bytes(chunk_bytes);
  m.set_num_chunks(static_cast<uint32_t>(num_chunks));
  return m;
}

ChunkRange ChunkAt(const proto::WeightManifest& manifest, uint32_t index) {
  ChunkRange r;
  r.offset = static_cast<uint64_t>(index) * manifest.chunk_bytes();
  r.size = std::min<uint64_t>(manifest.chunk_bytes(), manifest.total_bytes() - r.offset);
  return r;
}

void CopyToLayout(const proto::WeightManifest& manifest, const std::vector<TensorBytes>& tensors,
                  std::span<uint8_t> data) {
  size_t end = 0;  // of the previous tensor: the alignment padding after it is zeroed
  for (int i = 0; i < manifest.tensors_size(); ++i) {
    const auto& bytes = tensors[static_cast<size_t>(i)].bytes;
    const size_t offset = manifest.tensors(i).offset();
    std::memset(data.data() + end, 0, offset - end);
    if (!bytes.empty()) std::memcpy(data.data() + offset, bytes.data(), bytes.size());
    end = offset + bytes.size();
  }
  std::memset(data.data() + end, 0, data.size() - end);
}

void FillChecksums(std::span<const uint8_t> data, proto::WeightManifest* manifest) {
  manifest->clear_chunk_xxhash64();
  for (uint32_t i = 0; i < manifest->num_chunks(); ++i) {
    ChunkRange r = ChunkAt(*manifest, i);
    manifest->add_chunk_xxhash64(proto::Checksum(
        {reinterpret_cast<const char*>(data.data() + r.offset), static_cast<size_t>(r.size)}));
  }
}

}  // namespace laminar::relay
