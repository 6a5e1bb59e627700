// Tensors: a dtype, a shape and bytes. TensorView borrows the bytes (a slice of a mapped
// checkpoint, a KV block); Tensor owns a 64-byte-aligned buffer. Row-major and contiguous: the last
// dimension varies fastest. Shape letters follow kernels/README.md (B, T, H, Hkv, D, C, F, V, G,
// L).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace laminar {

// Dimensions of a tensor; rank 0 is a scalar with one element.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  // Product of the dimensions (1 for rank 0). CHECK-fails on a negative dimension.
  int64_t num_elements() const;
  // "[2, 3, 4]".
  std::string ToString() const;
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

 private:
  std::vector<int64_t> dims_;
};

// Checked product of `dims`; returns OutOfRange if a dimension is negative or the product of
// elements times `elem_size` overflows int64. Used when shapes come from files or peers.
StatusOr<int64_t> CheckedNumBytes(std::span<const int64_t> dims, size_t elem_size);

// A non-owning, contiguous view. Cheap to copy. The caller keeps the bytes alive.
class TensorView {
 public:
  TensorView() = default;
  TensorView(void* data, DType dtype, Shape shape)
      : data_(data), dtype_(dtype), shape_(std::move(shape)) {}
  TensorView(const void* data, DType dtype, Shape shape)
      : data_(const_cast<void*>(data)), dtype_(dtype), shape_(std::move(shape)) {}

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  size_t size_bytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

// An owning tensor. Movable, not copyable (use Clone()). Not thread-safe for concurrent writes.
class Tensor {
 public:
  Tensor() = default;
  // Zero-initialized storage for `shape` of `dtype`.
  Tensor(DType dtype, Shape shape);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  // A copy of `view`'s bytes.
  static Tensor FromView(const TensorView& view);
  Tensor Clone() const { return FromView(view()); }

  TensorView view() const { return TensorView(data_.get(), dtype_, shape_); }
  void* data() const { return data_.get(); }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(static_cast<void*>(data_.get()));
  }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return shape_.num_elements(); }
  size_t size_bytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  // Reinterprets the same bytes with a new shape of equal element count (CHECK-fails otherwise).
  void Reshape(Shape shape);

 private:
  struct AlignedDelete {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t[], AlignedDelete> data_;
  DType dtype_ = DType::kF32;
  Shape shape_;
};

// Converts `src` (f32, bf16 or f16) to a new f32 tensor of the same shape. Other dtypes:
// InvalidArgument naming the dtype.
StatusOr<Tensor> ToF32(const TensorView& src);

}  // namespace laminar
