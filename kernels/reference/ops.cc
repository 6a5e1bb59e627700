// Reference ops: the plain loops that define correct results.
#include "kernels/reference/ops.h"

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "core/check.h"
#include "kernels/reference/paged_attention.h"

namespace laminar::kernels::ref {

void MatMul(std::span<const float> x, std::span<const float> w, std::span<const float> bias,
            int64_t m, int64_t n, int64_t k, std::span<float> out) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(x.size()), m * k);
  LAMINAR_CHECK_EQ(static_cast<int64_t>(w.size()), n * k);
  LAMINAR_CHECK_EQ(static_cast<int64_t>(out.size()), m * n);
  LAMINAR_CHECK(bias.empty() || static_cast<int64_t>(bias.size()) == n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias.empty() ? 0.0 : bias[j];
      for (int64_t p = 0; p < k; ++p) acc += double(x[i * k + p]) * double(w[j * k + p]);
      out[i * n + j] = static_cast<float>(acc);
    }
  }
}

void RmsNorm(std::span<const float> x, std::span<const float> weight, int64_t t, int64_t c,
             double eps, std::span<float> out) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(x.size()), t * c);
  LAMINAR_CHECK_EQ(static_cast<int64_t>(weight.size()), c);
  for (int64_t i = 0; i < t; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) ss += double(x[i * c + j]) * double(x[i * c + j]);
    double inv = 1.0 / std::sqrt(ss / double(c) + eps);
    for (int64_t j = 0; j < c; ++j)
      out[i * c + j] = static_cast<float>(x[i * c + j] * inv * weight[j]);
  }
}

void RopeInvFreq(int64_t head_dim, double theta, const RopeScalingParams& scaling,
                 std::span<double> inv_freq) {
  int64_t half = head_dim / 2;
  LAMINAR_CHECK_EQ(static_cast<int64_t>(inv_freq.size()), half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
  }
  if (scaling.type == "linear") {
    for (auto& f : inv_freq) f /= scaling.factor;
    return;
  }
  if (scaling.type != "llama3") return;
  double old_ctx = double(scaling.original_max_position_embeddings);
  double low_wavelen = old_ctx / scaling.low_freq_factor;
  double high_wavelen = old_ctx / scaling.high_freq_factor;
  for (auto& f : inv_freq) {
    double wavelen = 2 * std::numbers::pi / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f /= scaling.factor;
      continue;
    }
    double smooth = (old_ctx / wavelen - scaling.low_freq_factor) /
                    (scaling.high_freq_factor - scaling.low_freq_factor);
    f = (1 - smooth) * f / scaling.factor + smooth * f;
  }
}

void Rope(std::span<float> x, std::span<const int32_t> positions, int64_t t, int64_t h, int64_t d,
          std::span<const double> inv_freq, RopeLayout layout) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(x.size()), t * h * d);
  LAMINAR_CHECK_EQ(static_cast<int64_t>(inv_freq.size()), d / 2);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < d / 2; ++j) {
      double angle = double(positions[i]) * inv_freq[j];
      double cs = std::cos(angle), sn = std::sin(angle);
      for (int64_t head = 0; head < h; ++head) {
        float* v = x.data() + (i * h + head) * d;
        int64_t a = layout == RopeLayout::kInterleaved ? 2 * j : j;
        int64_t b = layout == RopeLayout::kInterleaved ? 2 * j + 1 : j + d / 2;
        double x0 = v[a], x1 = v[b];
        v[a] = static_cast<float>(x0 * cs - x1 * sn);
        v[b] = static_cast<float>(x0 * sn + x1 * cs);
      }
    }
  }
}

void SwiGlu(std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  LAMINAR_CHECK(gate.size() == up.size() && up.size() == out.size());
  for (size_t i = 0; i < gate.size(); ++i) {
    double g = gate[i];
    out[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

namespace {
// Log-sum-exp of one row in f64 (kept in f64: rounding it to f32 near |x| ~ 1e3 would cost 1e-5).
double RowLogSumExp(const float* row, int64_t v) {
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < v; ++j) mx = std::max(mx, double(row[j]));
  double s = 0;
  for (int64_t j = 0; j < v; ++j) s += std::exp(double(row[j]) - mx);
  return mx + std::log(s);
}
}  // namespace

void LogSumExp(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(logits.size()), t * v);
  for (int64_t i = 0; i < t; ++i) out[i] = static_cast<float>(RowLogSumExp(&logits[i * v], v));
}

void Softmax(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(logits.size()), t * v);
  for (int64_t i = 0; i < t; ++i) {
    double lse = RowLogSumExp(&logits[i * v], v);
    for (int64_t j = 0; j < v; ++j) {
      out[i * v + j] = static_cast<float>(std::exp(double(logits[i * v + j]) - lse));
    }
  }
}

void TokenLogprobs(std::span<const float> logits, std::span<const int32_t> targets, int64_t t,
                   int64_t v, std::span<float> out) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(logits.size()), t * v);
  for (int64_t i = 0; i < t; ++i) {
    LAMINAR_CHECK(targets[i] >= 0 && targets[i] < v) << "target " << targets[i];
    out[i] =
        static_cast<float>(double(logits[i * v + targets[i]]) - RowLogSumExp(&logits[i * v], v));
  }
}

void Embedding(std::span<const float> table, std::span<const int32_t> ids, int64_t c,
               std::span<float> out) {
  int64_t v = static_cast<int64_t>(table.size()) / c;
  for (size_t i = 0; i < ids.size(); ++i) {
    LAMINAR_CHECK(ids[i] >= 0 && ids[i] < v) << "token id " << ids[i];
    for (int64_t j = 0; j < c; ++j) out[i * c + j] = table[ids[i] * c + j];
  }
}

void CausalAttention(std::span<const float> q, std::span<const float> k_cache,
                     std::span<const float> v_cache, std::span<const int32_t> positions, int64_t t,
                     int64_t h, int64_t hkv, int64_t d, int64_t s, std::span<float> out) {
  LAMINAR_CHECK_EQ(static_cast<int64_t>(k_cache.size()), s * hkv * d);
  for (int64_t i = 0; i < t; ++i) {
    LAMINAR_CHECK(positions[i] >= 0 && positions[i] < s)
        << "position " << positions[i] << " outside cache of " << s;
  }
  if (t == 0) return;
  // A contiguous cache is a paged one with a single block of all S positions.
  const int32_t table[] = {0};
  PagedCausalAttention(q, k_cache, v_cache, table, s, positions, t, h, hkv, d, out);
}

}  // namespace laminar::kernels::ref
