// GGUF reader: parses the header, every metadata key/value (all 13 value types, nested arrays) and
// the tensor infos of a GGUF v2/v3 file, memory-mapped so tensor bytes are views, never copies.
// Spec: ggml's docs/gguf.md (GGUF v3; v2 has the same layout, v1 with 32-bit counts is refused).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace laminar::model {

// GGUF metadata value types (gguf_type numbering).
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
// "u8", "i32", "string", "array", ...; "type N" for an unknown value.
std::string GgufTypeName(GgufType type);

// One metadata value of any GGUF type. Scalars are widened losslessly (integers other than u64,
// and bool, to int64; u64 to uint64; f32/f64 to double) while type() remembers the stored type.
// Arrays are typed vectors so that a 150000-entry token list is one allocation of strings:
// integer arrays (all but u64) as int64, u64 arrays as uint64, bool arrays as int64 0/1, float
// arrays as double, string arrays as std::string, arrays of arrays as GgufValue (nested).
// Immutable after parsing; safe to read from several threads.
class GgufValue {
 public:
  using Storage = std::variant<int64_t, uint64_t, double, std::string, std::vector<int64_t>,
                               std::vector<uint64_t>, std::vector<double>, std::vector<std::string>,
                               std::vector<GgufValue>>;

  GgufValue() = default;
  GgufValue(GgufType type, GgufType array_type, Storage storage)
      : type_(type), array_type_(array_type), storage_(std::move(storage)) {}

  GgufType type() const { return type_; }
  bool is_array() const { return type_ == GgufType::kArray; }
  // Element type of an array (meaningless for scalars).
  GgufType array_type() const { return array_type_; }
  // Elements of an array; 0 for scalars.
  size_t array_size() const;

  // Scalars. Each returns false (leaving *out alone) when the value has another kind.
  // Any integer scalar (u64 only when <= INT64_MAX); bool is not an integer.
  bool AsInt(int64_t* out) const;
  // Any numeric scalar (integers converted to double).
  bool AsFloat(double* out) const;
  bool AsBool(bool* out) const;
  // nullptr unless a string scalar.
  const std::string* AsString() const;

  // Arrays: the backing vector, or nullptr when the value is not an array of that kind.
  const std::vector<std::string>* AsStrings() const;
  const std::vector<int64_t>* AsInts() const;      // arrays of u8..i32, i64, bool
  const std::vector<uint64_t>* AsU64s() const;     // arrays of u64
  const std::vector<double>* AsFloats() const;     // arrays of f32, f64
  const std::vector<GgufValue>* AsArrays() const;  // arrays of arrays

  // Short human-readable form for logs and `inspect`: scalars in full, arrays as
  // "[3 x string] ["a", "b", ...]" with at most `max_elems` elements shown.
  std::string ToString(size_t max_elems = 6) const;

 private:
  GgufType type_ = GgufType::kU8;
  GgufType array_type_ = GgufType::kU8;
  Storage storage_ = int64_t{0};
};

// One tensor's header entry. `ne` is GGUF's dimension order, innermost (fastest-varying) first:
// a [out, in] row-major linear weight has ne = {in, out}. Use shape() for row-major order.
struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // 1 to 4 dims, each >= 0
  uint32_t type = 0;        // ggml_type id (see ggml_quants.h: FindGgmlType)
  uint64_t offset = 0;      // bytes from the start of the data section; a multiple of alignment
  uint64_t size_bytes = 0;  // bytes of the data (checked to lie inside the file)
  int64_t num_elements = 0;

  // Row-major shape: ne reversed ({in, out} -> [out, in]).
  Shape shape() const;
};

// A parsed GGUF file. Owns (shares) the mapping, so spans from TensorBytes() stay valid while
// any copy of the GgufFile lives. Copyable (copies share the mapping); immutable after Open,
// so concurrent reads are safe.
//
// Every error from Open/Parse is DataLoss (truncated or corrupt), InvalidArgument (bad magic,
// bad value) or Unimplemented (version, tensor type) with a message that starts with the file
// name and names the field: "m.gguf: metadata key 'tokenizer.ggml.tokens': array of 2^60
// strings cannot fit in the 1000 bytes left". Counts are bounded by the bytes left before
// anything is allocated.
class GgufFile {
 public:
  // Maps and parses `path`.
  static StatusOr<GgufFile> Open(const std::string& path);
  // Parses an already mapped file (kept alive by the result).
  static StatusOr<GgufFile> Parse(std::shared_ptr<MappedFile> file);
  // Parses bytes the caller keeps alive for the life of the result (fuzzing, in-memory files).
  // `name` stands for the file in error messages.
  static StatusOr<GgufFile> ParseBuffer(std::span<const uint8_t> bytes, std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  // general.alignment, default 32.
  uint64_t alignment() const { return alignment_; }
  // File offset where the tensor data section starts (header end rounded up to alignment).
  uint64_t data_offset() const { return data_offset_; }
  // The mapping (nullptr for ParseBuffer).
  const std::shared_ptr<MappedFile>& file() const { return file_; }

  // All metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // The value of `key`, or nullptr.
  const GgufValue* Find(std::string_view key) const;
  bool Has(std::string_view key) const { return Find(key) != nullptr; }

  // Typed getters. Errors: NotFound naming the file and key when absent; InvalidArgument naming
  // the key, the expected and the actual type when the type does not fit.
  StatusOr<std::string> GetString(std::string_view key) const;
  StatusOr<int64_t> GetInt(std::string_view key) const;   // any integer type
  StatusOr<double> GetFloat(std::string_view key) const;  // any numeric type
  StatusOr<bool> GetBool(std::string_view key) const;
  StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;  // integer/bool arrays
  StatusOr<std::vector<float>> GetFloatArray(std::string_view key) const;  // any numeric array
  // Same, but `fallback` when the key is absent (a present key of the wrong type is an error).
  StatusOr<std::string> GetStringOr(std::string_view key, std::string fallback) const;
  StatusOr<int64_t> GetIntOr(std::string_view key, int64_t fallback) const;
  StatusOr<double> GetFloatOr(std::string_view key, double fallback) const;
  StatusOr<bool> GetBoolOr(std::string_view key, bool fallback) const;

  // Tensor infos in file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  // The info of tensor `name`, or nullptr.
  const GgufTensorInfo* FindTensor(std::string_view name) const;
  // The raw bytes of a tensor of this file (a view into the mapping; bounds were checked at
  // parse time). OutOfRange naming the tensor if `info` does not fit this file.
  StatusOr<std::span<const uint8_t>> TensorBytes(const GgufTensorInfo& info) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string name_;
  std::shared_ptr<MappedFile> file_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace laminar::model
