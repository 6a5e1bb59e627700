// RopeTable implementation.
#include "kernels/cpu/rope.h"

#include <cmath>

#include "core/check.h"

namespace laminar::kernels::cpu {

RopeTable::RopeTable(std::span<const double> inv_freq, int64_t max_positions)
    : inv_freq_(inv_freq.begin(), inv_freq.end()), max_positions_(max_positions) {
  const auto half = static_cast<int64_t>(inv_freq_.size());
  cos_sin_.resize(static_cast<size_t>(max_positions_ * half * 2));
  for (int64_t p = 0; p < max_positions_; ++p) {
    for (int64_t j = 0; j < half; ++j) {
      const double angle = double(p) * inv_freq_[j];
      cos_sin_[(p * half + j) * 2] = std::cos(angle);
      cos_sin_[(p * half + j) * 2 + 1] = std::sin(angle);
    }
  }
}

void RopeTable::Apply(std::span<float> x, std::span<const int32_t> positions, int64_t t, int64_t h,
                      int64_t d, RopeLayout layout) const {
  const auto half = static_cast<int64_t>(inv_freq_.size());
  LAMINAR_CHECK_EQ(d, 2 * half);
  LAMINAR_CHECK_EQ(static_cast<int64_t>(x.size()), t * h * d);
  LAMINAR_CHECK_GE(static_cast<int64_t>(positions.size()), t);
  const bool interleaved = layout == RopeLayout::kInterleaved;
  std::vector<double> row;  // cos, sin of a position past the table
  for (int64_t i = 0; i < t; ++i) {
    const int64_t pos = positions[i];
    LAMINAR_CHECK_GE(pos, 0);
    const double* cs = nullptr;
    if (pos < max_positions_) {
      cs = &cos_sin_[pos * half * 2];
    } else {
      row.resize(static_cast<size_t>(half * 2));
      for (int64_t j = 0; j < half; ++j) {
        const double angle = double(pos) * inv_freq_[j];
        row[j * 2] = std::cos(angle);
        row[j * 2 + 1] = std::sin(angle);
      }
      cs = row.data();
    }
    for (int64_t head = 0; head < h; ++head) {
      float* v = x.data() + (i * h + head) * d;
      for (int64_t j = 0; j < half; ++j) {
        const int64_t a = interleaved ? 2 * j : j, b = interleaved ? 2 * j + 1 : j + half;
        const double x0 = v[a], x1 = v[b], c = cs[2 * j], s = cs[2 * j + 1];
        v[a] = static_cast<float>(x0 * c - x1 * s);
        v[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }
}

}  // namespace laminar::kernels::cpu
