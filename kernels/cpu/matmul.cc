// oneDNN matmul. Each thread keeps the primitives it built, by shape (CachedMatMul): building a
// primitive descriptor runs oneDNN's implementation search (tens of microseconds, more than a tiny
// model's whole matmul), and oneDNN's own primitive cache still needs the descriptor.
#include "kernels/cpu/matmul.h"

#include <omp.h>

#include <algorithm>
#include <dnnl.hpp>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/vec_ops.h"

namespace laminar::kernels::cpu {
namespace {

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// The shape of one matmul call: what its primitive depends on (not the pointers).
struct MatMulShape {
  int kind = 0;  // 0 f32, 1 bf16, 2 s8 plain weights, 3 s8 weights in oneDNN's layout
  int64_t m = 0, n = 0, k = 0, ldx = 0, ldo = 0;
  bool bias = false;
  bool operator==(const MatMulShape&) const = default;
};
struct MatMulShapeHash {
  size_t operator()(const MatMulShape& s) const {
    uint64_t h = static_cast<uint64_t>(s.kind) * 2 + (s.bias ? 1 : 0);
    for (int64_t v : {s.m, s.n, s.k, s.ldx, s.ldo}) {
      h = (h ^ static_cast<uint64_t>(v)) * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing
    }
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
struct CachedPrimitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
};

// This thread's primitive for `shape`, built by build() (a primitive_desc) on first use. The
// cache is per thread (primitives and their scratchpads are never shared between threads) and
// emptied when it holds 1024 shapes (a rollout sees at most a few hundred M values).
template <typename Build>
const CachedPrimitive& CachedMatMul(const MatMulShape& shape, Build&& build) {
  thread_local std::unordered_map<MatMulShape, CachedPrimitive, MatMulShapeHash> cache;
  auto it = cache.find(shape);
  if (it != cache.end()) return it->second;
  if (cache.size() >= 1024) cache.clear();
  dnnl::matmul::primitive_desc pd = build();
  dnnl::matmul prim(pd);
  return cache.emplace(shape, CachedPrimitive{std::move(pd), std::move(prim)}).first->second;
}

dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

Status SizeMismatch(int64_t m, int64_t n, int64_t k) {
  return InvalidArgumentError("matmul: sizes do not match M=" + std::to_string(m) +
                              " N=" + std::to_string(n) + " K=" + std::to_string(k));
}

// A oneDNN failure of a `dtype` matmul: Unimplemented when oneDNN has no such matmul for this CPU,
// Internal otherwise.
Status StatusOf(const dnnl::error& e, const char* dtype) {
  if (e.status == dnnl_unimplemented) {
    return UnimplementedError(std::string("oneDNN has no ") + dtype +
                              " matmul for this CPU: " + e.what());
  }
  return InternalError(std::string("oneDNN ") + dtype + " matmul failed: " + e.what());
}

// out[:, n0:n0+nc] for one slice of weight rows; the caller's thread, one OpenMP thread. T is
// float (f32 x and w) or uint16_t (bf16 x and w); out is f32.
template <typename T>
Status MatMulSlice(const T* x, const T* w, const float* bias, int64_t m, int64_t n, int64_t k,
                   int64_t n0, int64_t nc, float* out) {
  using dt = dnnl::memory::data_type;
  constexpr dt kIn = std::is_same_v<T, float> ? dt::f32 : dt::bf16;
  omp_set_num_threads(1);
  try {
    auto& engine = CpuEngine();
    const MatMulShape shape{kIn == dt::f32 ? 0 : 1, m, nc, k, k, n, bias != nullptr};
    const CachedPrimitive& c = CachedMatMul(shape, [&] {
      dnnl::memory::desc src_md({m, k}, kIn, dnnl::memory::dims{k, 1});
      dnnl::memory::desc wei_md({k, nc}, kIn,
                                dnnl::memory::dims{1, k});  // rows [n0, n0+nc) of [N, K]
      dnnl::memory::desc dst_md({m, nc}, dt::f32, dnnl::memory::dims{n, 1});
      dnnl::memory::desc bias_md;
      if (bias != nullptr) {
        bias_md = dnnl::memory::desc({1, nc}, dt::f32, dnnl::memory::dims{nc, 1});
      }
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md),
                                          engine);
    });
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(c.pd.src_desc(), engine, const_cast<T*>(x))},
        {DNNL_ARG_WEIGHTS, dnnl::memory(c.pd.weights_desc(), engine, const_cast<T*>(w + n0 * k))},
        {DNNL_ARG_DST, dnnl::memory(c.pd.dst_desc(), engine, out + n0)}};
    if (bias != nullptr) {
      args[DNNL_ARG_BIAS] = dnnl::memory(c.pd.bias_desc(), engine, const_cast<float*>(bias + n0));
    }
    dnnl::stream& stream = ThreadStream();
    c.prim.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    return StatusOf(e, kIn == dt::f32 ? "f32" : "bf16");
  }
  return OkStatus();
}

template <typename T>
Status MatMulOf(std::span<const T> x, std::span<const T> w, std::span<const float> bias, int64_t m,
                int64_t n, int64_t k, std::span<float> out, ThreadPool* pool) {
  if (!MatMulSizesMatch(x.size(), w.size(), bias.size(), out.size(), m, n, k)) {
    return SizeMismatch(m, n, k);
  }
  if (m == 0 || n == 0) return OkStatus();
  const float* b = bias.empty() ? nullptr : bias.data();
  // Slices of at least 64 columns, at most one per thread.
  // Small products (a tiny model's decode step) run on the caller: a wake-up costs more.
  int64_t parts = pool == nullptr || m * n * k < (int64_t{1} << 16)
                      ? 1
                      : std::min<int64_t>(pool->num_threads() + 1, (n + 63) / 64);
  if (parts <= 1) return MatMulSlice(x.data(), w.data(), b, m, n, k, 0, n, out.data());
  int64_t per = ((n + parts - 1) / parts + 15) / 16 * 16;
  std::vector<Status> status(static_cast<size_t>(parts));
  pool->ParallelFor(parts, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      int64_t n0 = p * per, nc = std::min(n, n0 + per) - n0;
      if (nc > 0) status[p] = MatMulSlice(x.data(), w.data(), b, m, n, k, n0, nc, out.data());
    }
  });
  for (const auto& st : status) LAMINAR_RETURN_IF_ERROR(st);
  return OkStatus();
}

}  // namespace

Status MatMul(std::span<const float> x, std::span<const float> w, std::span<const float> bias,
              int64_t m, int64_t n, int64_t k, std::span<float> out, ThreadPool* pool) {
  if (!MatMulSizesMatch(x.size(), w.size(), bias.size(), out.size(), m, n, k)) {
    return SizeMismatch(m, n, k);
  }
  if (m > 0 && n > 0) MatMulF32BatchInvariant(x, w, bias, m, n, k, out, pool);
  return OkStatus();
}

Status OnednnMatMulF32(std::span<const float> x, std::span<const float> w,
                       std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                       std::span<float> out, ThreadPool* pool) {
  return MatMulOf(x, w, bias, m, n, k, out, pool);
}

Status OnednnMatMulS8(const int8_t* x, int64_t ldx, const int8_t* w, int64_t m, int64_t n,
                      int64_t k, int32_t* out) {
  using dt = dnnl::memory::data_type;
  omp_set_num_threads(1);
  try {
    auto& engine = CpuEngine();
    const CachedPrimitive& c = CachedMatMul(MatMulShape{2, m, n, k, ldx, n, false}, [&] {
      dnnl::memory::desc src_md({m, k}, dt::s8, dnnl::memory::dims{ldx, 1});
      dnnl::memory::desc wei_md({k, n}, dt::s8, dnnl::memory::dims{1, k});
      dnnl::memory::desc dst_md({m, n}, dt::s32, dnnl::memory::dims{n, 1});
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, dst_md), engine);
    });
    dnnl::stream& stream = ThreadStream();
    c.prim.execute(
        stream,
        {{DNNL_ARG_SRC, dnnl::memory(c.pd.src_desc(), engine, const_cast<int8_t*>(x))},
         {DNNL_ARG_WEIGHTS, dnnl::memory(c.pd.weights_desc(), engine, const_cast<int8_t*>(w))},
         {DNNL_ARG_DST, dnnl::memory(c.pd.dst_desc(), engine, out)}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return StatusOf(e, "s8");
  }
  return OkStatus();
}

struct PackedS8Weights::Impl {
  dnnl::memory::desc desc;
  dnnl::memory memory;
};

namespace {

// The int8 matmul of M rows on K×N weights in the layout oneDNN picks (format_tag::any).
dnnl::matmul::primitive_desc S8PrimitiveAnyWeights(int64_t m, int64_t ldx, int64_t n, int64_t k) {
  using dt = dnnl::memory::data_type;
  dnnl::memory::desc src_md({m, k}, dt::s8, dnnl::memory::dims{ldx, 1});
  dnnl::memory::desc wei_md({k, n}, dt::s8, dnnl::memory::format_tag::any);
  dnnl::memory::desc dst_md({m, n}, dt::s32, dnnl::memory::dims{n, 1});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, dst_md), CpuEngine());
}

}  // namespace

StatusOr<PackedS8Weights> PackedS8Weights::Pack(const int8_t* w, int64_t n, int64_t k) {
  omp_set_num_threads(1);
  PackedS8Weights out;
  out.n_ = n;
  out.k_ = k;
  try {
    auto& engine = CpuEngine();
    // The layout for 32 rows; calls check that theirs is the same.
    dnnl::matmul::primitive_desc pd = S8PrimitiveAnyWeights(32, k, n, k);
    dnnl::memory::desc plain({k, n}, dnnl::memory::data_type::s8, dnnl::memory::dims{1, k});
    dnnl::memory src(plain, engine, const_cast<int8_t*>(w));
    auto impl = std::make_shared<Impl>();
    impl->desc = pd.weights_desc();
    impl->memory = dnnl::memory(impl->desc, engine);
    dnnl::stream stream(engine);
    dnnl::reorder(src, impl->memory).execute(stream, src, impl->memory);
    stream.wait();
    out.impl_ = std::move(impl);
  } catch (const dnnl::error& e) {
    return StatusOf(e, "s8");
  }
  return out;
}

Status OnednnMatMulS8Packed(const int8_t* x, int64_t ldx, const PackedS8Weights& w, int64_t m,
                            int32_t* out) {
  omp_set_num_threads(1);
  try {
    auto& engine = CpuEngine();
    const CachedPrimitive& c =
        CachedMatMul(MatMulShape{3, m, w.n(), w.k(), ldx, w.n(), false},
                     [&] { return S8PrimitiveAnyWeights(m, ldx, w.n(), w.k()); });
    if (c.pd.weights_desc() != w.impl_->desc) {
      return FailedPreconditionError("oneDNN wants another int8 weight layout for " +
                                     std::to_string(m) + " rows");
    }
    dnnl::stream& stream = ThreadStream();
    c.prim.execute(stream,
                   {{DNNL_ARG_SRC, dnnl::memory(c.pd.src_desc(), engine, const_cast<int8_t*>(x))},
                    {DNNL_ARG_WEIGHTS, w.impl_->memory},
                    {DNNL_ARG_DST, dnnl::memory(c.pd.dst_desc(), engine, out)}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return StatusOf(e, "s8");
  }
  return OkStatus();
}

Status OnednnMatMulBF16(std::span<const uint16_t> x, std::span<const uint16_t> w,
                        std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                        std::span<float> out, ThreadPool* pool) {
  return MatMulOf(x, w, bias, m, n, k, out, pool);
}

}  // namespace laminar::kernels::cpu
