// MappedFile: a read-only memory map of a whole file. Checkpoint readers parse headers from it and
// hand out views of tensor bytes without copying, so a large checkpoint is never read twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

namespace laminar {

// Owns the mapping; movable, not copyable. Views from data() live as long as the MappedFile.
// Thread-safe for concurrent reads.
class MappedFile {
 public:
  // Maps `path` read-only. Errors: NotFound (no such file), InvalidArgument (a directory),
  // errno-derived codes otherwise; the message names the path. An empty file maps to size 0.
  static StatusOr<std::shared_ptr<MappedFile>> Open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

// Reads a whole (small) file into a string: configs, JSON, templates. Errors name the path.
StatusOr<std::string> ReadFileToString(const std::string& path);
// Writes `contents` to `path` atomically: a temporary file in the same folder, fsync, rename.
// A crash mid-write leaves the old file intact. `durable` false skips the fsync: readers still
// see the old or the new contents whole, but a power loss may lose both (status files).
Status WriteFileAtomic(const std::string& path, std::string_view contents, bool durable = true);

}  // namespace laminar
