// The one table of how far an optimized kernel may be from its reference (kernels/reference/),
// per op and dtype. Tests read these; never loosen one to make a test pass.
#pragma once

namespace laminar::kernels {

struct Tolerance {
  double abs;
  double rel;
};

// f32 GEMM: reassociated f32 sums against the reference's f64 accumulation, K up to ~10^4.
inline constexpr Tolerance kMatMulF32{1e-4, 1e-4};

}  // namespace laminar::kernels
