// Quantizers, packers and reference matmuls of kernels/reference/quant.h.
#include "kernels/reference/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/dtype.h"

namespace laminar::kernels {
namespace {

int64_t NumChunks(int64_t k_padded) { return k_padded / kQuantChunk; }

// Offset of element (row, col) in the tiled layout, `bytes_per_chunk` per column chunk.
int64_t TiledChunkOffset(int64_t row, int64_t col, int64_t k_padded, int64_t bytes_per_chunk) {
  const int64_t tile = row / kQuantTileN, j = row % kQuantTileN, c = col / kQuantChunk;
  return ((tile * NumChunks(k_padded) + c) * kQuantTileN + j) * bytes_per_chunk;
}

// The row loops below run on every quantized matmul call (activations), so GCC builds them for
// AVX-512, AVX2 and the baseline and picks one at load time (ifunc). The arithmetic is the same
// IEEE f32 operations in every build (this file is compiled with -ffp-contract=off), so every build
// gives the same bits.
// Under ThreadSanitizer the baseline alone: an ifunc resolver runs while the loader relocates,
// before the sanitizer's runtime is up, and the instrumented one crashes there.
#if defined(__SANITIZE_THREAD__)
#define LAMINAR_NO_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LAMINAR_NO_CLONES 1
#endif
#endif
#ifdef LAMINAR_NO_CLONES
#define LAMINAR_ROW_CLONES
#else
#define LAMINAR_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

// 16 lanes of GCC's vector extensions: AVX-512 registers in the avx512f clone, pairs of AVX2 ones
// in the avx2 clone, SSE in the default one. -O2's cost model does not vectorize these loops by
// itself (their trip counts are unknown), so they are written lane-wise; max and the element-wise
// operations are exact, so every lane order gives the scalar loop's bits.
typedef float VF16 __attribute__((vector_size(64)));
typedef int32_t VI16 __attribute__((vector_size(64)));
typedef int8_t VB16 __attribute__((vector_size(16)));
constexpr int64_t kLanes = 16;

// max |x|, or NaN when some x is not finite (std::max alone would skip a NaN).
LAMINAR_ROW_CLONES float MaxAbs(const float* x, int64_t n) {
  constexpr float kMax = std::numeric_limits<float>::max();
  VF16 vmax = {};
  VI16 vbad = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    VI16 bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    bits &= 0x7FFFFFFF;
    VF16 a;
    std::memcpy(&a, &bits, sizeof(a));
    vmax = a > vmax ? a : vmax;
    vbad |= !(a <= kMax);
  }
  float amax = 0;
  int bad = 0;
  for (int64_t j = 0; j < kLanes; ++j) {
    amax = vmax[j] > amax ? vmax[j] : amax;
    bad |= vbad[j];
  }
  for (; i < n; ++i) {
    const float a = std::abs(x[i]);
    amax = a > amax ? a : amax;
    bad |= !(a <= kMax);
  }
  return bad != 0 ? std::numeric_limits<float>::quiet_NaN() : amax;
}

// nearbyint for |v| < 2^22 in the default rounding mode (round half to even): adding and
// subtracting 1.5 · 2^23 leaves v rounded to an integer. Inlined and vectorized, unlike the libm
// call.
inline float RoundHalfEven(float v) { return (v + 12582912.0f) - 12582912.0f; }

Status CheckWeights(std::span<const float> w, int64_t n, int64_t k, const char* format) {
  if (n < 1 || k < 1 || static_cast<int64_t>(w.size()) != n * k) {
    return InvalidArgumentError(std::string(format) + ": weights of " + std::to_string(w.size()) +
                                " elements for [N, K] = [" + std::to_string(n) + ", " +
                                std::to_string(k) + "]");
  }
  for (size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) {
      return InvalidArgumentError(std::string(format) + ": weight [" +
                                  std::to_string(i / static_cast<size_t>(k)) + ", " +
                                  std::to_string(i % static_cast<size_t>(k)) + "] is not finite");
    }
  }
  return OkStatus();
}

// Symmetric per-row quantization to [-qmax, qmax] given amax = MaxAbs(w, k): returns the scale (0
// for an all-zero row) and, when `sum` is given, Σ q (exact: the int32 lanes of the conversion).
LAMINAR_ROW_CLONES float QuantizeRowWithMax(const float* w, int64_t k, float amax, int qmax,
                                            int8_t* q, int32_t* sum) {
  if (amax == 0) {
    std::fill(q, q + k, int8_t{0});
    if (sum != nullptr) *sum = 0;
    return 0.f;
  }
  const float scale = amax / static_cast<float>(qmax);
  const float inv = static_cast<float>(qmax) / amax;
  const bool tiny = !std::isfinite(inv);  // amax below ~1e-37: divide by the scale instead
  int64_t i = 0;
  VI16 vsum = {};
  if (!tiny) {
    const float lo = static_cast<float>(-qmax), hi = static_cast<float>(qmax);
    for (; i + kLanes <= k; i += kLanes) {
      VF16 r;
      std::memcpy(&r, w + i, sizeof(r));
      r = (r * inv + 12582912.0f) - 12582912.0f;  // RoundHalfEven, lane-wise
      r = r < lo ? lo : r;
      r = r > hi ? hi : r;
      const VI16 ri = __builtin_convertvector(r, VI16);
      vsum += ri;
      const VB16 b = __builtin_convertvector(ri, VB16);
      std::memcpy(q + i, &b, sizeof(b));
    }
  }
  int32_t total = 0;
  for (int64_t j = 0; j < kLanes; ++j) total += vsum[j];
  for (; i < k; ++i) {
    const float r = RoundHalfEven(tiny ? w[i] / scale : w[i] * inv);  // |r| ≤ qmax
    q[i] = static_cast<int8_t>(std::clamp(r, static_cast<float>(-qmax), static_cast<float>(qmax)));
    total += q[i];
  }
  if (sum != nullptr) *sum = total;
  return scale;
}

// Symmetric per-row quantization to [-qmax, qmax]: returns the scale (0 for an all-zero row).
float QuantizeRowSymmetric(const float* w, int64_t k, int qmax, int8_t* q) {
  return QuantizeRowWithMax(w, k, MaxAbs(w, k), qmax, q, nullptr);
}

template <typename Epilogue>
void ForEachOutput(int64_t m, int64_t n, std::span<float> out, Epilogue&& value) {
  LAMINAR_CHECK(static_cast<int64_t>(out.size()) == m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) out[i * n + j] = value(i, j);
  }
}

float Epilogue(int32_t acc, float x_scale, float w_scale, std::span<const float> bias, int64_t j) {
  float v = static_cast<float>(acc) * (x_scale * w_scale);
  if (!bias.empty()) v = v + bias[j];
  return v;
}

}  // namespace

void QuantizeActivationsPerToken(std::span<const float> x, int64_t m, int64_t k,
                                 Int8Activations* out) {
  LAMINAR_CHECK(m >= 0 && k >= 1 && static_cast<int64_t>(x.size()) == m * k);
  out->m = m;
  out->k = k;
  out->k_padded = QuantPaddedK(k);
  out->q.assign(static_cast<size_t>(m * out->k_padded), 0);
  out->scale.resize(m);
  out->sum.resize(m);
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x.data() + i * k;
    int8_t* q = out->q.data() + i * out->k_padded;
    const float amax = MaxAbs(row, k);
    if (!std::isfinite(amax)) {  // a broken activation stays visible: NaN out, not garbage
      out->scale[i] = std::numeric_limits<float>::quiet_NaN();
      out->sum[i] = 0;
      continue;
    }
    out->scale[i] = QuantizeRowWithMax(row, k, amax, 127, q, &out->sum[i]);
  }
}

uint8_t W8A8Weights::U(int64_t row, int64_t col) const {
  return u[TiledChunkOffset(row, col, k_padded, kQuantChunk) + col % kQuantChunk];
}

uint8_t W4A8Weights::Q4(int64_t row, int64_t col) const {
  const int64_t e = col % kQuantChunk;
  const uint8_t byte = q4[TiledChunkOffset(row, col, k_padded, kQuantChunk / 2) + e % 16];
  return e < 16 ? (byte & 0x0F) : (byte >> 4);
}

uint8_t W4A8Weights::Scale(int64_t row, int64_t g) const {
  return group_scale[((row / kQuantTileN) * num_groups() + g) * kQuantTileN + row % kQuantTileN];
}

uint8_t W4A8Weights::Offset(int64_t row, int64_t g) const {
  return group_offset[((row / kQuantTileN) * num_groups() + g) * kQuantTileN + row % kQuantTileN];
}

StatusOr<W8A8Weights> QuantizeW8A8(std::span<const float> w, int64_t n, int64_t k) {
  LAMINAR_RETURN_IF_ERROR(CheckWeights(w, n, k, "w8a8"));
  W8A8Weights out;
  out.n = n;
  out.k = k;
  out.k_padded = QuantPaddedK(k);
  out.u.assign(static_cast<size_t>(out.num_tiles() * kQuantTileN * out.k_padded), 128);
  out.channel_scale.resize(n);
  std::vector<int8_t> q(k);
  for (int64_t r = 0; r < n; ++r) {
    out.channel_scale[r] = QuantizeRowSymmetric(w.data() + r * k, k, 127, q.data());
    for (int64_t c = 0; c < k; ++c) {
      out.u[TiledChunkOffset(r, c, out.k_padded, kQuantChunk) + c % kQuantChunk] =
          static_cast<uint8_t>(q[c] + 128);
    }
  }
  return out;
}

StatusOr<W4A8Weights> QuantizeW4A8(std::span<const float> w, int64_t n, int64_t k, int64_t group) {
  LAMINAR_RETURN_IF_ERROR(CheckWeights(w, n, k, "w4a8"));
  if (group != 64 && group != 128) {
    return InvalidArgumentError("w4a8: group size " + std::to_string(group) +
                                ", expected 64 or 128");
  }
  W4A8Weights out;
  out.n = n;
  out.k = k;
  out.k_padded = QuantPaddedK(k);
  out.group = group;
  const int64_t tiles = out.num_tiles(), groups = out.num_groups();
  out.q4.assign(static_cast<size_t>(tiles * kQuantTileN * out.k_padded / 2), 0);
  // Padded columns dequantize to u = 1·0 + 128 = 128 (q8 0).
  out.group_scale.assign(static_cast<size_t>(tiles * groups * kQuantTileN), 1);
  out.group_offset.assign(static_cast<size_t>(tiles * groups * kQuantTileN), 128);
  out.channel_scale.resize(n);
  std::vector<int8_t> q8(k);
  for (int64_t r = 0; r < n; ++r) {
    out.channel_scale[r] = QuantizeRowSymmetric(w.data() + r * k, k, kW4A8ChannelMax, q8.data());
    const int64_t param = ((r / kQuantTileN) * groups) * kQuantTileN + r % kQuantTileN;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t begin = g * group, end = std::min(k, (g + 1) * group);
      int umin = 255, umax = 0;
      for (int64_t c = begin; c < end; ++c) {
        umin = std::min(umin, q8[c] + 128);
        umax = std::max(umax, q8[c] + 128);
      }
      const int s2 = std::max(1, (umax - umin + 14) / 15);
      const int a = std::min(umin, 255 - 15 * s2);
      LAMINAR_CHECK(s2 <= kW4A8MaxGroupScale && a >= 1) << "w4a8 group parameters out of range";
      out.group_scale[param + g * kQuantTileN] = static_cast<uint8_t>(s2);
      out.group_offset[param + g * kQuantTileN] = static_cast<uint8_t>(a);
      for (int64_t c = begin; c < end; ++c) {
        const int q4 = std::min(15, (q8[c] + 128 - a + s2 / 2) / s2);
        const int64_t e = c % kQuantChunk;
        uint8_t& byte = out.q4[TiledChunkOffset(r, c, out.k_padded, kQuantChunk / 2) + e % 16];
        byte |= static_cast<uint8_t>(e < 16 ? q4 : q4 << 4);
      }
    }
  }
  return out;
}

std::vector<float> Dequantize(const W8A8Weights& w) {
  std::vector<float> out(static_cast<size_t>(w.n * w.k));
  for (int64_t r = 0; r < w.n; ++r) {
    for (int64_t c = 0; c < w.k; ++c) {
      out[r * w.k + c] = w.channel_scale[r] * static_cast<float>(int{w.U(r, c)} - 128);
    }
  }
  return out;
}

W8A8Weights GatherRows(const W8A8Weights& w, std::span<const int32_t> rows) {
  W8A8Weights out;
  out.n = std::ssize(rows);
  out.k = w.k;
  out.k_padded = w.k_padded;
  out.u.assign(static_cast<size_t>(out.num_tiles() * kQuantTileN * out.k_padded), 128);
  out.channel_scale.resize(rows.size());
  for (int64_t r = 0; r < out.n; ++r) {
    const int64_t src = rows[r];
    LAMINAR_CHECK(src >= 0 && src < w.n) << "w8a8 row " << src << " outside [0, " << w.n << ")";
    out.channel_scale[r] = w.channel_scale[src];
    // A row's chunk of 32 K elements is contiguous in the tiled layout.
    for (int64_t c = 0; c < w.k_padded; c += kQuantChunk) {
      std::memcpy(out.u.data() + TiledChunkOffset(r, c, out.k_padded, kQuantChunk),
                  w.u.data() + TiledChunkOffset(src, c, w.k_padded, kQuantChunk), kQuantChunk);
    }
  }
  return out;
}

std::vector<float> Dequantize(const W4A8Weights& w) {
  std::vector<float> out(static_cast<size_t>(w.n * w.k));
  for (int64_t r = 0; r < w.n; ++r) {
    for (int64_t c = 0; c < w.k; ++c) {
      const int64_t g = c / w.group;
      const int q8 = int{w.Q4(r, c)} * w.Scale(r, g) + w.Offset(r, g) - 128;
      out[r * w.k + c] = w.channel_scale[r] * static_cast<float>(q8);
    }
  }
  return out;
}

namespace ref {
namespace {

// The integer matmul both formats share: acc = Σ_p q8(j, p) · x_q[i, p], then the f32 epilogue.
template <typename Weights, typename Q8>
void IntMatMul(const Int8Activations& x, const Weights& w, std::span<const float> bias,
               std::span<float> out, Q8&& q8) {
  LAMINAR_CHECK(x.k == w.k && x.k_padded == w.k_padded);
  LAMINAR_CHECK(bias.empty() || static_cast<int64_t>(bias.size()) == w.n);
  ForEachOutput(x.m, w.n, out, [&](int64_t i, int64_t j) {
    int32_t acc = 0;
    for (int64_t p = 0; p < w.k_padded; ++p) acc += q8(j, p) * x.q[i * x.k_padded + p];
    return Epilogue(acc, x.scale[i], w.channel_scale[j], bias, j);
  });
}

}  // namespace

void MatMulW8A8(const Int8Activations& x, const W8A8Weights& w, std::span<const float> bias,
                std::span<float> out) {
  IntMatMul(x, w, bias, out, [&](int64_t j, int64_t p) { return int32_t{w.U(j, p)} - 128; });
}

void MatMulW4A8(const Int8Activations& x, const W4A8Weights& w, std::span<const float> bias,
                std::span<float> out) {
  IntMatMul(x, w, bias, out, [&](int64_t j, int64_t p) {
    const int64_t g = p / w.group;
    return int32_t{w.Q4(j, p)} * w.Scale(j, g) + w.Offset(j, g) - 128;
  });
}

}  // namespace ref

// ---------------------------------------------------------------------------------------------
// GGUF blocks.
// ---------------------------------------------------------------------------------------------

std::string GgufQuantTypeName(GgufQuantType type) {
  switch (type) {
    case GgufQuantType::kQ4_0:
      return "q4_0";
    case GgufQuantType::kQ4_1:
      return "q4_1";
    case GgufQuantType::kQ8_0:
      return "q8_0";
  }
  return "?";
}

StatusOr<GgufQuantWeights> PackGgufWeights(uint32_t ggml_type, std::span<const uint8_t> blocks,
                                           int64_t n, int64_t k) {
  GgufQuantWeights w;
  size_t block_bytes = 0;
  switch (ggml_type) {
    case 2:
      w.type = GgufQuantType::kQ4_0;
      block_bytes = 18;
      break;
    case 3:
      w.type = GgufQuantType::kQ4_1;
      block_bytes = 20;
      break;
    case 8:
      w.type = GgufQuantType::kQ8_0;
      block_bytes = 34;
      break;
    default:
      return InvalidArgumentError("ggml type " + std::to_string(ggml_type) +
                                  " has no quantized kernel (q4_0, q4_1 and q8_0 do)");
  }
  const std::string name = GgufQuantTypeName(w.type);
  if (n < 1 || k < 1 || k % kQuantChunk != 0) {
    return InvalidArgumentError(name + " tensor [" + std::to_string(n) + ", " + std::to_string(k) +
                                "]: K = " + std::to_string(k) +
                                " is not a positive multiple of the block size 32");
  }
  w.n = n;
  w.k = k;
  const int64_t nb = w.blocks_per_row();
  if (blocks.size() != static_cast<size_t>(n * nb) * block_bytes) {
    return InvalidArgumentError(name + " tensor [" + std::to_string(n) + ", " + std::to_string(k) +
                                "]: " + std::to_string(blocks.size()) + " bytes, expected " +
                                std::to_string(static_cast<size_t>(n * nb) * block_bytes));
  }
  const int64_t qbytes = w.block_bytes();
  w.qs.resize(static_cast<size_t>(n * nb * qbytes));
  w.d.resize(static_cast<size_t>(n * nb));
  if (w.type == GgufQuantType::kQ4_1) w.m.resize(static_cast<size_t>(n * nb));
  for (int64_t b = 0; b < n * nb; ++b) {
    const uint8_t* src = blocks.data() + b * block_bytes;
    uint16_t half;
    std::memcpy(&half, src, 2);
    w.d[b] = HalfToFloat(half);
    size_t header = 2;
    if (w.type == GgufQuantType::kQ4_1) {
      std::memcpy(&half, src + 2, 2);
      w.m[b] = HalfToFloat(half);
      header = 4;
    }
    std::memcpy(w.qs.data() + b * qbytes, src + header, static_cast<size_t>(qbytes));
  }
  return w;
}

void QuantizeActivationsQ8Blocks(std::span<const float> x, int64_t m, int64_t k,
                                 Q8BlockActivations* out) {
  LAMINAR_CHECK(m >= 0 && k >= 1 && k % kQuantChunk == 0 &&
                static_cast<int64_t>(x.size()) == m * k);
  const int64_t nb = k / kQuantChunk;
  out->m = m;
  out->k = k;
  out->q.resize(static_cast<size_t>(m * k));
  out->d.resize(static_cast<size_t>(m * nb));
  out->s.resize(static_cast<size_t>(m * nb));
  for (int64_t b = 0; b < m * nb; ++b) {
    const float* row = x.data() + b * kQuantChunk;
    int8_t* q = out->q.data() + b * kQuantChunk;
    const float amax = MaxAbs(row, kQuantChunk);
    if (!std::isfinite(amax)) {
      out->d[b] = out->s[b] = std::numeric_limits<float>::quiet_NaN();
      std::fill(q, q + kQuantChunk, int8_t{0});
      continue;
    }
    int32_t sum = 0;
    out->d[b] = QuantizeRowWithMax(row, kQuantChunk, amax, 127, q, &sum);
    out->s[b] = out->d[b] * static_cast<float>(sum);
  }
}

namespace {

// Integer dot of one weight block with 32 activation quants (the weight's own zero: q4 - 8 for
// Q4_0, q4 for Q4_1, q8 for Q8_0).
int32_t GgufBlockDot(GgufQuantType type, const uint8_t* qs, const int8_t* xq) {
  int32_t acc = 0;
  if (type == GgufQuantType::kQ8_0) {
    for (int i = 0; i < 32; ++i) acc += int32_t{static_cast<int8_t>(qs[i])} * xq[i];
    return acc;
  }
  const int zero = type == GgufQuantType::kQ4_0 ? 8 : 0;
  for (int i = 0; i < 16; ++i) {
    acc += ((qs[i] & 0x0F) - zero) * int32_t{xq[i]};
    acc += ((qs[i] >> 4) - zero) * int32_t{xq[i + 16]};
  }
  return acc;
}

}  // namespace

namespace ref {

void MatMulGguf(const Q8BlockActivations& x, const GgufQuantWeights& w, std::span<const float> bias,
                std::span<float> out) {
  LAMINAR_CHECK(x.k == w.k);
  LAMINAR_CHECK(bias.empty() || static_cast<int64_t>(bias.size()) == w.n);
  const int64_t nb = w.blocks_per_row(), qbytes = w.block_bytes();
  ForEachOutput(x.m, w.n, out, [&](int64_t i, int64_t j) {
    float sum = 0;
    for (int64_t b = 0; b < nb; ++b) {
      const int32_t isum = GgufBlockDot(w.type, w.qs.data() + (j * nb + b) * qbytes,
                                        x.q.data() + i * w.k + b * kQuantChunk);
      sum += (w.d[j * nb + b] * x.d[i * nb + b]) * static_cast<float>(isum);
      if (w.type == GgufQuantType::kQ4_1) sum += w.m[j * nb + b] * x.s[i * nb + b];
    }
    return bias.empty() ? sum : sum + bias[j];
  });
}

}  // namespace ref

std::vector<float> Dequantize(const GgufQuantWeights& w) {
  std::vector<float> out(static_cast<size_t>(w.n * w.k));
  const int64_t nb = w.blocks_per_row(), qbytes = w.block_bytes();
  for (int64_t b = 0; b < w.n * nb; ++b) {
    const uint8_t* qs = w.qs.data() + b * qbytes;
    float* dst = out.data() + b * kQuantChunk;
    for (int i = 0; i < 32; ++i) {
      int q;
      if (w.type == GgufQuantType::kQ8_0) {
        q = static_cast<int8_t>(qs[i]);
      } else {
        q = i < 16 ? (qs[i] & 0x0F) : (qs[i - 16] >> 4);
        if (w.type == GgufQuantType::kQ4_0) q -= 8;
      }
      dst[i] = w.d[b] * static_cast<float>(q);
      if (w.type == GgufQuantType::kQ4_1) dst[i] += w.m[b];
    }
  }
  return out;
}

GgufQuantWeights GatherRows(const GgufQuantWeights& w, std::span<const int32_t> rows) {
  GgufQuantWeights out;
  out.type = w.type;
  out.n = std::ssize(rows);
  out.k = w.k;
  const int64_t nb = w.blocks_per_row(), row_bytes = nb * w.block_bytes();
  out.qs.resize(static_cast<size_t>(out.n * row_bytes));
  out.d.resize(static_cast<size_t>(out.n * nb));
  if (!w.m.empty()) out.m.resize(static_cast<size_t>(out.n * nb));
  for (int64_t r = 0; r < out.n; ++r) {
    const int64_t src = rows[r];
    LAMINAR_CHECK(src >= 0 && src < w.n) << "gguf row " << src << " outside [0, " << w.n << ")";
    std::memcpy(out.qs.data() + r * row_bytes, w.qs.data() + src * row_bytes,
                static_cast<size_t>(row_bytes));
    std::copy_n(w.d.begin() + src * nb, nb, out.d.begin() + r * nb);
    if (!w.m.empty()) std::copy_n(w.m.begin() + src * nb, nb, out.m.begin() + r * nb);
  }
  return out;
}

}  // namespace laminar::kernels
