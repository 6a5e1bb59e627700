// GGUF writer: lays out GGUF v3 images byte by byte (metadata of every type, tensors with raw
// data). `laminar make-model` writes its models with it; the reader's tests build known contents
// and deliberate corruption with it (Kv takes any type id and raw bytes).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/status.h"

namespace laminar::model {

// Appends little-endian values to a byte string.
class ByteSink {
 public:
  template <typename T>
  ByteSink& Put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.append(b, sizeof(T));
    return *this;
  }
  ByteSink& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    out_ += s;
    return *this;
  }
  ByteSink& Raw(const std::string& s) {
    out_ += s;
    return *this;
  }
  const std::string& bytes() const { return out_; }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

// Collects metadata and tensors, then lays out a whole file with Finish().
class GgufWriter {
 public:
  // Raw value: `type` is the gguf_type id, `value` its encoded bytes.
  GgufWriter& Kv(const std::string& key, uint32_t type, const std::string& value) {
    kv_.Str(key).Put<uint32_t>(type).Raw(value);
    ++n_kv_;
    return *this;
  }
  template <typename T>
  GgufWriter& Scalar(const std::string& key, uint32_t type, T v) {
    ByteSink s;
    s.Put<T>(v);
    return Kv(key, type, s.bytes());
  }
  GgufWriter& U32(const std::string& key, uint32_t v) { return Scalar(key, 4, v); }
  GgufWriter& I32(const std::string& key, int32_t v) { return Scalar(key, 5, v); }
  GgufWriter& F32(const std::string& key, float v) { return Scalar(key, 6, v); }
  GgufWriter& Bool(const std::string& key, bool v) { return Scalar<uint8_t>(key, 7, v ? 1 : 0); }
  GgufWriter& String(const std::string& key, const std::string& v) {
    ByteSink s;
    s.Str(v);
    return Kv(key, 8, s.bytes());
  }
  GgufWriter& StringArray(const std::string& key, const std::vector<std::string>& v) {
    ByteSink s;
    s.Put<uint32_t>(8).Put<uint64_t>(v.size());
    for (const auto& x : v) s.Str(x);
    return Kv(key, 9, s.bytes());
  }
  template <typename T>
  GgufWriter& Array(const std::string& key, uint32_t elem_type, const std::vector<T>& v) {
    ByteSink s;
    s.Put<uint32_t>(elem_type).Put<uint64_t>(v.size());
    for (const T& x : v) s.Put<T>(x);
    return Kv(key, 9, s.bytes());
  }

  // A tensor with ne (innermost first), ggml type id and raw bytes.
  GgufWriter& Tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                     const std::string& data) {
    tensors_.push_back({name, ne, type, data});
    return *this;
  }
  GgufWriter& Tensor(const std::string& name, const std::vector<uint64_t>& ne,
                     const std::vector<float>& values) {
    std::string data(values.size() * 4, '\0');
    if (!values.empty()) std::memcpy(data.data(), values.data(), data.size());
    return Tensor(name, ne, 0, data);
  }

  // Writes Finish() to `path` atomically (a temporary beside it, then a rename). Errors name
  // the path.
  Status WriteFile(const std::string& path) const;

  // The whole file. Tensor data follows in order, each at a multiple of `alignment`.
  std::string Finish(uint64_t alignment = 32, uint32_t version = 3) const {
    ByteSink out;
    out.Raw("GGUF").Put<uint32_t>(version).Put<uint64_t>(tensors_.size()).Put<uint64_t>(n_kv_);
    out.Raw(kv_.bytes());
    uint64_t offset = 0;
    std::string data;
    for (const auto& t : tensors_) {
      out.Str(t.name).Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t n : t.ne) out.Put<uint64_t>(n);
      out.Put<uint32_t>(t.type).Put<uint64_t>(offset);
      data += t.data;
      offset += t.data.size();
      while (offset % alignment != 0) {
        data += '\0';
        ++offset;
      }
    }
    while (out.bytes().size() % alignment != 0) out.bytes() += '\0';
    return out.bytes() + data;
  }

 private:
  struct TensorEntry {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string data;
  };
  ByteSink kv_;
  uint64_t n_kv_ = 0;
  std::vector<TensorEntry> tensors_;
};

}  // namespace laminar::model
