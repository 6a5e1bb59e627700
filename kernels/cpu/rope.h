// RoPE (Su et al., RoFormer, arXiv 2104.09864, §3.4) from a table of cos and sin per position,
// computed once per model instead of per call, layer and tensor. Reference: kernels/reference/ops.h
// Rope, which it equals bit for bit (the same f64 angles, cos, sin and rotation arithmetic).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/reference/ops.h"

namespace laminar::kernels::cpu {

class RopeTable {
 public:
  // inv_freq [D / 2] (ref::RopeInvFreq: theta and Llama-3 / linear scaling already applied);
  // positions [0, max_positions) are tabulated (max_positions * D * 8 bytes).
  RopeTable(std::span<const double> inv_freq, int64_t max_positions);

  // Rotates x [T, H, D] f32 in place, token i at positions[i] (>= 0), like ref::Rope; positions
  // past the table are computed on the fly. D must be 2 * inv_freq.size() (LAMINAR_CHECK).
  void Apply(std::span<float> x, std::span<const int32_t> positions, int64_t t, int64_t h,
             int64_t d, RopeLayout layout) const;

 private:
  std::vector<double> inv_freq_;
  int64_t max_positions_ = 0;
  std::vector<double> cos_sin_;  // [max_positions][D / 2][2]
};

}  // namespace laminar::kernels::cpu
