// Dispatch of the quantized matmuls to their per-ISA builds, and the scalar path.
#include "kernels/cpu/quant_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_gemm_isa.h"

namespace laminar::kernels::cpu {

namespace {
// Where byte j of the quants of a group's row `slot` lies in one of its blocks (GgufRowGroups).
int64_t GroupQuantByte(int64_t slot, int64_t j) {
  return (j / 4) * 4 * kGgufRowGroup + slot * 4 + j % 4;
}
}  // namespace

// The scalar path: the reference's arithmetic on the kernels' operands.
namespace scalar {
namespace {

void StoreTile(const QuantTileArgs& a, int64_t tile, int64_t i, const int32_t sums[4]) {
  for (int64_t j = 0; j < kQuantTileN; ++j) {
    const int64_t col = tile * kQuantTileN + j;
    if (col >= a.n) break;
    float v = static_cast<float>(sums[j]) * (a.x_scale[i] * a.channel_scale[col]);
    if (a.bias != nullptr) v = v + a.bias[col];
    a.out[i * a.n + col] = v;
  }
}

void TileRows(const QuantTileArgs& a, int64_t tile, const uint8_t* wt) {
  const int64_t chunks = a.k_padded / kQuantChunk;
  for (int64_t i = 0; i < a.m; ++i) {
    const int8_t* x = a.xq + i * a.k_padded;
    int32_t sums[4] = {0, 0, 0, 0};
    for (int64_t c = 0; c < chunks; ++c) {
      for (int64_t j = 0; j < kQuantTileN; ++j) {
        const uint8_t* w = wt + (c * kQuantTileN + j) * kQuantChunk;
        for (int64_t e = 0; e < kQuantChunk; ++e) {
          sums[j] += (int32_t{w[e]} - 128) * x[c * kQuantChunk + e];
        }
      }
    }
    StoreTile(a, tile, i, sums);
  }
}

}  // namespace

void W8A8Tiles(const QuantTileArgs& a, int64_t tile_begin, int64_t tile_end) {
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    TileRows(a, t, a.w_u8 + t * a.k_padded * kQuantTileN);
  }
}

void W4A8Tiles(const QuantTileArgs& a, int64_t tile_begin, int64_t tile_end, uint8_t* scratch) {
  const int64_t chunks = a.k_padded / kQuantChunk;
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const uint8_t* q4 = a.w_q4 + t * chunks * kQuantTileN * (kQuantChunk / 2);
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t g = c * kQuantChunk / a.group;
      for (int64_t j = 0; j < kQuantTileN; ++j) {
        const int64_t p = (t * a.num_groups + g) * kQuantTileN + j;
        const uint8_t* src = q4 + (c * kQuantTileN + j) * (kQuantChunk / 2);
        uint8_t* dst = scratch + (c * kQuantTileN + j) * kQuantChunk;
        for (int e = 0; e < 16; ++e) {
          dst[e] = static_cast<uint8_t>((src[e] & 0x0F) * a.group_scale[p] + a.group_offset[p]);
          dst[e + 16] = static_cast<uint8_t>((src[e] >> 4) * a.group_scale[p] + a.group_offset[p]);
        }
      }
    }
    TileRows(a, t, scratch);
  }
}

void GgufGroups(const GgufGroupArgs& a, int64_t group_begin, int64_t group_end, int8_t*) {
  const int64_t nb = a.k / kQuantChunk, row_bytes = a.type == 2 ? 32 : 16;
  for (int64_t g = group_begin; g < group_end; ++g) {
    for (int64_t slot = 0; slot < kGgufRowGroup; ++slot) {
      const int64_t row = g * kGgufRowGroup + slot;
      if (row >= a.n) break;
      for (int64_t i = 0; i < a.m; ++i) {
        float sum = 0;
        for (int64_t b = 0; b < nb; ++b) {
          const uint8_t* block = a.w + (g * nb + b) * a.block_stride;
          uint8_t qs[32];  // the row's bytes in the file's order
          for (int64_t j = 0; j < row_bytes; ++j) {
            qs[j] = block[GroupQuantByte(slot, j)];
          }
          const int8_t* x = a.xq + i * a.k + b * kQuantChunk;
          int32_t isum = 0;
          for (int e = 0; e < 32; ++e) {
            int w;
            if (a.type == 2) {
              w = static_cast<int8_t>(qs[e]);
            } else {
              w = e < 16 ? (qs[e] & 0x0F) : (qs[e - 16] >> 4);
              if (a.type == 0) w -= 8;
            }
            isum += w * x[e];
          }
          uint16_t half;
          std::memcpy(&half, block + a.quant_bytes + 2 * slot, 2);
          sum += (HalfToFloat(half) * a.x_d[i * nb + b]) * static_cast<float>(isum);
          if (a.type == 1) {
            std::memcpy(&half, block + a.quant_bytes + 2 * (kGgufRowGroup + slot), 2);
            sum += HalfToFloat(half) * a.x_s[i * nb + b];
          }
        }
        a.out[i * a.n + row] = a.bias != nullptr ? sum + a.bias[row] : sum;
      }
    }
  }
}

}  // namespace scalar

namespace {

bool Available(QuantIsa isa) {
  const CpuFeatures& f = GetCpuFeatures();
  switch (isa) {
    case QuantIsa::kScalar:
      return true;
    case QuantIsa::kAvx2:
      return f.avx2;
    case QuantIsa::kAvx512Vnni:
      return f.avx2 && f.avx512 && f.avx512_vnni;
  }
  return false;
}

// The activation half of the operands, and the output, into *a (whose weight half is set).
void TileArgs(const Int8Activations& x, int64_t k, std::span<const float> channel_scale,
              std::span<const float> bias, std::span<float> out, QuantTileArgs* a) {
  LAMINAR_CHECK(x.k == k && x.k_padded == a->k_padded)
      << "activations of K " << x.k << ", weights of K " << k;
  LAMINAR_CHECK(bias.empty() || static_cast<int64_t>(bias.size()) == a->n);
  LAMINAR_CHECK(static_cast<int64_t>(out.size()) == x.m * a->n);
  // VNNI's unsigned sums reach 255 · 127 · K: int32 holds them up to K = 65536.
  LAMINAR_CHECK(a->k_padded <= 65536) << "quantized matmul with K = " << k << " > 65536";
  a->xq = x.q.data();
  a->x_scale = x.scale.data();
  a->x_sum = x.sum.data();
  a->m = x.m;
  a->channel_scale = channel_scale.data();
  a->bias = bias.empty() ? nullptr : bias.data();
  a->out = out.data();
}

// Runs fn(begin, end) over [0, count) on the pool, in parts of at least min_part.
template <typename Fn>
void Split(int64_t count, int64_t min_part, ThreadPool* pool, Fn&& fn) {
  if (pool == nullptr || count <= min_part) {
    fn(0, count);
  } else {
    pool->ParallelFor(count, min_part, fn);
  }
}

// Tiles per part: enough work to pay for a task hand-off (~16k weight-row products).
int64_t MinTiles(int64_t m, int64_t k_padded) {
  return std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, m * k_padded));
}

// From this many activation rows on, a CPU with AVX512-VNNI runs w8a8/w4a8 through oneDNN's int8
// matmul (AMX where present) on W unpacked to plain s8 once per call; both are exact in int32, so
// the result is the same bit for bit. AVX2's vpmaddubsw would saturate there, so AVX2 never does.
constexpr int64_t kOnednnMinRows = 17;

std::atomic<int64_t> onednn_int8_calls{0}, onednn_int8_packed_calls{0};

// The many-row path's split of the tiles: one part per thread, but at most 256 tiles (1024 rows of
// W) each, so the per-thread buffers stay small even for an output head at prefill.
struct TileSplit {
  int64_t parts = 0, per = 0;
};
TileSplit SplitTiles(int64_t num_tiles, int64_t threads) {
  TileSplit s;
  s.parts = std::max(std::min<int64_t>(threads, (num_tiles + 15) / 16), (num_tiles + 255) / 256);
  s.per = (num_tiles + s.parts - 1) / s.parts;
  return s;
}

int64_t Threads(const ThreadPool* pool) { return pool == nullptr ? 1 : pool->num_threads() + 1; }

}  // namespace

class ManyRowInt8Weights {
 public:
  int64_t n = 0, k_padded = 0;  // of the weights it was packed from
  int64_t threads = 0;
  TileSplit split;
  std::vector<PackedS8Weights> parts;  // part p: W's columns [p·per·4, ..)
};

namespace {

// The oneDNN path for a.m >= kOnednnMinRows on VNNI CPUs: parts of the tiles, each multiplied by
// one single-threaded oneDNN call (on `packed`'s part when it fits this split, else on the part
// unpacked to s8 here), then the reference epilogue. False (nothing written that matters) when
// oneDNN has no int8 matmul here; the caller runs our kernels.
bool MatMulInt8Onednn(const QuantTileArgs& a, int64_t num_tiles, ThreadPool* pool, QuantIsa isa,
                      const ManyRowInt8Weights* packed) {
  static std::atomic<bool> unavailable{false};
  if (isa != QuantIsa::kAvx512Vnni || a.m < kOnednnMinRows || unavailable.load()) return false;
  const TileSplit split = SplitTiles(num_tiles, Threads(pool));
  if (packed != nullptr) {
    LAMINAR_CHECK(packed->n == a.n && packed->k_padded == a.k_padded)
        << "int8 weights packed from [" << packed->n << ", " << packed->k_padded << "] used for ["
        << a.n << ", " << a.k_padded << "]";
    if (packed->threads != Threads(pool)) packed = nullptr;
  }
  std::atomic<bool> failed{false}, all_packed{packed != nullptr};
  auto run = [&](int64_t pb, int64_t pe) {
    thread_local std::vector<int8_t> w;
    thread_local std::vector<int32_t> sums;
    for (int64_t part = pb; part < pe; ++part) {
      const int64_t t0 = part * split.per, t1 = std::min(num_tiles, t0 + split.per);
      if (t0 >= t1) continue;
      const int64_t col0 = t0 * kQuantTileN, nc = std::min(a.n, t1 * kQuantTileN) - col0;
      sums.resize(static_cast<size_t>(a.m * nc));
      Status st;
      if (packed != nullptr) {
        st = OnednnMatMulS8Packed(a.xq, a.k_padded, packed->parts[part], a.m, sums.data());
      }
      if (packed == nullptr || st.code() == StatusCode::kFailedPrecondition) {
        all_packed = false;
        w.resize(static_cast<size_t>((t1 - t0) * kQuantTileN * a.k_padded));
        avx512vnni::TilesToS8(a, t0, t1, w.data());
        st = OnednnMatMulS8(a.xq, a.k_padded, w.data(), a.m, nc, a.k_padded, sums.data());
      }
      if (!st.ok()) {
        LAMINAR_CHECK(st.code() == StatusCode::kUnimplemented) << st.ToString();
        failed = true;
        return;
      }
      avx512vnni::Epilogue(a, sums.data(), col0, nc);
    }
  };
  if (pool == nullptr || split.parts <= 1) {
    run(0, split.parts);
  } else {
    pool->ParallelFor(split.parts, 1, run);
  }
  if (failed) {
    unavailable = true;
    return false;
  }
  onednn_int8_calls.fetch_add(1);
  if (all_packed) onednn_int8_packed_calls.fetch_add(1);
  return true;
}

// The weight half of the operands (the activations' are TileArgs').
QuantTileArgs WeightArgs(const W8A8Weights& w) {
  QuantTileArgs a;
  a.n = w.n;
  a.k_padded = w.k_padded;
  a.w_u8 = w.u.data();
  return a;
}

QuantTileArgs WeightArgs(const W4A8Weights& w) {
  QuantTileArgs a;
  a.n = w.n;
  a.k_padded = w.k_padded;
  a.w_q4 = w.q4.data();
  a.group_scale = w.group_scale.data();
  a.group_offset = w.group_offset.data();
  a.group = w.group;
  a.num_groups = w.num_groups();
  return a;
}

std::shared_ptr<const ManyRowInt8Weights> PackTiles(const QuantTileArgs& a, int64_t num_tiles,
                                                    int64_t threads) {
  if (BestQuantIsa() != QuantIsa::kAvx512Vnni) return nullptr;
  auto out = std::make_shared<ManyRowInt8Weights>();
  out->n = a.n;
  out->k_padded = a.k_padded;
  out->threads = threads;
  out->split = SplitTiles(num_tiles, threads);
  std::vector<int8_t> w;
  for (int64_t part = 0; part < out->split.parts; ++part) {
    const int64_t t0 = part * out->split.per, t1 = std::min(num_tiles, t0 + out->split.per);
    const int64_t nc = std::max<int64_t>(0, std::min(a.n, t1 * kQuantTileN) - t0 * kQuantTileN);
    if (nc == 0) {
      out->parts.emplace_back();
      continue;
    }
    w.resize(static_cast<size_t>((t1 - t0) * kQuantTileN * a.k_padded));
    avx512vnni::TilesToS8(a, t0, t1, w.data());
    StatusOr<PackedS8Weights> p = PackedS8Weights::Pack(w.data(), nc, a.k_padded);
    if (!p.ok()) {
      LAMINAR_CHECK(p.status().code() == StatusCode::kUnimplemented) << p.status().ToString();
      return nullptr;
    }
    out->parts.push_back(*std::move(p));
  }
  return out;
}

}  // namespace

int64_t OnednnInt8MatMuls() { return onednn_int8_calls.load(); }
int64_t OnednnInt8PackedMatMuls() { return onednn_int8_packed_calls.load(); }

std::shared_ptr<const ManyRowInt8Weights> PackManyRowInt8(const W8A8Weights& w, int64_t threads) {
  return PackTiles(WeightArgs(w), w.num_tiles(), threads);
}

std::shared_ptr<const ManyRowInt8Weights> PackManyRowInt8(const W4A8Weights& w, int64_t threads) {
  return PackTiles(WeightArgs(w), w.num_tiles(), threads);
}

QuantIsa BestQuantIsa() {
  const char* env = std::getenv("LAMINAR_ISA");
  const std::string cap = env != nullptr ? env : "";
  if (cap == "scalar") return QuantIsa::kScalar;
  if (Available(QuantIsa::kAvx512Vnni) && cap != "avx2") return QuantIsa::kAvx512Vnni;
  return Available(QuantIsa::kAvx2) ? QuantIsa::kAvx2 : QuantIsa::kScalar;
}

std::vector<QuantIsa> AvailableQuantIsas() {
  std::vector<QuantIsa> out;
  for (QuantIsa isa : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
    if (Available(isa)) out.push_back(isa);
  }
  return out;
}

std::string QuantIsaName(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kScalar:
      return "scalar";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512Vnni:
      return "avx512vnni";
  }
  return "?";
}

void MatMulW8A8(const Int8Activations& x, const W8A8Weights& w, std::span<const float> bias,
                std::span<float> out, ThreadPool* pool, QuantIsa isa,
                const ManyRowInt8Weights* packed) {
  LAMINAR_CHECK(Available(isa)) << "this CPU cannot run " << QuantIsaName(isa);
  QuantTileArgs a = WeightArgs(w);
  TileArgs(x, w.k, w.channel_scale, bias, out, &a);
  if (MatMulInt8Onednn(a, w.num_tiles(), pool, isa, packed)) return;
  auto run = [&](int64_t b, int64_t e) {
    switch (isa) {
      case QuantIsa::kScalar:
        return scalar::W8A8Tiles(a, b, e);
      case QuantIsa::kAvx2:
        return avx2::W8A8Tiles(a, b, e);
      case QuantIsa::kAvx512Vnni:
        return avx512vnni::W8A8Tiles(a, b, e);
    }
  };
  Split(w.num_tiles(), MinTiles(x.m, w.k_padded), pool, run);
}

void MatMulW4A8(const Int8Activations& x, const W4A8Weights& w, std::span<const float> bias,
                std::span<float> out, ThreadPool* pool, QuantIsa isa,
                const ManyRowInt8Weights* packed) {
  LAMINAR_CHECK(Available(isa)) << "this CPU cannot run " << QuantIsaName(isa);
  QuantTileArgs a = WeightArgs(w);
  TileArgs(x, w.k, w.channel_scale, bias, out, &a);
  if (MatMulInt8Onednn(a, w.num_tiles(), pool, isa, packed)) return;
  auto run = [&](int64_t b, int64_t e) {
    thread_local std::vector<uint8_t> scratch;
    scratch.resize(static_cast<size_t>(w.k_padded * kQuantTileN));
    switch (isa) {
      case QuantIsa::kScalar:
        return scalar::W4A8Tiles(a, b, e, scratch.data());
      case QuantIsa::kAvx2:
        return avx2::W4A8Tiles(a, b, e, scratch.data());
      case QuantIsa::kAvx512Vnni:
        return avx512vnni::W4A8Tiles(a, b, e, scratch.data());
    }
  };
  Split(w.num_tiles(), MinTiles(x.m, w.k_padded), pool, run);
}

namespace {

// Offsets in GgufRowGroups::data of byte j of row `row`'s quants in block b, and of its d (its m
// lies kGgufRowGroup halves later).
int64_t GroupQuant(const GgufRowGroups& w, int64_t row, int64_t b, int64_t j) {
  const int64_t g = row / kGgufRowGroup;
  return (g * w.blocks_per_row() + b) * w.block_stride() + GroupQuantByte(row % kGgufRowGroup, j);
}
int64_t GroupScale(const GgufRowGroups& w, int64_t row, int64_t b) {
  const int64_t g = row / kGgufRowGroup, slot = row % kGgufRowGroup;
  return (g * w.blocks_per_row() + b) * w.block_stride() + w.quant_bytes() + 2 * slot;
}
// The f16 scales of a row's block: d, and m for Q4_1.
int64_t ScalesPerBlock(const GgufRowGroups& w) { return w.type == GgufQuantType::kQ4_1 ? 2 : 1; }

GgufRowGroups EmptyGroups(GgufQuantType type, int64_t n, int64_t k) {
  GgufRowGroups out;
  out.type = type;
  out.n = n;
  out.k = k;
  out.data.assign(static_cast<size_t>(out.groups() * out.blocks_per_row() * out.block_stride()), 0);
  return out;
}

// Row `dst_row` of `dst` = row `src_row` of `src` (same type and K).
void CopyGroupRow(const GgufRowGroups& src, int64_t src_row, GgufRowGroups* dst, int64_t dst_row) {
  const int64_t row_bytes = src.quant_bytes() / kGgufRowGroup;
  for (int64_t b = 0; b < src.blocks_per_row(); ++b) {
    for (int64_t c = 0; c < row_bytes; c += 4) {
      std::memcpy(dst->data.data() + GroupQuant(*dst, dst_row, b, c),
                  src.data.data() + GroupQuant(src, src_row, b, c), 4);
    }
    for (int64_t h = 0; h < ScalesPerBlock(src); ++h) {
      std::memcpy(dst->data.data() + GroupScale(*dst, dst_row, b) + 2 * kGgufRowGroup * h,
                  src.data.data() + GroupScale(src, src_row, b) + 2 * kGgufRowGroup * h, 2);
    }
  }
}

uint16_t ExactHalf(float v, const char* what) {
  const uint16_t h = FloatToHalf(v);
  const float back = HalfToFloat(h);
  LAMINAR_CHECK(back == v || (std::isnan(back) && std::isnan(v)))
      << "gguf " << what << " " << v << " is not an f16 value";
  return h;
}

}  // namespace

GgufRowGroups PackGgufRowGroups(const GgufQuantWeights& w) {
  GgufRowGroups out = EmptyGroups(w.type, w.n, w.k);
  const int64_t nb = w.blocks_per_row(), row_bytes = w.block_bytes();
  for (int64_t row = 0; row < w.n; ++row) {
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* qs = w.qs.data() + (row * nb + b) * row_bytes;
      for (int64_t c = 0; c < row_bytes; c += 4) {
        std::memcpy(out.data.data() + GroupQuant(out, row, b, c), qs + c, 4);
      }
      uint8_t* scale = out.data.data() + GroupScale(out, row, b);
      const uint16_t d = ExactHalf(w.d[row * nb + b], "d");
      std::memcpy(scale, &d, 2);
      if (w.type == GgufQuantType::kQ4_1) {
        const uint16_t m = ExactHalf(w.m[row * nb + b], "m");
        std::memcpy(scale + 2 * kGgufRowGroup, &m, 2);
      }
    }
  }
  return out;
}

GgufQuantWeights UnpackGgufRowGroups(const GgufRowGroups& w) {
  GgufQuantWeights out;
  out.type = w.type;
  out.n = w.n;
  out.k = w.k;
  const int64_t nb = w.blocks_per_row(), row_bytes = out.block_bytes();
  out.qs.resize(static_cast<size_t>(w.n * nb * row_bytes));
  out.d.resize(static_cast<size_t>(w.n * nb));
  if (w.type == GgufQuantType::kQ4_1) out.m.resize(out.d.size());
  for (int64_t row = 0; row < w.n; ++row) {
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t c = 0; c < row_bytes; c += 4) {
        std::memcpy(out.qs.data() + (row * nb + b) * row_bytes + c,
                    w.data.data() + GroupQuant(w, row, b, c), 4);
      }
      const uint8_t* scale = w.data.data() + GroupScale(w, row, b);
      uint16_t half;
      std::memcpy(&half, scale, 2);
      out.d[row * nb + b] = HalfToFloat(half);
      if (w.type == GgufQuantType::kQ4_1) {
        std::memcpy(&half, scale + 2 * kGgufRowGroup, 2);
        out.m[row * nb + b] = HalfToFloat(half);
      }
    }
  }
  return out;
}

GgufRowGroups GatherRows(const GgufRowGroups& w, std::span<const int32_t> rows) {
  GgufRowGroups out = EmptyGroups(w.type, std::ssize(rows), w.k);
  for (int64_t r = 0; r < out.n; ++r) {
    LAMINAR_CHECK(rows[r] >= 0 && rows[r] < w.n)
        << "gguf row " << rows[r] << " outside [0, " << w.n << ")";
    CopyGroupRow(w, rows[r], &out, r);
  }
  return out;
}

void MatMulGguf(const Q8BlockActivations& x, const GgufRowGroups& w, std::span<const float> bias,
                std::span<float> out, ThreadPool* pool, QuantIsa isa) {
  LAMINAR_CHECK(Available(isa)) << "this CPU cannot run " << QuantIsaName(isa);
  LAMINAR_CHECK(x.k == w.k) << "activations of K " << x.k << ", weights of K " << w.k;
  LAMINAR_CHECK(bias.empty() || static_cast<int64_t>(bias.size()) == w.n);
  LAMINAR_CHECK(static_cast<int64_t>(out.size()) == x.m * w.n);
  const int64_t nb = w.blocks_per_row();
  GgufGroupArgs a;
  a.type = static_cast<int>(w.type);
  a.xq = x.q.data();
  a.x_d = x.d.data();
  a.x_s = x.s.data();
  thread_local std::vector<int32_t> x_sum;
  if (w.type != GgufQuantType::kQ4_1) {  // their zero corrections need Σ x_q per block
    x_sum.resize(static_cast<size_t>(x.m * nb));
    for (int64_t b = 0; b < x.m * nb; ++b) {
      int32_t sum = 0;
      for (int64_t e = 0; e < kQuantChunk; ++e) sum += x.q[b * kQuantChunk + e];
      x_sum[b] = sum;
    }
    a.x_sum = x_sum.data();
  }
  a.m = x.m;
  a.n = w.n;
  a.k = w.k;
  a.w = w.data.data();
  a.quant_bytes = w.quant_bytes();
  a.block_stride = w.block_stride();
  a.bias = bias.empty() ? nullptr : bias.data();
  a.out = out.data();
  auto run = [&](int64_t b, int64_t e) {
    thread_local std::vector<int8_t> scratch;
    scratch.resize(static_cast<size_t>(kGgufScratchPerK * w.k));
    switch (isa) {
      case QuantIsa::kScalar:
        return scalar::GgufGroups(a, b, e, scratch.data());
      case QuantIsa::kAvx2:
        return avx2::GgufGroups(a, b, e, scratch.data());
      case QuantIsa::kAvx512Vnni:
        return avx512vnni::GgufGroups(a, b, e, scratch.data());
    }
  };
  // As many weight rows per part as the w8a8 kernels' 4 · MinTiles.
  const int64_t min_groups = std::max<int64_t>(1, 4 * MinTiles(x.m, w.k) / kGgufRowGroup);
  Split(w.groups(), min_groups, pool, run);
}

}  // namespace laminar::kernels::cpu
