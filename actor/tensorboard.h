// TensorBoard event files for the actor's per-step metrics: TFRecord framing (length, masked
// CRC-32C of the length, payload, masked CRC-32C of the payload) around Protobuf `Event`s
// (proto/tensorboard.proto), the format TensorBoard's `--logdir` reads; and a checked reader,
// for tests and for `laminar plot`.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "proto/tensorboard.pb.h"

namespace laminar::actor {

// The first record of every event file names this version (TensorFlow's event writer).
inline constexpr std::string_view kTensorBoardFileVersion = "brain.Event:2";

// One TFRecord: uint64 little-endian payload length, uint32 LE masked CRC-32C of those 8 bytes,
// the payload, uint32 LE masked CRC-32C of the payload (core/crc32c.h; the format of
// tensorflow/core/lib/io/record_writer.cc). 16 bytes of framing.
std::string EncodeTfRecord(std::string_view payload);

// The payloads of the TFRecord file at `path`, both CRCs checked. Errors: NotFound when it cannot
// be opened; DataLoss naming the file and the record's byte offset for a truncated record or a
// CRC mismatch (a file cut short by a crash mid-write reads as truncated at its last record).
StatusOr<std::vector<std::string>> ReadTfRecords(const std::string& path);

// The Events of a TensorBoard event file, in order (the file_version event first). Errors: those
// of ReadTfRecords, and DataLoss naming the file and offset for a record that is not an Event.
StatusOr<std::vector<proto::tensorboard::Event>> ReadTensorBoardEvents(const std::string& path);

// Writes one TensorBoard event file. Owns the file; not thread-safe (the actor's thread writes).
class TensorBoardWriter {
 public:
  // Creates `dir` (with parents) and <dir>/events.out.tfevents.<unix seconds>.<hostname> (a ".N"
  // suffix when that name exists, e.g. two writers in one second), and writes the file_version
  // event stamped `wall_time` (seconds since the Unix epoch; < 0: now). Errors: Internal naming the
  // folder or file that cannot be created or written.
  static StatusOr<std::unique_ptr<TensorBoardWriter>> Create(const std::string& dir,
                                                             double wall_time = -1);

  // Appends one Event at `step` with one simple_value per entry of `scalars` (tag: the key; value
  // narrowed to float, as TensorBoard stores scalars), stamped `wall_time` (< 0: now), and flushes
  // it, so TensorBoard sees each step as it ends. Errors: Internal naming the file.
  Status WriteScalars(int64_t step, const std::map<std::string, double>& scalars,
                      double wall_time = -1);

  const std::string& path() const { return path_; }

 private:
  explicit TensorBoardWriter(std::string path) : path_(std::move(path)) {}
  Status WriteEvent(const proto::tensorboard::Event& event);

  std::string path_;
  std::ofstream file_;
};

}  // namespace laminar::actor
