// safetensors reader (memory-mapped, zero-copy views, every header field validated) and streaming
// writer. Format (huggingface/safetensors README): u64 little-endian header length N, N bytes of
// UTF-8 JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then
// the byte buffer; offsets are relative to the buffer, which the tensors must cover exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace laminar::model {

// Largest JSON header accepted (the same limit as the reference implementation).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;

// safetensors dtype name ("F32", "BF16", "BOOL", ...) -> DType. U64 and the F8_* types are valid
// safetensors but have no DType: Unimplemented naming the dtype. Anything else: InvalidArgument.
StatusOr<DType> SafetensorsDTypeFromName(std::string_view name);
// DType -> safetensors name ("F32", ...).
std::string_view SafetensorsDTypeName(DType dtype);

// One tensor of a parsed file. `data` points into the file's bytes (not copied). The header need
// not be 8-byte aligned (the official samples are not), so `data` may be misaligned for its dtype:
// check aligned() before reading it through a typed pointer, or copy it (Tensor::FromView).
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kU8;
  Shape shape;
  const uint8_t* data = nullptr;
  size_t size_bytes = 0;
  uint64_t buffer_offset = 0;  // data_offsets[0], relative to the byte buffer

  TensorView view() const { return TensorView(static_cast<const void*>(data), dtype, shape); }
  bool aligned() const { return reinterpret_cast<uintptr_t>(data) % DTypeSize(dtype) == 0; }
};

// A validated safetensors file: tensors sorted by name, metadata, and the mapping that keeps the
// bytes alive. Movable. Thread-safe for concurrent reads.
class SafetensorsFile {
 public:
  // Maps `path` and parses it. Errors (DataLoss for truncation, InvalidArgument for bad headers,
  // Unimplemented for dtypes without a DType) name the path and the tensor at fault.
  static StatusOr<SafetensorsFile> Open(const std::string& path);
  // Parses a whole file already in memory; the caller keeps `bytes` alive as long as the result's
  // views are used. `display_name` is used in error messages. Entry point for the fuzzer.
  static StatusOr<SafetensorsFile> Parse(std::span<const uint8_t> bytes,
                                         const std::string& display_name);

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const SafetensorsTensor* Find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The mapping behind the views; null when parsed from caller-owned bytes.
  const std::shared_ptr<MappedFile>& backing() const { return backing_; }
  const std::string& display_name() const { return display_name_; }
  uint64_t header_bytes() const { return header_bytes_; }  // N, the JSON length

 private:
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::shared_ptr<MappedFile> backing_;
  std::string display_name_;
  uint64_t header_bytes_ = 0;
};

// One tensor to write. `produce` returns its bytes (exactly num_elements * DTypeSize(dtype), of
// `dtype` and `shape`); it may fill `scratch` and return scratch->view(). It is called once per
// item, in write order, right before the bytes are written, so a caller can convert tensors one at
// a time (dtype conversion, RoPE permutation) without holding a second copy of the model.
struct SafetensorsWriteItem {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::function<StatusOr<TensorView>(Tensor* scratch)> produce;
};

inline const std::map<std::string, std::string>& DefaultSafetensorsMetadata() {
  static const std::map<std::string, std::string> kDefault = {{"format", "pt"}};
  return kDefault;
}

// The 8-byte length plus the JSON header for `items` (in the given order), padded with spaces to a
// multiple of 8 bytes so the buffer starts aligned. `metadata` is omitted when empty.
// InvalidArgument for an empty, duplicate or reserved ("__metadata__") name or a bad shape.
StatusOr<std::string> SafetensorsHeader(const std::vector<SafetensorsWriteItem>& items,
                                        const std::map<std::string, std::string>& metadata);

// Writes `items` to `path`, sorted by name, streaming each tensor's bytes to a temporary file in
// the same folder that is fsynced and renamed over `path` (a crash leaves no partial file under
// `path`). Errors from `produce` or a size mismatch abort the write and name the tensor.
Status WriteSafetensors(
    const std::string& path, std::vector<SafetensorsWriteItem> items,
    const std::map<std::string, std::string>& metadata = DefaultSafetensorsMetadata());
// Convenience: writes views as they are.
Status WriteSafetensors(
    const std::string& path, const std::map<std::string, TensorView>& tensors,
    const std::map<std::string, std::string>& metadata = DefaultSafetensorsMetadata());

}  // namespace laminar::model
