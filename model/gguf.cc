// GGUF parsing: header, metadata, tensor infos and data-section bounds, all bounded by the bytes
// actually present. Layout (little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
// n_kv x {string key, u32 type, value}, n_tensors x {string name, u32 n_dims, u64 ne[n_dims],
// u32 ggml_type, u64 offset}, padding to general.alignment, tensor data.
#include "model/gguf.h"

#include <cstring>
#include <limits>

#include "model/ggml_quants.h"

namespace laminar::model {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;            // nested arrays deeper than this are refused
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;
// Fewest bytes a metadata entry, an array element or a tensor info can take in the file; counts
// are checked against these before anything is reserved.
constexpr size_t kMinKvBytes = 8 + 4 + 1;
constexpr size_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

// Bytes per element in the file, or 0 for an unknown type.
size_t MinElementBytes(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    case GgufType::kString:
      return 8;  // the length prefix
    case GgufType::kArray:
      return 4 + 8;  // element type and count
  }
  return 0;
}

std::string Quote(std::string_view s) {
  std::string out = "'";
  out += s.substr(0, 200);
  if (s.size() > 200) out += "...";
  return out + "'";
}

}  // namespace

// Reads one GGUF image front to back. Every read checks the bytes left first.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const std::string& name)
      : bytes_(bytes), name_(name) {}

  Status Run(GgufFile* f) {
    uint64_t n_tensors = 0, n_kv = 0;
    LAMINAR_RETURN_IF_ERROR(ReadHeader(f, &n_tensors, &n_kv));
    LAMINAR_RETURN_IF_ERROR(ReadMetadata(f, n_kv));
    LAMINAR_RETURN_IF_ERROR(ReadAlignment(f));
    if (n_tensors > left() / kMinTensorInfoBytes) {
      return Fail(StatusCode::kDataLoss, "n_tensors = " + std::to_string(n_tensors) +
                                             " cannot fit in the " + std::to_string(left()) +
                                             " bytes left after the metadata");
    }
    f->tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      GgufTensorInfo info;
      Status st = ReadTensorInfo(&info);
      if (!st.ok()) return st.WithContext(name_ + ": tensor info " + std::to_string(i));
      if (!f->tensor_index_.emplace(info.name, f->tensors_.size()).second) {
        return Fail(StatusCode::kInvalidArgument, "duplicate tensor name " + Quote(info.name));
      }
      f->tensors_.push_back(std::move(info));
    }
    return CheckTensorData(f);
  }

 private:
  size_t left() const { return bytes_.size() - pos_; }

  Status Fail(StatusCode code, const std::string& msg) const {
    return Status(code, name_ + ": " + msg);
  }
  Status Truncated(std::string_view what, size_t need) const {
    return Status(StatusCode::kDataLoss, "truncated reading " + std::string(what) + ": need " +
                                             std::to_string(need) + " bytes at offset " +
                                             std::to_string(pos_) + ", file is " +
                                             std::to_string(bytes_.size()) + " bytes");
  }

  template <typename T>
  Status Read(T* out, std::string_view what) {
    if (left() < sizeof(T)) return Truncated(what, sizeof(T));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return OkStatus();
  }

  Status ReadString(std::string* out, std::string_view what) {
    uint64_t len = 0;
    LAMINAR_RETURN_IF_ERROR(Read(&len, what));
    if (len > left()) {
      return Status(StatusCode::kDataLoss, std::string(what) + " length " + std::to_string(len) +
                                               " at offset " + std::to_string(pos_ - 8) +
                                               " runs past end of file (" + std::to_string(left()) +
                                               " bytes left)");
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return OkStatus();
  }

  Status ReadHeader(GgufFile* f, uint64_t* n_tensors, uint64_t* n_kv) {
    uint32_t magic = 0;
    Status st = Read(&magic, "magic");
    if (!st.ok()) return st.WithContext(name_ + ": not a GGUF file");
    if (magic != kGgufMagic) {
      return Fail(StatusCode::kInvalidArgument,
                  "not a GGUF file (bad magic: first bytes are not "
                  "\"GGUF\")");
    }
    LAMINAR_RETURN_IF_ERROR(Read(&f->version_, "version"), name_);
    if (f->version_ == 1) {
      return Fail(StatusCode::kUnimplemented, "GGUF version 1 (32-bit counts) is not supported");
    }
    if (f->version_ != 2 && f->version_ != 3) {
      bool big_endian =
          (f->version_ & 0xffffffu) == 0 && (f->version_ >> 24) >= 1 && (f->version_ >> 24) <= 3;
      return Fail(StatusCode::kUnimplemented,
                  big_endian ? std::string("big-endian GGUF is not supported")
                             : "unknown GGUF version " + std::to_string(f->version_) +
                                   " (supported: 2, 3)");
    }
    LAMINAR_RETURN_IF_ERROR(Read(n_tensors, "n_tensors"), name_);
    LAMINAR_RETURN_IF_ERROR(Read(n_kv, "n_kv"), name_);
    if (*n_kv > left() / kMinKvBytes) {
      return Fail(StatusCode::kDataLoss, "n_kv = " + std::to_string(*n_kv) + " cannot fit in the " +
                                             std::to_string(left()) + " bytes left");
    }
    if (*n_tensors > left() / kMinTensorInfoBytes) {
      return Fail(StatusCode::kDataLoss, "n_tensors = " + std::to_string(*n_tensors) +
                                             " cannot fit in the " + std::to_string(left()) +
                                             " bytes left");
    }
    return OkStatus();
  }

  Status ReadMetadata(GgufFile* f, uint64_t n_kv) {
    f->metadata_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      std::string key;
      LAMINAR_RETURN_IF_ERROR(ReadString(&key, "key"),
                              name_ + ": metadata entry " + std::to_string(i));
      uint32_t type = 0;
      GgufValue value;
      Status st = Read(&type, "value type");
      if (st.ok()) st = ReadValue(static_cast<GgufType>(type), 0, &value);
      if (!st.ok()) return st.WithContext(name_ + ": metadata key " + Quote(key));
      if (!f->metadata_index_.emplace(key, f->metadata_.size()).second) {
        return Fail(StatusCode::kInvalidArgument, "duplicate metadata key " + Quote(key));
      }
      f->metadata_.emplace_back(std::move(key), std::move(value));
    }
    return OkStatus();
  }

  // Reads a scalar of integer type T (widened to int64 unless u64).
  template <typename T>
  Status ReadInt(GgufType type, GgufValue* out) {
    T v{};
    LAMINAR_RETURN_IF_ERROR(Read(&v, GgufTypeName(type)));
    if constexpr (std::is_same_v<T, uint64_t>) {
      *out = GgufValue(type, type, v);
    } else {
      *out = GgufValue(type, type, static_cast<int64_t>(v));
    }
    return OkStatus();
  }

  Status ReadValue(GgufType type, int depth, GgufValue* out) {
    switch (type) {
      case GgufType::kU8:
        return ReadInt<uint8_t>(type, out);
      case GgufType::kI8:
        return ReadInt<int8_t>(type, out);
      case GgufType::kU16:
        return ReadInt<uint16_t>(type, out);
      case GgufType::kI16:
        return ReadInt<int16_t>(type, out);
      case GgufType::kU32:
        return ReadInt<uint32_t>(type, out);
      case GgufType::kI32:
        return ReadInt<int32_t>(type, out);
      case GgufType::kU64:
        return ReadInt<uint64_t>(type, out);
      case GgufType::kI64:
        return ReadInt<int64_t>(type, out);
      case GgufType::kBool: {
        uint8_t b = 0;
        LAMINAR_RETURN_IF_ERROR(ReadBool(&b));
        *out = GgufValue(type, type, static_cast<int64_t>(b));
        return OkStatus();
      }
      case GgufType::kF32: {
        float v = 0;
        LAMINAR_RETURN_IF_ERROR(Read(&v, "f32"));
        *out = GgufValue(type, type, static_cast<double>(v));
        return OkStatus();
      }
      case GgufType::kF64: {
        double v = 0;
        LAMINAR_RETURN_IF_ERROR(Read(&v, "f64"));
        *out = GgufValue(type, type, v);
        return OkStatus();
      }
      case GgufType::kString: {
        std::string s;
        LAMINAR_RETURN_IF_ERROR(ReadString(&s, "string"));
        *out = GgufValue(type, type, std::move(s));
        return OkStatus();
      }
      case GgufType::kArray:
        return ReadArray(depth, out);
    }
    return Status(StatusCode::kInvalidArgument, "unknown value type " +
                                                    std::to_string(static_cast<uint32_t>(type)) +
                                                    " at offset " + std::to_string(pos_ - 4));
  }

  Status ReadBool(uint8_t* b) {
    LAMINAR_RETURN_IF_ERROR(Read(b, "bool"));
    if (*b > 1) {
      return Status(StatusCode::kDataLoss, "bool byte " + std::to_string(*b) + " at offset " +
                                               std::to_string(pos_ - 1) + " is neither 0 nor 1");
    }
    return OkStatus();
  }

  // Reads `n` elements of integer type T into a vector of U.
  template <typename T, typename U>
  Status ReadIntArray(uint64_t n, std::vector<U>* out) {
    out->resize(n);
    for (uint64_t i = 0; i < n; ++i) {
      T v{};
      std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
      pos_ += sizeof(T);
      (*out)[i] = static_cast<U>(v);
    }
    return OkStatus();
  }

  Status ReadArray(int depth, GgufValue* out) {
    uint32_t raw_type = 0;
    uint64_t n = 0;
    LAMINAR_RETURN_IF_ERROR(Read(&raw_type, "array element type"));
    LAMINAR_RETURN_IF_ERROR(Read(&n, "array length"));
    auto elem = static_cast<GgufType>(raw_type);
    size_t min_bytes = MinElementBytes(elem);
    if (min_bytes == 0) {
      return Status(StatusCode::kInvalidArgument,
                    "array of unknown element type " + std::to_string(raw_type));
    }
    if (n > left() / min_bytes) {
      return Status(StatusCode::kDataLoss, "array of " + std::to_string(n) + " " +
                                               GgufTypeName(elem) + " cannot fit in the " +
                                               std::to_string(left()) + " bytes left");
    }
    if (elem == GgufType::kArray && depth + 1 >= kMaxArrayDepth) {
      return Status(StatusCode::kInvalidArgument,
                    "arrays nested deeper than " + std::to_string(kMaxArrayDepth));
    }
    // Fixed-size elements were bounds-checked as a whole above.
    switch (elem) {
      case GgufType::kU8:
        return Typed<uint8_t, int64_t>(elem, n, out);
      case GgufType::kI8:
        return Typed<int8_t, int64_t>(elem, n, out);
      case GgufType::kU16:
        return Typed<uint16_t, int64_t>(elem, n, out);
      case GgufType::kI16:
        return Typed<int16_t, int64_t>(elem, n, out);
      case GgufType::kU32:
        return Typed<uint32_t, int64_t>(elem, n, out);
      case GgufType::kI32:
        return Typed<int32_t, int64_t>(elem, n, out);
      case GgufType::kI64:
        return Typed<int64_t, int64_t>(elem, n, out);
      case GgufType::kU64:
        return Typed<uint64_t, uint64_t>(elem, n, out);
      case GgufType::kF32:
        return Typed<float, double>(elem, n, out);
      case GgufType::kF64:
        return Typed<double, double>(elem, n, out);
      case GgufType::kBool: {
        std::vector<int64_t> v(n);
        for (uint64_t i = 0; i < n; ++i) {
          uint8_t b = 0;
          LAMINAR_RETURN_IF_ERROR(ReadBool(&b), "array element " + std::to_string(i));
          v[i] = b;
        }
        *out = GgufValue(GgufType::kArray, elem, std::move(v));
        return OkStatus();
      }
      case GgufType::kString: {
        std::vector<std::string> v(n);
        for (uint64_t i = 0; i < n; ++i) {
          LAMINAR_RETURN_IF_ERROR(ReadString(&v[i], "string"),
                                  "array element " + std::to_string(i));
        }
        *out = GgufValue(GgufType::kArray, elem, std::move(v));
        return OkStatus();
      }
      case GgufType::kArray: {
        // Grown as elements parse (not pre-sized): nested claims overlap, so pre-sizing every
        // level could allocate several times the file size before failing.
        std::vector<GgufValue> v;
        for (uint64_t i = 0; i < n; ++i) {
          v.emplace_back();
          LAMINAR_RETURN_IF_ERROR(ReadArray(depth + 1, &v.back()),
                                  "array element " + std::to_string(i));
        }
        *out = GgufValue(GgufType::kArray, elem, std::move(v));
        return OkStatus();
      }
    }
    return InternalError("unreachable GGUF array type");
  }

  template <typename T, typename U>
  Status Typed(GgufType elem, uint64_t n, GgufValue* out) {
    std::vector<U> v;
    LAMINAR_RETURN_IF_ERROR((ReadIntArray<T, U>(n, &v)));
    *out = GgufValue(GgufType::kArray, elem, std::move(v));
    return OkStatus();
  }

  Status ReadAlignment(GgufFile* f) {
    f->alignment_ = kDefaultAlignment;
    const GgufValue* v = f->Find("general.alignment");
    if (v == nullptr) return OkStatus();
    int64_t a = 0;
    if (!v->AsInt(&a)) {
      return Fail(
          StatusCode::kInvalidArgument,
          "general.alignment has type " + GgufTypeName(v->type()) + ", expected an integer (u32)");
    }
    if (a <= 0 || static_cast<uint64_t>(a) > kMaxAlignment || (a & (a - 1)) != 0) {
      return Fail(StatusCode::kInvalidArgument,
                  "general.alignment = " + std::to_string(a) + " is not a power of two");
    }
    f->alignment_ = static_cast<uint64_t>(a);
    return OkStatus();
  }

  Status ReadTensorInfo(GgufTensorInfo* info) {
    LAMINAR_RETURN_IF_ERROR(ReadString(&info->name, "name"));
    Status st = ReadTensorShape(info);
    if (!st.ok()) return st.WithContext("tensor " + Quote(info->name));
    return OkStatus();
  }

  Status ReadTensorShape(GgufTensorInfo* info) {
    uint32_t n_dims = 0;
    LAMINAR_RETURN_IF_ERROR(Read(&n_dims, "n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return InvalidArgumentError("n_dims = " + std::to_string(n_dims) + " (expected 1 to 4)");
    }
    info->ne.resize(n_dims);
    int64_t count = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      LAMINAR_RETURN_IF_ERROR(Read(&ne, "ne"));
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(count, static_cast<int64_t>(ne), &count)) {
        return OutOfRangeError("ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                               " overflows the element count");
      }
      info->ne[d] = static_cast<int64_t>(ne);
    }
    info->num_elements = count;
    LAMINAR_RETURN_IF_ERROR(Read(&info->type, "ggml type"));
    const GgmlTypeTraits* traits = FindGgmlType(info->type);
    if (traits == nullptr) {
      return UnimplementedError("unknown ggml type " + std::to_string(info->type));
    }
    if (info->ne[0] % traits->block_elems != 0) {
      return InvalidArgumentError("ne[0] = " + std::to_string(info->ne[0]) +
                                  " is not a multiple of the " + std::string(traits->name) +
                                  " block size " + std::to_string(traits->block_elems));
    }
    LAMINAR_ASSIGN_OR_RETURN(info->size_bytes, GgmlRowBytes(info->type, count));
    return Read(&info->offset, "offset");
  }

  Status CheckTensorData(GgufFile* f) {
    uint64_t a = f->alignment_;
    uint64_t end = pos_;
    f->data_offset_ = (end + a - 1) / a * a;  // pos_ <= file size, so no overflow
    uint64_t size = bytes_.size();
    for (const GgufTensorInfo& t : f->tensors_) {
      if (t.offset % a != 0) {
        return Fail(StatusCode::kInvalidArgument,
                    "tensor " + Quote(t.name) + " data offset " + std::to_string(t.offset) +
                        " is not a multiple of the alignment " + std::to_string(a));
      }
      uint64_t data_left = f->data_offset_ <= size ? size - f->data_offset_ : 0;
      if (t.offset > data_left || t.size_bytes > data_left - t.offset) {
        return Fail(StatusCode::kDataLoss, "tensor " + Quote(t.name) + " data [offset " +
                                               std::to_string(f->data_offset_ + t.offset) + ", " +
                                               std::to_string(t.size_bytes) +
                                               " bytes] runs past end of file (" +
                                               std::to_string(size) + " bytes)");
      }
    }
    return OkStatus();
  }

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  size_t pos_ = 0;
};

StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::Open(path));
  return Parse(std::move(file));
}

StatusOr<GgufFile> GgufFile::Parse(std::shared_ptr<MappedFile> file) {
  LAMINAR_CHECK(file != nullptr);
  LAMINAR_ASSIGN_OR_RETURN(GgufFile f, ParseBuffer(file->bytes(), file->path()));
  f.file_ = std::move(file);
  return f;
}

StatusOr<GgufFile> GgufFile::ParseBuffer(std::span<const uint8_t> bytes, std::string name) {
  GgufFile f;
  f.name_ = std::move(name);
  f.bytes_ = bytes;
  GgufParser parser(bytes, f.name_);
  LAMINAR_RETURN_IF_ERROR(parser.Run(&f));
  return f;
}

StatusOr<std::span<const uint8_t>> GgufFile::TensorBytes(const GgufTensorInfo& info) const {
  uint64_t size = bytes_.size();
  if (data_offset_ > size || info.offset > size - data_offset_ ||
      info.size_bytes > size - data_offset_ - info.offset) {
    return OutOfRangeError(name_ + ": tensor '" + info.name + "' [offset " +
                           std::to_string(info.offset) + ", " + std::to_string(info.size_bytes) +
                           " bytes] lies outside the data section");
  }
  return bytes_.subspan(data_offset_ + info.offset, info.size_bytes);
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

Shape GgufTensorInfo::shape() const { return Shape(std::vector<int64_t>(ne.rbegin(), ne.rend())); }

}  // namespace laminar::model
