// Reference paged attention: ref::CausalAttention's loops with each position's row looked up
// through the block table.
#include "kernels/reference/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"

namespace laminar::kernels::ref {
namespace {

// Row index in the pool [*, Hkv, D] viewed as [num_blocks * block_size] rows of Hkv * D floats.
int64_t SlotRow(std::span<const int32_t> block_table, int64_t block_size, int64_t num_blocks,
                int64_t p) {
  LAMINAR_CHECK(p >= 0 && p < static_cast<int64_t>(block_table.size()) * block_size)
      << "position " << p << " outside the block table's " << block_table.size() << " blocks of "
      << block_size;
  int64_t block = block_table[p / block_size];
  LAMINAR_CHECK(block >= 0 && block < num_blocks)
      << "block id " << block << " outside the pool of " << num_blocks;
  return block * block_size + p % block_size;
}

int64_t NumBlocks(size_t pool_size, int64_t block_size, int64_t hkv, int64_t d) {
  LAMINAR_CHECK(block_size > 0 && hkv > 0 && d > 0);
  int64_t block_floats = block_size * hkv * d;
  LAMINAR_CHECK_EQ(static_cast<int64_t>(pool_size) % block_floats, 0);
  return static_cast<int64_t>(pool_size) / block_floats;
}

// Softmax attention of one query head over the key/value rows `rows` of the pool (f64
// accumulation): out[e] = sum_r softmax(q . k_r * scale)_r v_r[e].
void AttendRows(const float* qv, std::span<const float> k_pool, std::span<const float> v_pool,
                std::span<const int64_t> rows, int64_t hkv, int64_t kvh, int64_t d, double scale,
                std::vector<double>& scores, float* o) {
  const size_t n = rows.size();
  scores.resize(n);
  double mx = -std::numeric_limits<double>::infinity();
  for (size_t p = 0; p < n; ++p) {
    const float* kv = k_pool.data() + (rows[p] * hkv + kvh) * d;
    double dot = 0;
    for (int64_t e = 0; e < d; ++e) dot += double(qv[e]) * double(kv[e]);
    scores[p] = dot * scale;
    mx = std::max(mx, scores[p]);
  }
  double sum = 0;
  for (size_t p = 0; p < n; ++p) sum += (scores[p] = std::exp(scores[p] - mx));
  for (int64_t e = 0; e < d; ++e) {
    double acc = 0;
    for (size_t p = 0; p < n; ++p) acc += scores[p] * v_pool[(rows[p] * hkv + kvh) * d + e];
    o[e] = static_cast<float>(acc / sum);
  }
}

// Attention of each query i of q [T, H, D] over the rows `visible(i, rows)` fills in.
template <typename Visible>
void AttendEach(std::span<const float> q, std::span<const float> k_pool,
                std::span<const float> v_pool, int64_t t, int64_t h, int64_t hkv, int64_t d,
                std::span<float> out, Visible&& visible) {
  LAMINAR_CHECK_EQ(h % hkv, 0);
  LAMINAR_CHECK(k_pool.size() == v_pool.size() && static_cast<int64_t>(q.size()) == t * h * d &&
                static_cast<int64_t>(out.size()) == t * h * d);
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> scores;
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < t; ++i) {
    rows.clear();
    visible(i, rows);
    for (int64_t head = 0; head < h; ++head) {
      AttendRows(q.data() + (i * h + head) * d, k_pool, v_pool, rows, hkv, head / (h / hkv), d,
                 scale, scores, out.data() + (i * h + head) * d);
    }
  }
}

}  // namespace

void PagedCausalAttention(std::span<const float> q, std::span<const float> k_pool,
                          std::span<const float> v_pool, std::span<const int32_t> block_table,
                          int64_t block_size, std::span<const int32_t> positions, int64_t t,
                          int64_t h, int64_t hkv, int64_t d, std::span<float> out) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(positions.size()), t);
  const int64_t num_blocks = NumBlocks(k_pool.size(), block_size, hkv, d);
  AttendEach(q, k_pool, v_pool, t, h, hkv, d, out, [&](int64_t i, std::vector<int64_t>& rows) {
    LAMINAR_CHECK(positions[i] >= 0) << "position " << positions[i];
    for (int64_t p = 0; p <= positions[i]; ++p)
      rows.push_back(SlotRow(block_table, block_size, num_blocks, p));
  });
}

void PagedTreeAttention(std::span<const float> q, std::span<const float> k_pool,
                        std::span<const float> v_pool, std::span<const int32_t> block_table,
                        int64_t block_size, int64_t prefix, std::span<const uint64_t> ancestors,
                        int64_t t, int64_t h, int64_t hkv, int64_t d, std::span<float> out) {
  LAMINAR_CHECK(static_cast<int64_t>(ancestors.size()) == t && t <= kMaxTreeTokens && prefix >= 0);
  const int64_t num_blocks = NumBlocks(k_pool.size(), block_size, hkv, d);
  AttendEach(q, k_pool, v_pool, t, h, hkv, d, out, [&](int64_t i, std::vector<int64_t>& rows) {
    LAMINAR_CHECK(ancestors[i] >> i == 1) << "tree token " << i << " must see itself and no later";
    for (int64_t p = 0; p < prefix; ++p)
      rows.push_back(SlotRow(block_table, block_size, num_blocks, p));
    for (int64_t j = 0; j <= i; ++j) {
      if (ancestors[i] >> j & 1)
        rows.push_back(SlotRow(block_table, block_size, num_blocks, prefix + j));
    }
  });
}

void WriteKv(std::span<const float> k, std::span<const float> v,
             std::span<const int32_t> block_table, int64_t block_size,
             std::span<const int32_t> positions, int64_t t, int64_t hkv, int64_t d,
             std::span<float> k_pool, std::span<float> v_pool) {
  const int64_t row = hkv * d;
  LAMINAR_CHECK(static_cast<int64_t>(k.size()) == t * row &&
                static_cast<int64_t>(v.size()) == t * row &&
                static_cast<int64_t>(positions.size()) == t && k_pool.size() == v_pool.size());
  const int64_t num_blocks = NumBlocks(k_pool.size(), block_size, hkv, d);
  for (int64_t i = 0; i < t; ++i) {
    const int64_t dst = SlotRow(block_table, block_size, num_blocks, positions[i]) * row;
    std::copy_n(k.data() + i * row, row, k_pool.data() + dst);
    std::copy_n(v.data() + i * row, row, v_pool.data() + dst);
  }
}

}  // namespace laminar::kernels::ref
