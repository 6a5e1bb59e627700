// Measured hardware limits that benchmarks report against (docs/architecture.md: a fraction of a
// measured limit, not of a datasheet number): DRAM read bandwidth and oneDNN's f32 and bf16 GEMM
// peaks.
#pragma once

#include <cstdint>

namespace laminar::bench {

// Read bandwidth in bytes/s: the best of `repeats` passes summing a `size_bytes` buffer (far
// larger than the last-level cache) on `num_threads` threads.
double MeasureDramReadBandwidth(int64_t size_bytes = int64_t{1} << 30, int repeats = 5,
                                int num_threads = 0);

// f32 GEMM FLOP/s through oneDNN at m = n = k = `dim` (best of `repeats`).
double MeasureGemmPeakF32(int64_t dim = 1024, int repeats = 5);

// The same for oneDNN's bf16 GEMM (AVX512-BF16 or AMX, f32 accumulation): the limit of bf16
// prefill. 0 when oneDNN has no bf16 matmul for this CPU.
double MeasureGemmPeakBF16(int64_t dim = 1024, int repeats = 5);

// Bytes of the last-level cache (0 if unknown): weights that fit partly in it are read faster
// than DRAM, so a decode's DRAM fraction can pass 1.
int64_t LastLevelCacheBytes();

}  // namespace laminar::bench
