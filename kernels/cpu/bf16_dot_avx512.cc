// The AVX512-BF16 build of kernels/cpu/bf16_dot.h MatMulBF16Dot (compiled with -mavx512bf16; only
// called when the CPU has it). vdpbf16ps adds, per f32 lane, the products of a pair of bf16 values.
#include <immintrin.h>

#include <cstdint>

namespace laminar::kernels::cpu::avx512bf16 {
namespace {

constexpr int64_t kStep = 32;  // bf16 values per 512-bit vector

inline __m512bh LoadBF16(const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}
inline __m512bh LoadBF16Masked(const uint16_t* p, __mmask32 mask) {
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
}

// The sum of v's 16 lanes, halving (GCC 12's _mm512_reduce_add_ps trips -Wmaybe-uninitialized).
inline float HSum(__m512 v) {
  typedef float V16 __attribute__((vector_size(64)));
  typedef float V8 __attribute__((vector_size(32)));
  typedef float V4 __attribute__((vector_size(16)));
  const V16 a = reinterpret_cast<V16>(v);
  const V8 s8 = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
                __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
  const V4 s4 =
      __builtin_shufflevector(s8, s8, 0, 1, 2, 3) + __builtin_shufflevector(s8, s8, 4, 5, 6, 7);
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// out[r][j] = Σ_k x_r[k] · w_j[k] for R activation rows and J consecutive weight rows starting at
// w0. Each weight vector is loaded once for the R rows; the next block of weight rows is
// prefetched while this one is summed (the kernel is memory-bound at small R). The prefetch is
// temporal (T0): with the non-temporal hint the weights never stayed in the L3 between tokens,
// and SmolLM2's batch-1 bf16 decode ran at 2/3 of the speed (42-46 against 62-68 tok/s here,
// Sapphire Rapids, 105 MB L3).
template <int R, int J>
void Block(const uint16_t* const* xr, const uint16_t* w0, int64_t k, float out[][4]) {
  __m512 acc[R][J];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  // J rows of 2k bytes each follow; each step consumes J · 64 bytes of this block.
  const char* next = reinterpret_cast<const char*>(w0 + J * k);
  int64_t p = 0;
  for (; p + kStep <= k; p += kStep) {
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) __builtin_prefetch(next + 2 * J * p + j * 64, 0, 3);
    __m512bh x[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) x[r] = LoadBF16(xr[r] + p);
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) {
      const __m512bh w = LoadBF16(w0 + j * k + p);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], x[r], w);
    }
  }
  if (p < k) {
    const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << (k - p)) - 1);
    __m512bh x[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) x[r] = LoadBF16Masked(xr[r] + p, mask);
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) {
      const __m512bh w = LoadBF16Masked(w0 + j * k + p, mask);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], x[r], w);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < J; ++j) out[r][j] = HSum(acc[r][j]);
  }
}

// Every activation row (4 at a time) against weight rows [n, n + J).
template <int J>
void Columns(const uint16_t* x, const uint16_t* w, int64_t m, int64_t k, int64_t n_total, int64_t n,
             float* out) {
  const uint16_t* w0 = w + n * k;
  float o[4][4];
  int64_t i = 0;
  auto store = [&](int rows) {
    for (int r = 0; r < rows; ++r) {
      for (int j = 0; j < J; ++j) out[(i + r) * n_total + n + j] = o[r][j];
    }
  };
  for (; i + 4 <= m; i += 4) {
    const uint16_t* xr[4] = {x + i * k, x + (i + 1) * k, x + (i + 2) * k, x + (i + 3) * k};
    Block<4, J>(xr, w0, k, o);
    store(4);
  }
  for (; i + 2 <= m; i += 2) {
    const uint16_t* xr[2] = {x + i * k, x + (i + 1) * k};
    Block<2, J>(xr, w0, k, o);
    store(2);
  }
  for (; i < m; ++i) {
    const uint16_t* xr[1] = {x + i * k};
    Block<1, J>(xr, w0, k, o);
    store(1);
  }
}

}  // namespace

void RoundToBF16(const float* x, int64_t n, uint16_t* out) {
  // GCC vector extensions (GCC 12's shift and narrowing intrinsics trip -Wmaybe-uninitialized).
  typedef uint32_t V16U __attribute__((vector_size(64)));
  typedef uint16_t V16H __attribute__((vector_size(32)));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V16U bits;
    __builtin_memcpy(&bits, x + i, sizeof(bits));
    // core/dtype.h FloatToBF16: round to nearest even, NaN stays NaN (quiet).
    const V16U rounded = (bits + (0x7fffu + ((bits >> 16) & 1u))) >> 16;
    const V16U nan = (bits & 0x7fffffffu) > 0x7f800000u;  // all ones where NaN
    const V16U chosen = (nan & ((bits >> 16) | 0x40u)) | (~nan & rounded);
    const V16H narrow = __builtin_convertvector(chosen, V16H);
    __builtin_memcpy(out + i, &narrow, sizeof(narrow));
  }
  for (; i < n; ++i) {
    uint32_t bits;
    __builtin_memcpy(&bits, x + i, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      out[i] = static_cast<uint16_t>((bits >> 16) | 0x40u);
    } else {
      out[i] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
  }
}

void MatMulBF16DotCols(const uint16_t* x, const uint16_t* w, int64_t m, int64_t k, int64_t n_total,
                       int64_t n_begin, int64_t n_end, float* out) {
  int64_t n = n_begin;
  for (; n + 4 <= n_end; n += 4) Columns<4>(x, w, m, k, n_total, n, out);
  for (; n < n_end; ++n) Columns<1>(x, w, m, k, n_total, n, out);
}

}  // namespace laminar::kernels::cpu::avx512bf16
