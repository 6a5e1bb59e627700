// safetensors parsing (header validation, zero-copy views) and streaming, atomic writing.
#include "model/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "core/json_util.h"

namespace laminar::model {
namespace {

using nlohmann::json;

struct DTypeNameEntry {
  std::string_view name;
  DType dtype;
};
constexpr DTypeNameEntry kDTypeNames[] = {
    {"BOOL", DType::kBool}, {"U8", DType::kU8},     {"I8", DType::kI8},   {"U16", DType::kU16},
    {"I16", DType::kI16},   {"U32", DType::kU32},   {"I32", DType::kI32}, {"I64", DType::kI64},
    {"F16", DType::kF16},   {"BF16", DType::kBF16}, {"F32", DType::kF32}, {"F64", DType::kF64},
};

// An entry's parsed fields before the cross-entry checks.
struct RawEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> dims;
  uint64_t begin;
  uint64_t end;
};

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// A non-negative JSON integer. `what` names the field for the error.
StatusOr<uint64_t> JsonUnsigned(const json& v, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    return InvalidArgumentError(what + " is negative (" + std::to_string(v.get<int64_t>()) + ")");
  }
  return InvalidArgumentError(what + " must be a non-negative integer, got " + JsonSnippet(v));
}

StatusOr<RawEntry> ParseEntry(const std::string& name, const json& v) {
  std::string where = "tensor " + Quote(name);
  if (!v.is_object()) return InvalidArgumentError(where + " entry is not a JSON object");
  RawEntry e{name, DType::kU8, {}, 0, 0};
  auto dtype_it = v.find("dtype");
  if (dtype_it == v.end() || !dtype_it->is_string()) {
    return InvalidArgumentError(where + " has no string 'dtype'");
  }
  auto dtype = SafetensorsDTypeFromName(dtype_it->get<std::string>());
  if (!dtype.ok()) return dtype.status().WithContext(where);
  e.dtype = *dtype;
  auto shape_it = v.find("shape");
  if (shape_it == v.end() || !shape_it->is_array()) {
    return InvalidArgumentError(where + " has no 'shape' array");
  }
  for (const json& d : *shape_it) {
    LAMINAR_ASSIGN_OR_RETURN(uint64_t dim, JsonUnsigned(d, where + " shape dimension"));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidArgumentError(where + " shape dimension " + std::to_string(dim) + " too large");
    }
    e.dims.push_back(static_cast<int64_t>(dim));
  }
  auto off_it = v.find("data_offsets");
  if (off_it == v.end() || !off_it->is_array() || off_it->size() != 2) {
    return InvalidArgumentError(where + " has no 'data_offsets' array of two integers");
  }
  LAMINAR_ASSIGN_OR_RETURN(e.begin, JsonUnsigned((*off_it)[0], where + " data_offsets[0]"));
  LAMINAR_ASSIGN_OR_RETURN(e.end, JsonUnsigned((*off_it)[1], where + " data_offsets[1]"));
  return e;
}

// Parses the JSON header, rejecting duplicate keys at any depth (nlohmann would keep one silently).
Status ParseJsonNoDuplicates(std::string_view text, json* out) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  try {
    *out = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) return InvalidArgumentError("duplicate key " + Quote(duplicate));
  return OkStatus();
}

Status ParseMetadata(const json& v, std::map<std::string, std::string>* out) {
  if (!v.is_object()) return InvalidArgumentError("__metadata__ is not a JSON object");
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      return InvalidArgumentError("__metadata__ value of " + Quote(key) + " is not a string");
    }
    (*out)[key] = value.get<std::string>();
  }
  return OkStatus();
}

// Offsets within the buffer, byte length == shape * dtype size, and exact coverage of the buffer
// (no overlap, no gap), as the reference implementation requires.
Status CheckLayout(std::vector<RawEntry>* entries, uint64_t buffer_size) {
  for (const RawEntry& e : *entries) {
    std::string where = "tensor " + Quote(e.name);
    if (e.end < e.begin) {
      return InvalidArgumentError(where + " data_offsets [" + std::to_string(e.begin) + ", " +
                                  std::to_string(e.end) + "] end before begin");
    }
    if (e.end > buffer_size) {
      return DataLossError(where + " data [" + std::to_string(e.begin) + ", " +
                           std::to_string(e.end) + ") runs past the end of the buffer (" +
                           std::to_string(buffer_size) + " bytes)");
    }
    auto bytes = CheckedNumBytes(e.dims, DTypeSize(e.dtype));
    if (!bytes.ok()) return bytes.status().WithContext(where + " shape");
    if (static_cast<uint64_t>(*bytes) != e.end - e.begin) {
      return InvalidArgumentError(where + " has " + std::to_string(e.end - e.begin) +
                                  " bytes but shape " + Shape(e.dims).ToString() + " of " +
                                  std::string(SafetensorsDTypeName(e.dtype)) + " needs " +
                                  std::to_string(*bytes));
    }
  }
  std::vector<const RawEntry*> by_offset;
  for (const RawEntry& e : *entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const RawEntry* a, const RawEntry* b) {
    return std::tie(a->begin, a->end) < std::tie(b->begin, b->end);
  });
  uint64_t covered = 0;
  const RawEntry* prev = nullptr;
  for (const RawEntry* e : by_offset) {
    if (e->begin < covered) {
      return InvalidArgumentError("tensor " + Quote(e->name) + " [" + std::to_string(e->begin) +
                                  ", " + std::to_string(e->end) + ") overlaps tensor " +
                                  Quote(prev->name) + " [" + std::to_string(prev->begin) + ", " +
                                  std::to_string(prev->end) + ")");
    }
    if (e->begin > covered) {
      return InvalidArgumentError("bytes [" + std::to_string(covered) + ", " +
                                  std::to_string(e->begin) + ") of the buffer belong to no tensor");
    }
    covered = e->end;
    prev = e;
  }
  if (covered != buffer_size) {
    return InvalidArgumentError("bytes [" + std::to_string(covered) + ", " +
                                std::to_string(buffer_size) +
                                ") of the buffer belong to no tensor");
  }
  return OkStatus();
}

}  // namespace

StatusOr<DType> SafetensorsDTypeFromName(std::string_view name) {
  for (const auto& e : kDTypeNames) {
    if (e.name == name) return e.dtype;
  }
  if (name == "U64" || name.substr(0, 3) == "F8_" || name == "F4" || name.substr(0, 3) == "F6_") {
    return UnimplementedError("dtype " + Quote(name) + " is not supported");
  }
  return InvalidArgumentError("unknown dtype " + Quote(name));
}

std::string_view SafetensorsDTypeName(DType dtype) {
  for (const auto& e : kDTypeNames) {
    if (e.dtype == dtype) return e.name;
  }
  return "?";
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it =
      std::lower_bound(tensors_.begin(), tensors_.end(), name,
                       [](const SafetensorsTensor& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MappedFile::Open(path));
  LAMINAR_ASSIGN_OR_RETURN(SafetensorsFile file, Parse(mapped->bytes(), path));
  file.backing_ = std::move(mapped);
  return file;
}

StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::span<const uint8_t> bytes,
                                                 const std::string& display_name) {
  auto fail = [&](const Status& s) { return s.WithContext(display_name); };
  if (bytes.size() < 8) {
    return fail(DataLossError("file is " + std::to_string(bytes.size()) +
                              " bytes, shorter than the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<size_t>(i)];
  if (n > kSafetensorsMaxHeaderBytes) {
    return fail(InvalidArgumentError("header length " + std::to_string(n) +
                                     " exceeds the limit of " +
                                     std::to_string(kSafetensorsMaxHeaderBytes) + " bytes"));
  }
  if (n > bytes.size() - 8) {
    return fail(DataLossError("header length " + std::to_string(n) +
                              " runs past the end of the file (" + std::to_string(bytes.size()) +
                              " bytes)"));
  }
  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  if (text.empty() || text.front() != '{') {
    return fail(InvalidArgumentError("header does not start with '{'"));
  }
  json header;
  Status st = ParseJsonNoDuplicates(text, &header);
  if (!st.ok()) return fail(st);
  if (!header.is_object()) return fail(InvalidArgumentError("header is not a JSON object"));

  SafetensorsFile file;
  file.display_name_ = display_name;
  file.header_bytes_ = n;
  std::vector<RawEntry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      st = ParseMetadata(value, &file.metadata_);
      if (!st.ok()) return fail(st);
      continue;
    }
    auto entry = ParseEntry(key, value);
    if (!entry.ok()) return fail(entry.status());
    entries.push_back(std::move(entry).value());
  }
  const uint8_t* buffer = bytes.data() + 8 + n;
  uint64_t buffer_size = bytes.size() - 8 - n;
  st = CheckLayout(&entries, buffer_size);
  if (!st.ok()) return fail(st);
  std::sort(entries.begin(), entries.end(),
            [](const RawEntry& a, const RawEntry& b) { return a.name < b.name; });
  file.tensors_.reserve(entries.size());
  for (RawEntry& e : entries) {
    SafetensorsTensor t;
    t.name = std::move(e.name);
    t.dtype = e.dtype;
    t.shape = Shape(std::move(e.dims));
    t.data = buffer + e.begin;
    t.size_bytes = static_cast<size_t>(e.end - e.begin);
    t.buffer_offset = e.begin;
    file.tensors_.push_back(std::move(t));
  }
  return file;
}

// ---- writing ----

StatusOr<std::string> SafetensorsHeader(const std::vector<SafetensorsWriteItem>& items,
                                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  uint64_t offset = 0;
  std::set<std::string_view> seen;
  for (const SafetensorsWriteItem& item : items) {
    if (item.name.empty() || item.name == "__metadata__") {
      return InvalidArgumentError("invalid tensor name " + Quote(item.name));
    }
    if (!seen.insert(item.name).second)
      return InvalidArgumentError("duplicate tensor " + Quote(item.name));
    auto bytes = CheckedNumBytes(item.shape.dims(), DTypeSize(item.dtype));
    if (!bytes.ok()) return bytes.status().WithContext("tensor " + Quote(item.name));
    nlohmann::ordered_json entry;
    entry["dtype"] = std::string(SafetensorsDTypeName(item.dtype));
    entry["shape"] = item.shape.dims();
    entry["data_offsets"] = {offset, offset + static_cast<uint64_t>(*bytes)};
    header[item.name] = std::move(entry);
    offset += static_cast<uint64_t>(*bytes);
  }
  std::string text = header.dump();
  // Pad so that 8 + N is a multiple of 8: the buffer then starts 8-byte aligned in the file.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

namespace {

Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write " + path, errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return OkStatus();
}

Status StreamItems(int fd, const std::string& tmp, std::vector<SafetensorsWriteItem>& items,
                   const std::map<std::string, std::string>& metadata) {
  LAMINAR_ASSIGN_OR_RETURN(std::string header, SafetensorsHeader(items, metadata));
  LAMINAR_RETURN_IF_ERROR(WriteAll(fd, header.data(), header.size(), tmp));
  for (SafetensorsWriteItem& item : items) {
    std::string where = "tensor " + Quote(item.name);
    Tensor scratch;
    auto view =
        item.produce ? item.produce(&scratch) : StatusOr<TensorView>(InternalError("no producer"));
    if (!view.ok()) return view.status().WithContext(where);
    if (view->dtype() != item.dtype || view->shape() != item.shape) {
      return InternalError(where + ": produced " + std::string(DTypeName(view->dtype())) + " " +
                           view->shape().ToString() + ", header says " +
                           std::string(DTypeName(item.dtype)) + " " + item.shape.ToString());
    }
    if (view->size_bytes() > 0 && view->data() == nullptr) {
      return InternalError(where + ": produced no data");
    }
    LAMINAR_RETURN_IF_ERROR(WriteAll(fd, view->data(), view->size_bytes(), tmp));
  }
  if (::fsync(fd) != 0) return ErrnoError("cannot fsync " + tmp, errno);
  return OkStatus();
}

}  // namespace

Status WriteSafetensors(const std::string& path, std::vector<SafetensorsWriteItem> items,
                        const std::map<std::string, std::string>& metadata) {
  std::sort(
      items.begin(), items.end(),
      [](const SafetensorsWriteItem& a, const SafetensorsWriteItem& b) { return a.name < b.name; });
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create " + tmp, errno);
  Status st = StreamItems(fd, tmp, items, metadata);
  if (::close(fd) != 0 && st.ok()) st = ErrnoError("cannot close " + tmp, errno);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    st = ErrnoError("cannot rename " + tmp + " to " + path, errno);
  }
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st.WithContext(path);
  }
  return OkStatus();
}

Status WriteSafetensors(const std::string& path, const std::map<std::string, TensorView>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriteItem> items;
  items.reserve(tensors.size());
  for (const auto& [name, view] : tensors) {
    items.push_back({name, view.dtype(), view.shape(),
                     [v = view](Tensor*) -> StatusOr<TensorView> { return v; }});
  }
  return WriteSafetensors(path, std::move(items), metadata);
}

}  // namespace laminar::model
