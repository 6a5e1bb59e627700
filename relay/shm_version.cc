// POSIX shared-memory segments holding one policy version each.
#include "relay/shm_version.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "proto/codec.h"
#include "relay/wire.h"

namespace laminar::relay {
namespace {

constexpr uint64_t kMagic = 0x314d48535252414cULL;  // "LARRSHM1"
constexpr uint64_t kPage = 4096;

struct ShmHeader {
  uint64_t magic;
  uint64_t manifest_bytes;
  uint64_t data_offset;
  uint64_t total_bytes;
  int64_t version;
  uint32_t complete;  // accessed through std::atomic_ref
  uint32_t reserved;
};
static_assert(sizeof(ShmHeader) <= kPage);

uint64_t RoundUp(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }

Status CheckName(const std::string& name) {
  if (name.size() < 2 || name[0] != '/' || name.find('/', 1) != std::string::npos ||
      name.size() > 200) {
    return InvalidArgumentError("shared-memory name '" + name +
                                "' must be '/' followed by up to 200 characters without '/'");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<ShmVersion>> ShmVersion::Create(const std::string& name,
                                                         const proto::WeightManifest& manifest) {
  LAMINAR_RETURN_IF_ERROR(CheckName(name));
  const std::string encoded = manifest.SerializeAsString();
  const uint64_t data_offset = RoundUp(kPage + encoded.size());
  const uint64_t size = data_offset + RoundUp(manifest.total_bytes());
  // tmpfs hands out pages on first touch: a segment larger than the free space would kill the
  // relay with SIGBUS mid-copy, so check first (posix_fallocate would close the race, but costs
  // the whole zeroing up front, on the path that forwards the manifest down the chain).
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) == 0 && static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize < size) {
    return ResourceExhaustedError("version " + std::to_string(manifest.version()) + " needs " +
                                  std::to_string(size) + " bytes of shared memory, /dev/shm has " +
                                  std::to_string(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize) +
                                  " free (a container may need --shm-size)");
  }
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return ErrnoError("shm_open " + name, errno);
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    shm_unlink(name.c_str());
    return ErrnoError("ftruncate " + name + " to " + std::to_string(size) + " bytes", err);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return ErrnoError("mmap " + name, err);
  }
  std::unique_ptr<ShmVersion> v(new ShmVersion());
  v->name_ = name;
  v->owner_ = true;
  v->base_ = static_cast<uint8_t*>(base);
  v->mapped_bytes_ = size;
  v->data_ = v->base_ + data_offset;
  v->manifest_ = manifest;
  auto* h = reinterpret_cast<ShmHeader*>(v->base_);
  h->magic = kMagic;
  h->manifest_bytes = encoded.size();
  h->data_offset = data_offset;
  h->total_bytes = manifest.total_bytes();
  h->version = manifest.version();
  h->complete = 0;
  std::memcpy(v->base_ + kPage, encoded.data(), encoded.size());
  return v;
}

StatusOr<std::unique_ptr<ShmVersion>> ShmVersion::OpenReadOnly(const std::string& name) {
  LAMINAR_RETURN_IF_ERROR(CheckName(name));
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return ErrnoError("shm_open " + name, errno);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < kPage) {
    close(fd);
    return DataLossError("shared-memory segment " + name + " is smaller than its header");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (base == MAP_FAILED) return ErrnoError("mmap " + name, err);
  std::unique_ptr<ShmVersion> v(new ShmVersion());
  v->name_ = name;
  v->base_ = static_cast<uint8_t*>(base);
  v->mapped_bytes_ = size;
  const auto* h = reinterpret_cast<const ShmHeader*>(v->base_);
  if (h->magic != kMagic || h->manifest_bytes > (1u << 30) ||
      h->data_offset < kPage + h->manifest_bytes || h->data_offset > size ||
      h->total_bytes > size - h->data_offset) {
    return DataLossError("shared-memory segment " + name + " has a bad header");
  }
  if (!v->complete()) {
    return FailedPreconditionError("version in " + name + " is not complete yet");
  }
  if (!v->manifest_.ParseFromArray(v->base_ + kPage, static_cast<int>(h->manifest_bytes)) ||
      v->manifest_.total_bytes() != h->total_bytes || v->manifest_.version() != h->version) {
    return DataLossError("shared-memory segment " + name + " has a bad manifest");
  }
  LAMINAR_RETURN_IF_ERROR(proto::Validate(v->manifest_), name);
  v->data_ = v->base_ + h->data_offset;
  return v;
}

ShmVersion::~ShmVersion() {
  if (owner_) Unlink();
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
}

std::span<uint8_t> ShmVersion::mutable_data() {
  LAMINAR_CHECK(owner_) << "mutable_data() on read-only " << name_;
  return {data_, manifest_.total_bytes()};
}

void ShmVersion::MarkComplete() {
  LAMINAR_CHECK(owner_) << "MarkComplete() on read-only " << name_;
  std::atomic_ref<uint32_t>(reinterpret_cast<ShmHeader*>(base_)->complete)
      .store(1, std::memory_order_release);
}

bool ShmVersion::complete() const {
  auto* h = reinterpret_cast<ShmHeader*>(base_);
  return std::atomic_ref<uint32_t>(h->complete).load(std::memory_order_acquire) == 1;
}

void ShmVersion::Unlink() {
  if (!owner_ || unlinked_) return;
  shm_unlink(name_.c_str());
  unlinked_ = true;
}

Status ShmVersion::Verify() const {
  for (uint32_t i = 0; i < manifest_.num_chunks(); ++i) {
    ChunkRange r = ChunkAt(manifest_, i);
    const uint64_t got = proto::Checksum(
        {reinterpret_cast<const char*>(data_ + r.offset), static_cast<size_t>(r.size)});
    if (got != manifest_.chunk_xxhash64(static_cast<int>(i))) {
      return DataLossError("chunk " + std::to_string(i) + " of version " +
                           std::to_string(version()) + " in " + name_ +
                           " fails its xxHash64 checksum");
    }
  }
  return OkStatus();
}

}  // namespace laminar::relay
