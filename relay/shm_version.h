// One policy version in a POSIX shared-memory segment (shm_open + mmap), the host-memory copy a
// relay keeps and that rollouts on the same machine map read-only (docs/architecture.md, Laminar
// §4.2). Layout: [ShmHeader (4 KiB) | encoded WeightManifest | pad to 4 KiB | data (total_bytes)].
// The writer fills the data, then MarkComplete() publishes it (a release store the reader's
// acquire load pairs with). Unlinking removes the name only: the kernel frees the pages when the
// last process unmaps them, so a rollout still reading an old version keeps it intact.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "proto/weights.pb.h"

namespace laminar::relay {

class ShmVersion {
 public:
  // Creates segment `name` ("/laminar-r1-v3": one leading '/', no other) sized for `manifest`,
  // mapped read-write. Errors: AlreadyExists when the name is taken, ResourceExhausted when
  // /dev/shm has no room, InvalidArgument for a bad name.
  static StatusOr<std::unique_ptr<ShmVersion>> Create(const std::string& name,
                                                      const proto::WeightManifest& manifest);
  // Maps an existing segment read-only. Errors: NotFound (gone: superseded and unlinked),
  // FailedPrecondition when it is not yet complete, DataLoss for a bad header or manifest.
  static StatusOr<std::unique_ptr<ShmVersion>> OpenReadOnly(const std::string& name);
  ~ShmVersion();  // unmaps; the creator also unlinks the name if it has not yet
  ShmVersion(const ShmVersion&) = delete;
  ShmVersion& operator=(const ShmVersion&) = delete;

  const std::string& name() const { return name_; }
  int64_t version() const { return manifest_.version(); }
  const proto::WeightManifest& manifest() const { return manifest_; }
  std::span<const uint8_t> data() const { return {data_, manifest_.total_bytes()}; }
  // The writable data; only for the creator.
  std::span<uint8_t> mutable_data();
  void MarkComplete();
  bool complete() const;
  // Removes the name (idempotent). Mappings stay valid.
  void Unlink();
  // Checks every chunk against the manifest's checksums; DataLoss naming the first bad chunk.
  Status Verify() const;

 private:
  ShmVersion() = default;
  std::string name_;
  bool owner_ = false;
  bool unlinked_ = false;
  uint8_t* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  uint8_t* data_ = nullptr;
  proto::WeightManifest manifest_;
};

}  // namespace laminar::relay
