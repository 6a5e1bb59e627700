// Reference implementations of the model's ops: plain loops in f32 storage with f64 accumulation.
// They define the result every optimized backend (cpu/, cuda/) is tested against; they are not
// meant to be fast. Shape letters: kernels/README.md.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace laminar::kernels {

// RoPE frequency scaling as in Hugging Face's `rope_scaling` (kernels do not depend on model/).
struct RopeScalingParams {
  std::string type;  // "" (none), "linear" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192;
};

// The kernels' RoPE scaling from a checkpoint's `rope_scaling` (a std::optional of any struct with
// the fields above, model::RopeScaling in practice; kernels do not include model/): none when
// absent.
template <class Scaling>
RopeScalingParams RopeScalingFrom(const std::optional<Scaling>& s) {
  RopeScalingParams p;
  if (!s) return p;
  p.type = s->type;
  p.factor = s->factor;
  p.low_freq_factor = s->low_freq_factor;
  p.high_freq_factor = s->high_freq_factor;
  p.original_max_position_embeddings = static_cast<double>(s->original_max_position_embeddings);
  return p;
}

// Which dimensions RoPE pairs: (2i, 2i+1) in llama2.c/GGUF, (i, i + D/2) in Hugging Face.
enum class RopeLayout { kInterleaved, kRotateHalf };

}  // namespace laminar::kernels

namespace laminar::kernels::ref {

// out[M, N] = x[M, K] · w[N, K]^T (+ bias[N] when non-empty).
void MatMul(std::span<const float> x, std::span<const float> w, std::span<const float> bias,
            int64_t m, int64_t n, int64_t k, std::span<float> out);

// RMSNorm (Zhang & Sennrich 2019): out[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight.
//   x, out [T, C]; weight [C].
void RmsNorm(std::span<const float> x, std::span<const float> weight, int64_t t, int64_t c,
             double eps, std::span<float> out);

// Inverse frequencies of RoPE (Su et al. 2021, RoFormer §3.4): inv_freq[i] = theta^(-2i/D) for
// i < D/2, then Llama-3 `rope_scaling` (rope_type "llama3": wavelengths beyond
// original_max / low_freq_factor are divided by `factor`, those below original_max /
// high_freq_factor kept, smooth interpolation between) or linear scaling (all divided by factor).
void RopeInvFreq(int64_t head_dim, double theta, const RopeScalingParams& scaling,
                 std::span<double> inv_freq);

// Rotates q or k in place. x [T, H, D]; positions [T] (absolute position of each token).
// kInterleaved rotates pairs (x[2i], x[2i+1]); kRotateHalf rotates (x[i], x[i + D/2]).
void Rope(std::span<float> x, std::span<const int32_t> positions, int64_t t, int64_t h, int64_t d,
          std::span<const double> inv_freq, RopeLayout layout);

// SwiGLU (Shazeer 2020): out = silu(gate) * up, silu(g) = g / (1 + exp(-g)). All [T, F].
void SwiGlu(std::span<const float> gate, std::span<const float> up, std::span<float> out);

// Row-wise log-sum-exp of logits [T, V] -> out [T].
void LogSumExp(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out);
// Row-wise softmax [T, V] -> [T, V].
void Softmax(std::span<const float> logits, int64_t t, int64_t v, std::span<float> out);
// out[i] = logits[i, targets[i]] - logsumexp(logits[i, :]); logits [T, V], targets [T] in [0, V).
void TokenLogprobs(std::span<const float> logits, std::span<const int32_t> targets, int64_t t,
                   int64_t v, std::span<float> out);

// out[t, :] = table[ids[t], :]. table [V, C]; ids [T] in [0, V); out [T, C].
void Embedding(std::span<const float> table, std::span<const int32_t> ids, int64_t c,
               std::span<float> out);

// Causal grouped-query attention for T new tokens of one sequence over its KV cache.
//   q [T, H, D] (RoPE applied); k_cache, v_cache [S, Hkv, D] holding positions 0..S-1, the new
//   tokens included; positions [T]: query i attends to cache positions 0..positions[i].
//   out [T, H, D]. Scale 1/sqrt(D). Query head h reads kv head h / (H / Hkv).
void CausalAttention(std::span<const float> q, std::span<const float> k_cache,
                     std::span<const float> v_cache, std::span<const int32_t> positions, int64_t t,
                     int64_t h, int64_t hkv, int64_t d, int64_t s, std::span<float> out);

}  // namespace laminar::kernels::ref
