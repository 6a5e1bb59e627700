// Dispatch of the vectorized row ops to the ISA-specific builds of vec_ops_impl.inc.
#include "kernels/cpu/vec_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/matmul.h"

namespace laminar::kernels::cpu {

#define LAMINAR_DECLARE_VEC_OPS(ns)                                                                \
  namespace ns {                                                                                   \
  float SumSquares(const float* x, int64_t n);                                                     \
  void ScaleMul(const float* x, const float* w, float scale, int64_t n, float* out);               \
  void SwiGlu(const float* gate, const float* up, int64_t n, float* out);                          \
  float RowMax(const float* x, int64_t n);                                                         \
  float SumExpShifted(const float* x, int64_t n, float shift);                                     \
  void ExpShiftedScaled(const float* x, int64_t n, float shift, float scale, float* out);          \
  void MatMulBF16Rows(const float* x, const uint16_t* w, int64_t m, int64_t k, int64_t n_total,    \
                      int64_t n_begin, int64_t n_end, float* out);                                 \
  void DotRows(const float* q, int64_t g, const float* rows, int64_t stride, int64_t n, int64_t d, \
               float scale, float* out, int64_t out_stride);                                       \
  void AxpyRows(const float* p, int64_t g, int64_t p_stride, const float* rows, int64_t stride,    \
                int64_t n, int64_t d, float* o);                                                   \
  double ExpScaledShiftedF64(const float* x, int64_t n, double scale, double shift, double* out);  \
  }
LAMINAR_DECLARE_VEC_OPS(scalar)
LAMINAR_DECLARE_VEC_OPS(avx2)
LAMINAR_DECLARE_VEC_OPS(avx512)
#undef LAMINAR_DECLARE_VEC_OPS

namespace {

struct VecOps {
  float (*sum_squares)(const float*, int64_t);
  void (*scale_mul)(const float*, const float*, float, int64_t, float*);
  void (*swiglu)(const float*, const float*, int64_t, float*);
  float (*row_max)(const float*, int64_t);
  float (*sum_exp_shifted)(const float*, int64_t, float);
  void (*exp_shifted_scaled)(const float*, int64_t, float, float, float*);
  void (*matmul_bf16_rows)(const float*, const uint16_t*, int64_t, int64_t, int64_t, int64_t,
                           int64_t, float*);
  // For each of g queries q_h = q + h·d: out[h·out_stride + j] = scale · (q_h · rows[j·stride ..
  // + d)), j < n; each (query, row) sum the same whatever g is.
  void (*dot_rows)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float, float*,
                   int64_t);
  // For each of g heads: o[h·d + (0, d)] += Σ_j p[h·p_stride + j] · rows[j·stride .. + d), j < n,
  // in order of j (the same sums whatever g is).
  void (*axpy_rows)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t,
                    float*);
  double (*exp_scaled_shifted_f64)(const float*, int64_t, double, double, double*);
};

#define LAMINAR_VEC_TABLE(ns)                                                                      \
  VecOps {                                                                                         \
    ns::SumSquares, ns::ScaleMul, ns::SwiGlu, ns::RowMax, ns::SumExpShifted, ns::ExpShiftedScaled, \
        ns::MatMulBF16Rows, ns::DotRows, ns::AxpyRows, ns::ExpScaledShiftedF64                     \
  }

const VecOps& Ops(Isa isa) {
  static const VecOps kScalar = LAMINAR_VEC_TABLE(scalar);
  static const VecOps kAvx2 = LAMINAR_VEC_TABLE(avx2);
  static const VecOps kAvx512 = LAMINAR_VEC_TABLE(avx512);
  const auto& f = GetCpuFeatures();
  switch (isa) {
    case Isa::kScalar:
      return kScalar;
    case Isa::kAvx2:
      LAMINAR_CHECK(f.avx2) << "AVX2 requested on a CPU without it";
      return kAvx2;
    case Isa::kAvx512:
      LAMINAR_CHECK(f.avx512) << "AVX-512 requested on a CPU without it";
      return kAvx512;
  }
  return kScalar;
}

// Below ~64k multiply-adds the wake-up of another thread costs more than it saves.
bool RunSerially(const ThreadPool* pool, int64_t multiply_adds) {
  return pool == nullptr || multiply_adds < (int64_t{1} << 16);
}

// log-sum-exp of one row: max pass, then exp-sum pass; both vectorized.
float RowLogSumExp(const VecOps& ops, const float* row, int64_t v) {
  float mx = ops.row_max(row, v);
  if (std::isinf(mx)) return mx;
  return mx + std::log(ops.sum_exp_shifted(row, v, mx));
}

}  // namespace

void MatMulBF16(std::span<const float> x, std::span<const uint16_t> w, int64_t m, int64_t n,
                int64_t k, std::span<float> out, ThreadPool* pool, Isa isa) {
  LAMINAR_CHECK(MatMulSizesMatch(x.size(), w.size(), /*bias_size=*/0, out.size(), m, n, k));
  const VecOps& ops = Ops(isa);
  auto run = [&](int64_t b, int64_t e) {
    ops.matmul_bf16_rows(x.data(), w.data(), m, k, n, b * 4, std::min(n, e * 4), out.data());
  };
  int64_t blocks = (n + 3) / 4;
  if (pool == nullptr) {
    run(0, blocks);
  } else {
    pool->ParallelFor(blocks, 16, run);
  }
}

void MatMulF32BatchInvariant(std::span<const float> x, std::span<const float> w,
                             std::span<const float> bias, int64_t m, int64_t n, int64_t k,
                             std::span<float> out, ThreadPool* pool, Isa isa) {
  LAMINAR_CHECK(MatMulSizesMatch(x.size(), w.size(), bias.size(), out.size(), m, n, k));
  const VecOps& ops = Ops(isa);
  // Blocks of weight rows that stay in L2 (256 KB) while every activation row passes over them.
  const int64_t rows_per_block = std::max<int64_t>(16, (int64_t{256} << 10) / (4 * k) / 16 * 16);
  auto run = [&](int64_t b, int64_t e) {
    for (int64_t n0 = b * 16; n0 < std::min(n, e * 16); n0 += rows_per_block) {
      const int64_t n1 = std::min({n, e * 16, n0 + rows_per_block});
      ops.dot_rows(x.data(), m, w.data() + n0 * k, k, n1 - n0, k, 1.0f, out.data() + n0, n);
      if (bias.empty()) continue;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = n0; j < n1; ++j) out[i * n + j] += bias[j];
      }
    }
  };
  const int64_t blocks = (n + 15) / 16;
  if (RunSerially(pool, m * n * k)) {
    run(0, blocks);
  } else {
    pool->ParallelFor(blocks, 4, run);
  }
}

void CausalAttention(std::span<const float> q, std::span<const float> k_cache,
                     std::span<const float> v_cache, std::span<const int32_t> positions, int64_t t,
                     int64_t h, int64_t hkv, int64_t d, int64_t s, std::span<float> out,
                     ThreadPool* pool, Isa isa) {
  LAMINAR_CHECK(s > 0 && static_cast<int64_t>(k_cache.size()) == s * hkv * d &&
                static_cast<int64_t>(v_cache.size()) == s * hkv * d);
  const int32_t one_block[] = {0};
  BlockedCausalAttention(q, k_cache, v_cache, one_block, s, positions, t, h, hkv, d, out, pool,
                         isa);
}

namespace {

// Head dimensions up to this many floats attend over transposed keys and values
// (AttendTransposed): a dot product of a few floats per key is mostly horizontal sums.
constexpr int64_t kSmallHeadDim = 16;

// Shapes and block ids of an attention call (LAMINAR_CHECK).
void CheckAttentionShapes(std::span<const float> q, std::span<const float> k_rows,
                          std::span<const float> v_rows, std::span<const int32_t> block_table,
                          int64_t block_size, int64_t t, int64_t h, int64_t hkv, int64_t d,
                          std::span<float> out) {
  LAMINAR_CHECK(block_size > 0 && hkv > 0 && d > 0);
  LAMINAR_CHECK_EQ(h % hkv, 0);
  const int64_t row_floats = hkv * d;
  LAMINAR_CHECK(k_rows.size() == v_rows.size() &&
                static_cast<int64_t>(k_rows.size()) % (block_size * row_floats) == 0 &&
                static_cast<int64_t>(q.size()) == t * h * d &&
                static_cast<int64_t>(out.size()) == t * h * d);
  const int64_t num_blocks = static_cast<int64_t>(k_rows.size()) / (block_size * row_floats);
  for (int32_t block : block_table) {
    LAMINAR_CHECK(block >= 0 && block < num_blocks)
        << "block id " << block << " outside the pool of " << num_blocks;
  }
}

// Scores of the transposed path are padded to whole vectors of the widest ISA (the padded ones
// -inf), so AxpyRows and the softmax run no scalar tail on any ISA.
constexpr int64_t kSlotPad = 16;
int64_t PaddedSlots(int64_t n) { return (n + kSlotPad - 1) / kSlotPad * kSlotPad; }

// Copies the keys and values of KV heads [kvh0, kvh1) at the n visible slots that segments lists
// into kt, vt [kvh1 - kvh0, d, ld]: kt[(kvh - kvh0) · d · ld + j · ld + p] = K(slot p)[kvh, j].
// Columns n..ld-1 are zeroed (ld >= n).
template <typename Segments>
void GatherTransposed(std::span<const float> k_rows, std::span<const float> v_rows, int64_t hkv,
                      int64_t d, int64_t kvh0, int64_t kvh1, int64_t n, int64_t ld,
                      Segments&& segments, float* kt, float* vt) {
  const int64_t floats = (kvh1 - kvh0) * d;
  segments([&](int64_t p0, int64_t row0, int64_t count) {
    for (int64_t r = 0; r < count; ++r) {
      const float* kr = &k_rows[((row0 + r) * hkv + kvh0) * d];
      const float* vr = &v_rows[((row0 + r) * hkv + kvh0) * d];
      for (int64_t e = 0; e < floats; ++e) {
        kt[e * ld + p0 + r] = kr[e];
        vt[e * ld + p0 + r] = vr[e];
      }
    }
  });
  for (int64_t e = 0; e < floats; ++e) {
    std::fill(kt + e * ld + n, kt + (e + 1) * ld, 0.0f);
    std::fill(vt + e * ld + n, vt + (e + 1) * ld, 0.0f);
  }
}

// Attention of g query heads q [g, D] (sharing one KV head) over the n slots of kt, vt [D, ld]
// (transposed keys and values; columns n..PaddedSlots(n)-1 <= ld exist but may hold other
// tokens' keys): scores by broadcast multiply-adds over the padded slots (AxpyRows, summed in order
// of the head dimension), the padded ones set to -inf, softmax, then out [g, D] as dot products
// over the n slots (DotRows, whose zero-padded last vector sums in the same lanes, so values past
// n are never read). Each head's result is the same whatever g is. scratch holds
// g · (D + PaddedSlots(n)) floats.
void AttendTransposed(const VecOps& ops, const float* q, int64_t g, int64_t d, const float* kt,
                      const float* vt, int64_t ld, int64_t n, float scale, float* scratch,
                      float* out) {
  const int64_t np = PaddedSlots(n);
  float* qs = scratch;  // the queries times 1/sqrt(D)
  float* scores = scratch + g * d;
  for (int64_t e = 0; e < g * d; ++e) qs[e] = q[e] * scale;
  std::fill(scores, scores + g * np, 0.0f);
  ops.axpy_rows(qs, g, d, kt, ld, d, np, scores);
  for (int64_t hh = 0; hh < g; ++hh) {
    float* s = scores + hh * np;
    // Padded slots get probability exp(-inf) = 0 and change neither the max nor the sum.
    std::fill(s + n, s + np, -std::numeric_limits<float>::infinity());
    const float mx = ops.row_max(s, np);
    const float sum = ops.sum_exp_shifted(s, np, mx);
    ops.exp_shifted_scaled(s, np, mx, 1.0f / sum, s);
  }
  // Scores of head hh start at hh · np; DotRows reads query rows at its length's stride, so one
  // head at a time.
  for (int64_t hh = 0; hh < g; ++hh)
    ops.dot_rows(scores + hh * np, 1, vt, ld, d, n, 1.0f, out + hh * d, d);
}

// Kept whole: an inner kernel (dot products, online softmax and value accumulation per segment)
// whose registers-held state a split would spill.
// Grouped-query attention of each query i over the key/value rows that segments(i, body) lists:
// body(p0, row0, n) names n consecutive slots p0.. of the query's visible set (p0 the index in
// the score vector, in order) stored at rows row0.. of k_rows / v_rows. `num_visible(i)` is the
// total. When `prefix_sets`, every query's visible set is a prefix of the largest one's (causal
// attention), so head dimensions up to kSmallHeadDim transpose the keys and values once per call
// rather than once per query. Shapes as BlockedCausalAttention.
template <typename NumVisible, typename Segments>
void AttendSegments(std::span<const float> q, std::span<const float> k_rows,
                    std::span<const float> v_rows, std::span<const int32_t> block_table,
                    int64_t block_size, int64_t t, int64_t h, int64_t hkv, int64_t d,
                    int64_t max_visible, bool prefix_sets, std::span<float> out, ThreadPool* pool,
                    Isa isa, NumVisible&& num_visible, Segments&& segments) {
  CheckAttentionShapes(q, k_rows, v_rows, block_table, block_size, t, h, hkv, d, out);
  const int64_t row_floats = hkv * d;
  const VecOps& ops = Ops(isa);
  // A head dimension that is a multiple of 8 but not of 16 would leave the AVX-512 build's
  // AxpyRows in its per-element tail; the AVX2 build's 8 lanes cover it.
  const VecOps& row_ops = Ops(isa == Isa::kAvx512 && d % 16 != 0 && d % 8 == 0 ? Isa::kAvx2 : isa);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // A job is one token's group of query heads that share a KV head (grouped-query attention): each
  // K and V row is loaded once for the group. With few tokens on several threads (decode of one
  // sequence) a job is one head, so every thread gets work; each head's sums are the same either
  // way.
  const int64_t group = h / hkv;
  const bool serial = RunSerially(pool, t * h * max_visible * d);
  const int64_t per_job = serial || t * hkv >= 8 ? group : 1;
  const int64_t jobs = t * h / per_job;
  const bool transposed = d <= kSmallHeadDim;
  // Transposed keys and values of every KV head over the largest visible set, shared by all jobs.
  int64_t shared_ld = 0;
  thread_local std::vector<float> shared_kv;
  if (transposed && prefix_sets && t > 0) {
    int64_t widest = 0;
    for (int64_t i = 1; i < t; ++i) widest = num_visible(i) > num_visible(widest) ? i : widest;
    shared_ld = PaddedSlots(num_visible(widest));
    shared_kv.resize(static_cast<size_t>(2 * row_floats * shared_ld));
    GatherTransposed(
        k_rows, v_rows, hkv, d, 0, hkv, num_visible(widest), shared_ld,
        [&](auto&& body) { segments(widest, body); }, shared_kv.data(),
        shared_kv.data() + row_floats * shared_ld);
  }
  const float* shared = shared_kv.data();  // the pool's threads have their own thread_locals
  auto run = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;  // a decode step calls this per sequence and layer
    thread_local std::vector<float> kv;      // one query's transposed keys and values
    const int64_t scratch =
        transposed ? per_job * (d + PaddedSlots(max_visible)) : per_job * max_visible;
    scores.resize(static_cast<size_t>(scratch));
    for (int64_t job = begin; job < end; ++job) {
      const int64_t i = job * per_job / h, head = job * per_job % h, kvh = head / group;
      const int64_t n_visible = num_visible(i);
      const float* qv = &q[(i * h + head) * d];
      float* o = &out[(i * h + head) * d];
      if (transposed) {
        const float *kt, *vt;
        int64_t ld = shared_ld;
        if (prefix_sets) {
          kt = shared + kvh * d * ld;
          vt = kt + row_floats * ld;
        } else {
          ld = PaddedSlots(n_visible);
          kv.resize(static_cast<size_t>(2 * d * ld));
          GatherTransposed(
              k_rows, v_rows, hkv, d, kvh, kvh + 1, n_visible, ld,
              [&](auto&& body) { segments(i, body); }, kv.data(), kv.data() + d * ld);
          kt = kv.data();
          vt = kt + d * ld;
        }
        AttendTransposed(ops, qv, per_job, d, kt, vt, ld, n_visible, scale, scores.data(), o);
        continue;
      }
      segments(i, [&](int64_t p0, int64_t row0, int64_t n) {
        row_ops.dot_rows(qv, per_job, &k_rows[(row0 * hkv + kvh) * d], row_floats, n, d, scale,
                         &scores[p0], max_visible);
      });
      for (int64_t g = 0; g < per_job; ++g) {
        float* sg = scores.data() + g * max_visible;
        float mx = ops.row_max(sg, n_visible);
        float sum = ops.sum_exp_shifted(sg, n_visible, mx);
        ops.exp_shifted_scaled(sg, n_visible, mx, 1.0f / sum, sg);
      }
      std::fill(o, o + per_job * d, 0.0f);
      segments(i, [&](int64_t p0, int64_t row0, int64_t n) {
        row_ops.axpy_rows(&scores[p0], per_job, max_visible, &v_rows[(row0 * hkv + kvh) * d],
                          row_floats, n, d, o);
      });
    }
  };
  if (serial) {
    run(0, jobs);
  } else {
    pool->ParallelFor(jobs, std::max<int64_t>(1, 4 / per_job), run);
  }
}

}  // namespace

void BlockedCausalAttention(std::span<const float> q, std::span<const float> k_rows,
                            std::span<const float> v_rows, std::span<const int32_t> block_table,
                            int64_t block_size, std::span<const int32_t> positions, int64_t t,
                            int64_t h, int64_t hkv, int64_t d, std::span<float> out,
                            ThreadPool* pool, Isa isa) {
  LAMINAR_CHECK_GE(static_cast<int64_t>(positions.size()), t);
  // Token slots the table reaches (S for a contiguous cache).
  const int64_t s = static_cast<int64_t>(block_table.size()) * block_size;
  for (int64_t i = 0; i < t; ++i) {
    LAMINAR_CHECK(positions[i] >= 0 && positions[i] < s)
        << "position " << positions[i] << " outside cache of " << s;
  }
  AttendSegments(
      q, k_rows, v_rows, block_table, block_size, t, h, hkv, d, s, /*prefix_sets=*/true, out, pool,
      isa, [&](int64_t i) { return int64_t{positions[i]} + 1; },
      [&](int64_t i, auto&& body) {
        const int64_t last = positions[i];
        for (int64_t b = 0, p0 = 0; p0 <= last; ++b, p0 += block_size) {
          body(p0, block_table[b] * block_size, std::min(block_size, last + 1 - p0));
        }
      });
}

void BlockedTreeAttention(std::span<const float> q, std::span<const float> k_rows,
                          std::span<const float> v_rows, std::span<const int32_t> block_table,
                          int64_t block_size, int64_t prefix, std::span<const uint64_t> ancestors,
                          int64_t t, int64_t h, int64_t hkv, int64_t d, std::span<float> out,
                          ThreadPool* pool, Isa isa) {
  LAMINAR_CHECK(static_cast<int64_t>(ancestors.size()) == t && t <= 64 && prefix >= 0);
  const int64_t s = static_cast<int64_t>(block_table.size()) * block_size;
  LAMINAR_CHECK(prefix + t <= s) << "tree slots " << prefix << ".." << prefix + t - 1
                                 << " outside cache of " << s;
  for (int64_t i = 0; i < t; ++i) {
    LAMINAR_CHECK(ancestors[i] >> i == 1) << "tree token " << i << " must see itself, no later";
  }
  auto row_of = [&](int64_t p) {
    return block_table[p / block_size] * block_size + p % block_size;
  };
  AttendSegments(
      q, k_rows, v_rows, block_table, block_size, t, h, hkv, d, prefix + t,
      /*prefix_sets=*/false, out, pool, isa,
      [&](int64_t i) { return prefix + std::popcount(ancestors[i]); },
      [&](int64_t i, auto&& body) {
        for (int64_t b = 0, p0 = 0; p0 < prefix; ++b, p0 += block_size) {
          body(p0, block_table[b] * block_size, std::min(block_size, prefix - p0));
        }
        int64_t p0 = prefix;
        for (int64_t j = 0; j <= i; ++j) {
          if (ancestors[i] >> j & 1) body(p0++, row_of(prefix + j), 1);
        }
      });
}

void Embedding(std::span<const float> table, std::span<const int32_t> ids, int64_t c,
               std::span<float> out) {
  LAMINAR_CHECK(c > 0 && static_cast<int64_t>(table.size()) % c == 0 &&
                out.size() == ids.size() * static_cast<size_t>(c));
  const int64_t v = static_cast<int64_t>(table.size()) / c;
  for (size_t i = 0; i < ids.size(); ++i) {
    LAMINAR_CHECK(ids[i] >= 0 && ids[i] < v)
        << "token id " << ids[i] << " at index " << i << " outside the vocabulary of " << v;
    std::memcpy(&out[i * c], &table[ids[i] * c], sizeof(float) * c);
  }
}

void RmsNorm(std::span<const float> x, std::span<const float> weight, int64_t t, int64_t c,
             double eps, std::span<float> out, Isa isa) {
  LAMINAR_CHECK(static_cast<int64_t>(x.size()) == t * c &&
                static_cast<int64_t>(weight.size()) == c);
  const VecOps& ops = Ops(isa);
  for (int64_t i = 0; i < t; ++i) {
    float ss = ops.sum_squares(&x[i * c], c);
    float inv = static_cast<float>(1.0 / std::sqrt(double(ss) / double(c) + eps));
    ops.scale_mul(&x[i * c], weight.data(), inv, c, &out[i * c]);
  }
}

void SwiGlu(std::span<const float> gate, std::span<const float> up, std::span<float> out, Isa isa) {
  LAMINAR_CHECK(gate.size() == up.size() && up.size() == out.size());
  Ops(isa).swiglu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), out.data());
}

void LogSumExp(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out, Isa isa) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(logits.size()), t * v);
  const VecOps& ops = Ops(isa);
  for (int64_t i = 0; i < t; ++i) out[i] = RowLogSumExp(ops, &logits[i * v], v);
}

void Softmax(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out, Isa isa) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(logits.size()), t * v);
  const VecOps& ops = Ops(isa);
  for (int64_t i = 0; i < t; ++i) {
    const float* row = &logits[i * v];
    float mx = ops.row_max(row, v);
    float sum = ops.sum_exp_shifted(row, v, mx);
    ops.exp_shifted_scaled(row, v, mx, 1.0f / sum, &out[i * v]);
  }
}

void TokenLogprobs(std::span<const float> logits, std::span<const int32_t> targets, int64_t t,
                   int64_t v, std::span<float> out, Isa isa) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(logits.size()), t * v);
  const VecOps& ops = Ops(isa);
  for (int64_t i = 0; i < t; ++i) {
    LAMINAR_CHECK(targets[i] >= 0 && targets[i] < v) << "target " << targets[i];
    out[i] = logits[i * v + targets[i]] - RowLogSumExp(ops, &logits[i * v], v);
  }
}

double ExpScaledShiftedF64(std::span<const float> x, double scale, double shift,
                           std::span<double> out, Isa isa) {
  LAMINAR_CHECK_EQ(x.size(), out.size());
  return Ops(isa).exp_scaled_shifted_f64(x.data(), static_cast<int64_t>(x.size()), scale, shift,
                                         out.data());
}

}  // namespace laminar::kernels::cpu
