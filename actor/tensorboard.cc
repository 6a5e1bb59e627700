// TFRecord framing and TensorBoard events; see tensorboard.h.
#include "actor/tensorboard.h"

#include <chrono>
#include <filesystem>
#include <iterator>
#include <system_error>
#include <utility>

#include "core/crc32c.h"
#include "core/host.h"

namespace laminar::actor {
namespace {

constexpr size_t kHeaderBytes = 12;  // length + its CRC
constexpr size_t kFooterBytes = 4;   // the payload's CRC

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void AppendLe(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFFu));
}

uint64_t LoadLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

}  // namespace

std::string EncodeTfRecord(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + kHeaderBytes + kFooterBytes);
  AppendLe(&out, payload.size(), 8);
  AppendLe(&out, MaskCrc32c(Crc32c(out)), 4);
  out.append(payload);
  AppendLe(&out, MaskCrc32c(Crc32c(payload)), 4);
  return out;
}

StatusOr<std::vector<std::string>> ReadTfRecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot open the TFRecord file " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return DataLossError("cannot read " + path);
  std::vector<std::string> records;
  size_t at = 0;
  while (at < bytes.size()) {
    const std::string where = path + " at byte offset " + std::to_string(at);
    if (bytes.size() - at < kHeaderBytes) {
      return DataLossError(where + ": truncated record header (" +
                           std::to_string(bytes.size() - at) + " of 12 bytes)");
    }
    const char* p = bytes.data() + at;
    const uint64_t len = LoadLe(p, 8);
    if (MaskCrc32c(Crc32cExtend(0, p, 8)) != static_cast<uint32_t>(LoadLe(p + 8, 4))) {
      return DataLossError(where + ": the record length's CRC does not match (corrupt)");
    }
    const size_t left = bytes.size() - at - kHeaderBytes;
    if (len > left || left - len < kFooterBytes) {
      return DataLossError(where + ": truncated record (" + std::to_string(len) +
                           " payload bytes + 4 CRC bytes announced, " + std::to_string(left) +
                           " left)");
    }
    const std::string_view payload(p + kHeaderBytes, len);
    if (MaskCrc32c(Crc32c(payload)) != static_cast<uint32_t>(LoadLe(p + kHeaderBytes + len, 4))) {
      return DataLossError(where + ": the record payload's CRC does not match (corrupt)");
    }
    records.emplace_back(payload);
    at += kHeaderBytes + len + kFooterBytes;
  }
  return records;
}

StatusOr<std::vector<proto::tensorboard::Event>> ReadTensorBoardEvents(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(std::vector<std::string> records, ReadTfRecords(path));
  std::vector<proto::tensorboard::Event> events(records.size());
  size_t offset = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    if (!events[i].ParseFromString(records[i])) {
      return DataLossError(path + " at byte offset " + std::to_string(offset) + ": record " +
                           std::to_string(i) + " is not a TensorBoard Event");
    }
    offset += records[i].size() + kHeaderBytes + kFooterBytes;
  }
  return events;
}

StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Create(const std::string& dir,
                                                                       double wall_time) {
  if (wall_time < 0) wall_time = NowSeconds();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return InternalError("tensorboard: cannot create the folder " + dir + ": " + ec.message());
  const std::string base = (std::filesystem::path(dir) /
                            ("events.out.tfevents." +
                             std::to_string(static_cast<int64_t>(wall_time)) + "." + Hostname()))
                               .string();
  std::string path = base;
  for (int n = 1; std::filesystem::exists(path); ++n) path = base + "." + std::to_string(n);
  std::unique_ptr<TensorBoardWriter> w(new TensorBoardWriter(path));
  w->file_.open(path, std::ios::binary | std::ios::out);
  if (!w->file_) return InternalError("tensorboard: cannot create " + path);
  proto::tensorboard::Event first;
  first.set_wall_time(wall_time);
  first.set_file_version(std::string(kTensorBoardFileVersion));
  LAMINAR_RETURN_IF_ERROR(w->WriteEvent(first));
  return w;
}

Status TensorBoardWriter::WriteScalars(int64_t step, const std::map<std::string, double>& scalars,
                                       double wall_time) {
  proto::tensorboard::Event e;
  e.set_wall_time(wall_time < 0 ? NowSeconds() : wall_time);
  e.set_step(step);
  proto::tensorboard::Summary* summary = e.mutable_summary();
  for (const auto& [tag, value] : scalars) {
    proto::tensorboard::SummaryValue* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteEvent(e);
}

Status TensorBoardWriter::WriteEvent(const proto::tensorboard::Event& event) {
  const std::string record = EncodeTfRecord(event.SerializeAsString());
  file_.write(record.data(), static_cast<std::streamsize>(record.size()));
  file_.flush();
  if (!file_) return InternalError("tensorboard: cannot write " + path_);
  return OkStatus();
}

}  // namespace laminar::actor
