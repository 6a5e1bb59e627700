// Shape arithmetic, aligned tensor storage and dtype conversion.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "core/check.h"

namespace laminar {

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) {
    LAMINAR_CHECK_GE(d, 0) << "negative dimension in shape " << ToString();
    n *= d;
  }
  return n;
}

std::string Shape::ToString() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

StatusOr<int64_t> CheckedNumBytes(std::span<const int64_t> dims, size_t elem_size) {
  int64_t n = static_cast<int64_t>(elem_size);
  for (int64_t d : dims) {
    if (d < 0) return OutOfRangeError("negative dimension " + std::to_string(d));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return OutOfRangeError("tensor size overflows 64 bits");
    }
    n *= d;
  }
  return n;
}

void Tensor::AlignedDelete::operator()(uint8_t* p) const { std::free(p); }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  size_t bytes = size_bytes();
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  LAMINAR_CHECK(p != nullptr) << "out of memory allocating " << rounded << " bytes";
  std::memset(p, 0, rounded);
  data_.reset(static_cast<uint8_t*>(p));
}

Tensor Tensor::FromView(const TensorView& view) {
  Tensor t(view.dtype(), view.shape());
  if (view.size_bytes() > 0) std::memcpy(t.data(), view.data(), view.size_bytes());
  return t;
}

void Tensor::Reshape(Shape shape) {
  LAMINAR_CHECK_EQ(shape.num_elements(), shape_.num_elements())
      << "reshape " << shape_.ToString() << " -> " << shape.ToString();
  shape_ = std::move(shape);
}

StatusOr<Tensor> ToF32(const TensorView& src) {
  Tensor out(DType::kF32, src.shape());
  float* dst = out.data_as<float>();
  int64_t n = src.num_elements();
  switch (src.dtype()) {
    case DType::kF32:
      std::memcpy(dst, src.data(), static_cast<size_t>(n) * 4);
      break;
    case DType::kBF16: {
      const uint16_t* s = src.data_as<const uint16_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToFloat(s[i]);
      break;
    }
    case DType::kF16: {
      const uint16_t* s = src.data_as<const uint16_t>();
      for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(s[i]);
      break;
    }
    default:
      return InvalidArgumentError("cannot convert dtype " + std::string(DTypeName(src.dtype())) +
                                  " to f32");
  }
  return out;
}

}  // namespace laminar
