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

namespace laminar::kernels {
// Row ops in f32 with the vectorized exp (~2 ulp) against the f64 reference.
inline constexpr Tolerance kRmsNormF32{1e-6, 1e-5};
inline constexpr Tolerance kSwiGluF32{1e-6, 1e-5};
inline constexpr Tolerance kSoftmaxF32{1e-7, 1e-5};
// Log-sum-exp and logprobs: absolute, in nats (f32 sum over V = 49152 terms).
inline constexpr Tolerance kLogSumExpF32{2e-5, 1e-6};
}  // namespace laminar::kernels

namespace laminar::kernels {
// bf16-weight matmul against the reference on the same (bf16-rounded) weights: f32 accumulation.
inline constexpr Tolerance kMatMulBF16{1e-4, 1e-4};
}  // namespace laminar::kernels

namespace laminar::kernels {
// Attention in f32 (dot products over D, softmax over S) against the f64 reference.
inline constexpr Tolerance kAttentionF32{1e-5, 1e-4};
}  // namespace laminar::kernels

namespace laminar::kernels {
// GGUF block kernels against ref::MatMulGguf: the same exact per-block integer sums, the f32 sum
// over blocks reassociated (8 lanes, then a horizontal sum); rel is relative to the largest
// |output| (single outputs may cancel).
inline constexpr Tolerance kMatMulGgufQuant{1e-5, 1e-5};
}  // namespace laminar::kernels
