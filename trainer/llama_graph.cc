// LlamaGraph: forward with kept activations and the backward pass, f32 and f64.
#include "trainer/llama_graph.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/reference/ops.h"

namespace laminar::trainer {
namespace {

size_t Offset(const std::vector<ParamInfo>& params, const std::string& name) {
  for (const auto& p : params) {
    if (p.name == name) return p.offset;
  }
  LAMINAR_CHECK(false) << "parameter " << name << " missing from the parameter set";
  return 0;
}

int64_t OptionalOffset(const std::vector<ParamInfo>& params, const std::string& name) {
  for (const auto& p : params) {
    if (p.name == name) return static_cast<int64_t>(p.offset);
  }
  return -1;
}

template <typename T>
size_t Bytes(const std::vector<T>& v) {
  return v.size() * sizeof(T);
}

}  // namespace

template <typename T>
size_t LlamaGraph<T>::LayerActs::bytes() const {
  return Bytes(x_in) + Bytes(rstd1) + Bytes(hn1) + Bytes(q) + Bytes(k) + Bytes(v) + Bytes(att) +
         Bytes(x_mid) + Bytes(rstd2) + Bytes(hn2) + Bytes(gate) + Bytes(up) + Bytes(act);
}

template <typename T>
LlamaGraph<T>::LlamaGraph(const model::ModelConfig& config, const std::vector<ParamInfo>& params,
                          GraphOptions options, ThreadPool* pool)
    : config_(config), options_(options), pool_(pool) {
  LAMINAR_CHECK(!options.bf16_compute || sizeof(T) == sizeof(float))
      << "bf16 compute is an f32 graph option";
  LAMINAR_CHECK(options.logits_chunk_rows > 0);
  LAMINAR_CHECK(options.temperature > 0);
  for (const auto& p : params) num_params_ = std::max(num_params_, p.offset + p.numel);
  embed_ = Offset(params, "model.embed_tokens.weight");
  final_norm_ = Offset(params, "model.norm.weight");
  lm_head_ = config.tie_word_embeddings ? embed_ : Offset(params, "lm_head.weight");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    std::string pre = "model.layers." + std::to_string(i) + ".";
    LayerParams lp;
    lp.attn_norm = Offset(params, pre + "input_layernorm.weight");
    lp.wq = Offset(params, pre + "self_attn.q_proj.weight");
    lp.wk = Offset(params, pre + "self_attn.k_proj.weight");
    lp.wv = Offset(params, pre + "self_attn.v_proj.weight");
    lp.wo = Offset(params, pre + "self_attn.o_proj.weight");
    lp.bq = OptionalOffset(params, pre + "self_attn.q_proj.bias");
    lp.bk = OptionalOffset(params, pre + "self_attn.k_proj.bias");
    lp.bv = OptionalOffset(params, pre + "self_attn.v_proj.bias");
    lp.ffn_norm = Offset(params, pre + "post_attention_layernorm.weight");
    lp.w_gate = Offset(params, pre + "mlp.gate_proj.weight");
    lp.w_up = Offset(params, pre + "mlp.up_proj.weight");
    lp.w_down = Offset(params, pre + "mlp.down_proj.weight");
    layer_params_.push_back(lp);
  }
  inv_freq_.resize(static_cast<size_t>(config.head_dim / 2));
  kernels::ref::RopeInvFreq(config.head_dim, config.rope_theta,
                            kernels::RopeScalingFrom(config.rope_scaling), inv_freq_);
}

template <typename T>
const T* LlamaGraph<T>::Rounded(const T* x, size_t n, std::vector<T>& scratch) const {
  if (!options_.bf16_compute) return x;
  scratch.resize(n);
  for (size_t i = 0; i < n; ++i) {
    scratch[i] = static_cast<T>(BF16ToFloat(FloatToBF16(static_cast<float>(x[i]))));
  }
  return scratch.data();
}

template <typename T>
template <typename Fn>
void LlamaGraph<T>::ParallelFor(int64_t n, const Fn& fn) const {
  if (pool_ == nullptr || n < 32) {
    fn(int64_t{0}, n);
  } else {
    pool_->ParallelFor(n, 16, fn);
  }
}

template <typename T>
void LlamaGraph<T>::NormForward(const T* x, size_t w, T* y, T* rstd) {
  const int64_t dm = config_.hidden_size;
  const T* wp = values_.data() + w;
  ParallelFor(batch_.num_tokens(), [&](int64_t b, int64_t e) {
    ops::RmsNormForward(x + b * dm, wp, e - b, dm, config_.rms_norm_eps, y + b * dm, rstd + b);
  });
}

template <typename T>
void LlamaGraph<T>::NormBackward(const T* x, size_t w, const T* rstd, const T* dy, T* dx,
                                 std::span<T> grads) {
  const int64_t dm = config_.hidden_size;
  const T* wp = values_.data() + w;
  std::mutex mu;
  ParallelFor(batch_.num_tokens(), [&](int64_t b, int64_t e) {
    std::vector<T> dw(static_cast<size_t>(dm), T(0));
    ops::RmsNormBackward(x + b * dm, wp, rstd + b, dy + b * dm, e - b, dm, dx + b * dm, dw.data());
    std::lock_guard<std::mutex> lock(mu);
    for (int64_t j = 0; j < dm; ++j) grads[w + j] += dw[j];
  });
}

template <typename T>
void LlamaGraph<T>::Linear(const T* x, size_t w, int64_t m, int64_t n, int64_t k, T* out) {
  const T* xr = Rounded(x, static_cast<size_t>(m * k), scratch_b_);
  const T* wr = Weight(w);
  ops::Gemm(m, n, k, 1.0, xr, k, false, wr, k, true, 0.0, out, n, pool_);
}

template <typename T>
void LlamaGraph<T>::LinearBackward(const T* dy, const T* x, size_t w, int64_t m, int64_t n,
                                   int64_t k, double beta_dx, T* dx, std::span<T> grads) {
  const T* dyr = Rounded(dy, static_cast<size_t>(m * n), scratch_a_);
  const T* xr = Rounded(x, static_cast<size_t>(m * k), scratch_b_);
  const T* wr = Weight(w);
  ops::Gemm(m, k, n, 1.0, dyr, n, false, wr, k, false, beta_dx, dx, k, pool_);
  ops::Gemm(n, k, m, 1.0, dyr, n, true, xr, k, false, 1.0, grads.data() + w, k, pool_);
}

template <typename T>
void LlamaGraph<T>::LayerForward(const LayerParams& lp, LayerActs& a, std::vector<T>& x) {
  const auto& c = config_;
  const int64_t t = batch_.num_tokens(), dm = c.hidden_size, f = c.intermediate_size;
  const int64_t h = c.num_attention_heads, hkv = c.num_key_value_heads, d = c.head_dim;
  const T* p = values_.data();
  const auto layout = c.rope_layout == model::RopeLayout::kInterleaved
                          ? kernels::RopeLayout::kInterleaved
                          : kernels::RopeLayout::kRotateHalf;
  a.x_in.assign(x.begin(), x.end());
  a.rstd1.resize(t);
  a.hn1.resize(t * dm);
  NormForward(x.data(), lp.attn_norm, a.hn1.data(), a.rstd1.data());
  a.q.resize(t * h * d);
  a.k.resize(t * hkv * d);
  a.v.resize(t * hkv * d);
  Linear(a.hn1.data(), lp.wq, t, h * d, dm, a.q.data());
  Linear(a.hn1.data(), lp.wk, t, hkv * d, dm, a.k.data());
  Linear(a.hn1.data(), lp.wv, t, hkv * d, dm, a.v.data());
  auto add_bias = [&](std::vector<T>& y, int64_t b, int64_t n) {
    if (b < 0) return;
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j = 0; j < n; ++j) y[i * n + j] += p[b + j];
    }
  };
  add_bias(a.q, lp.bq, h * d);
  add_bias(a.k, lp.bk, hkv * d);
  add_bias(a.v, lp.bv, hkv * d);
  ops::Rope(a.q.data(), rope_, t, h, d, layout, false);
  ops::Rope(a.k.data(), rope_, t, hkv, d, layout, false);
  a.att.resize(t * h * d);
  ops::AttentionForward(a.q.data(), a.k.data(), a.v.data(), batch_.seq_offsets, batch_.seq_prefix,
                        h, hkv, d, a.att.data(), pool_);
  Linear(a.att.data(), lp.wo, t, dm, h * d, x.data());
  for (int64_t i = 0; i < t * dm; ++i) x[i] += a.x_in[i];
  a.x_mid.assign(x.begin(), x.end());
  a.rstd2.resize(t);
  a.hn2.resize(t * dm);
  NormForward(x.data(), lp.ffn_norm, a.hn2.data(), a.rstd2.data());
  a.gate.resize(t * f);
  a.up.resize(t * f);
  a.act.resize(t * f);
  Linear(a.hn2.data(), lp.w_gate, t, f, dm, a.gate.data());
  Linear(a.hn2.data(), lp.w_up, t, f, dm, a.up.data());
  ParallelFor(t, [&](int64_t b, int64_t e) {
    ops::SwiGluForward(a.gate.data() + b * f, a.up.data() + b * f, (e - b) * f,
                       a.act.data() + b * f);
  });
  Linear(a.act.data(), lp.w_down, t, dm, f, x.data());
  for (int64_t i = 0; i < t * dm; ++i) x[i] += a.x_mid[i];
}

template <typename T>
void LlamaGraph<T>::LayerBackward(const LayerParams& lp, LayerActs& a, std::vector<T>& dx,
                                  std::span<T> grads) {
  const auto& c = config_;
  const int64_t t = batch_.num_tokens(), dm = c.hidden_size, f = c.intermediate_size;
  const int64_t h = c.num_attention_heads, hkv = c.num_key_value_heads, d = c.head_dim;
  const auto layout = c.rope_layout == model::RopeLayout::kInterleaved
                          ? kernels::RopeLayout::kInterleaved
                          : kernels::RopeLayout::kRotateHalf;
  // Feed-forward block: x_out = x_mid + down(silu(gate(hn2)) · up(hn2)).
  d_act_.resize(t * f);
  d_gate_.resize(t * f);
  d_up_.resize(t * f);
  d_hn_.resize(t * dm);
  d_tmp_.resize(t * dm);
  LinearBackward(dx.data(), a.act.data(), lp.w_down, t, dm, f, 0.0, d_act_.data(), grads);
  ParallelFor(t, [&](int64_t b, int64_t e) {
    ops::SwiGluBackward(a.gate.data() + b * f, a.up.data() + b * f, d_act_.data() + b * f,
                        (e - b) * f, d_gate_.data() + b * f, d_up_.data() + b * f);
  });
  LinearBackward(d_gate_.data(), a.hn2.data(), lp.w_gate, t, f, dm, 0.0, d_hn_.data(), grads);
  LinearBackward(d_up_.data(), a.hn2.data(), lp.w_up, t, f, dm, 1.0, d_hn_.data(), grads);
  NormBackward(a.x_mid.data(), lp.ffn_norm, a.rstd2.data(), d_hn_.data(), d_tmp_.data(), grads);
  for (int64_t i = 0; i < t * dm; ++i) dx[i] += d_tmp_[i];
  // Attention block: x_mid = x_in + o(attention(rope(q(hn1)), rope(k(hn1)), v(hn1))).
  d_att_.resize(t * h * d);
  dq_.resize(t * h * d);
  dk_.resize(t * hkv * d);
  dv_.resize(t * hkv * d);
  LinearBackward(dx.data(), a.att.data(), lp.wo, t, dm, h * d, 0.0, d_att_.data(), grads);
  ops::AttentionBackward(a.q.data(), a.k.data(), a.v.data(), d_att_.data(), batch_.seq_offsets,
                         batch_.seq_prefix, h, hkv, d, dq_.data(), dk_.data(), dv_.data(), pool_);
  ops::Rope(dq_.data(), rope_, t, h, d, layout, true);
  ops::Rope(dk_.data(), rope_, t, hkv, d, layout, true);
  auto bias_grad = [&](const std::vector<T>& dy, int64_t b, int64_t n) {
    if (b < 0) return;
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t i = 0; i < t; ++i) sum += double(dy[i * n + j]);
      grads[b + j] = static_cast<T>(grads[b + j] + sum);
    }
  };
  bias_grad(dq_, lp.bq, h * d);
  bias_grad(dk_, lp.bk, hkv * d);
  bias_grad(dv_, lp.bv, hkv * d);
  LinearBackward(dq_.data(), a.hn1.data(), lp.wq, t, h * d, dm, 0.0, d_hn_.data(), grads);
  LinearBackward(dk_.data(), a.hn1.data(), lp.wk, t, hkv * d, dm, 1.0, d_hn_.data(), grads);
  LinearBackward(dv_.data(), a.hn1.data(), lp.wv, t, hkv * d, dm, 1.0, d_hn_.data(), grads);
  NormBackward(a.x_in.data(), lp.attn_norm, a.rstd1.data(), d_hn_.data(), d_tmp_.data(), grads);
  for (int64_t i = 0; i < t * dm; ++i) dx[i] += d_tmp_[i];
}

template <typename T>
const T* LlamaGraph<T>::HeadLogits(int64_t r0, int64_t n, std::vector<T>& hc,
                                   std::vector<int32_t>& tg, std::vector<T>& z) {
  const int64_t dm = config_.hidden_size, vocab = config_.vocab_size;
  hc.resize(n * dm);
  tg.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t row = head_rows_[r0 + i];
    std::copy_n(&h_final_[row * dm], dm, &hc[i * dm]);
    tg[i] = batch_.targets[row];
  }
  const T* hr = Rounded(hc.data(), hc.size(), scratch_b_);
  z.resize(n * vocab);
  // z = h W^T / temperature.
  ops::Gemm(n, vocab, dm, 1.0 / options_.temperature, hr, dm, false, Weight(lm_head_), dm, true,
            0.0, z.data(), vocab, pool_);
  return hr;
}

template <typename T>
void LlamaGraph<T>::HeadForward(std::vector<T>* logprobs, std::vector<T>* entropy) {
  const int64_t vocab = config_.vocab_size;
  const int64_t rows = static_cast<int64_t>(head_rows_.size());
  head_lse_.assign(head_rows_.size(), T(0));
  head_entropy_.assign(head_rows_.size(), T(0));
  std::vector<T> hc, z, lp;
  std::vector<int32_t> tg;
  for (int64_t r0 = 0; r0 < rows; r0 += options_.logits_chunk_rows) {
    const int64_t n = std::min(options_.logits_chunk_rows, rows - r0);
    HeadLogits(r0, n, hc, tg, z);
    lp.resize(n);
    ParallelFor(n, [&](int64_t b, int64_t e) {
      ops::LogprobEntropyForward(z.data() + b * vocab, tg.data() + b, e - b, vocab, lp.data() + b,
                                 &head_entropy_[r0 + b], &head_lse_[r0 + b]);
    });
    for (int64_t i = 0; i < n; ++i) {
      (*logprobs)[head_rows_[r0 + i]] = lp[i];
      (*entropy)[head_rows_[r0 + i]] = head_entropy_[r0 + i];
    }
  }
}

template <typename T>
void LlamaGraph<T>::HeadBackward(std::span<const T> g_lp, std::span<const T> g_ent,
                                 std::vector<T>& dhf, std::span<T> grads) {
  const int64_t dm = config_.hidden_size, vocab = config_.vocab_size;
  const int64_t rows = static_cast<int64_t>(head_rows_.size());
  std::vector<T> hc, z, dh, glp, gent;
  std::vector<int32_t> tg;
  for (int64_t r0 = 0; r0 < rows; r0 += options_.logits_chunk_rows) {
    const int64_t n = std::min(options_.logits_chunk_rows, rows - r0);
    const T* hr = HeadLogits(r0, n, hc, tg, z);
    glp.resize(n);
    gent.resize(n);
    for (int64_t i = 0; i < n; ++i) {
      glp[i] = g_lp[head_rows_[r0 + i]];
      gent[i] = g_ent.empty() ? T(0) : g_ent[head_rows_[r0 + i]];
    }
    ParallelFor(n, [&](int64_t b, int64_t e) {
      ops::LogprobEntropyBackward(z.data() + b * vocab, tg.data() + b, &head_lse_[r0 + b],
                                  &head_entropy_[r0 + b], glp.data() + b, gent.data() + b, e - b,
                                  vocab);
    });
    const T* dzr = Rounded(z.data(), z.size(), scratch_a_);
    dh.resize(n * dm);
    // Through z = h W^T / temperature: dh = dz W / temperature, dW += dz^T h / temperature.
    const double inv_t = 1.0 / options_.temperature;
    ops::Gemm(n, dm, vocab, inv_t, dzr, vocab, false, Weight(lm_head_), dm, false, 0.0, dh.data(),
              dm, pool_);
    ops::Gemm(vocab, dm, n, inv_t, dzr, vocab, true, hr, dm, false, 1.0, grads.data() + lm_head_,
              dm, pool_);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(&dh[i * dm], dm, &dhf[head_rows_[r0 + i] * dm]);
    }
  }
}

// Kept whole: the layer loop of the training forward, each activation saved for the backward in
// the order Backward reads them back.
template <typename T>
Status LlamaGraph<T>::Forward(const TrainBatch& batch, std::span<const T> values,
                              std::vector<T>* logprobs, std::vector<T>* entropy) {
  const auto& c = config_;
  const int64_t t = batch.num_tokens(), dm = c.hidden_size;
  if (values.size() != num_params_) {
    return InvalidArgumentError("parameter buffer has " + std::to_string(values.size()) +
                                " values, the model has " + std::to_string(num_params_));
  }
  if (static_cast<int64_t>(batch.targets.size()) != t) {
    return InvalidArgumentError("batch has " + std::to_string(t) + " tokens but " +
                                std::to_string(batch.targets.size()) + " targets");
  }
  const auto& off = batch.seq_offsets;
  if (off.size() < 2 || off.front() != 0 || off.back() != t) {
    return InvalidArgumentError("sequence offsets must start at 0 and end at the batch's " +
                                std::to_string(t) + " tokens");
  }
  const int64_t num_seqs = static_cast<int64_t>(off.size()) - 1;
  const auto& prefix = batch.seq_prefix;
  if (!prefix.empty() && static_cast<int64_t>(prefix.size()) != num_seqs) {
    return InvalidArgumentError("seq_prefix has " + std::to_string(prefix.size()) +
                                " entries for " + std::to_string(num_seqs) + " sequences");
  }
  std::vector<int32_t> positions(static_cast<size_t>(t));
  for (int64_t b = 0; b < num_seqs; ++b) {
    const int64_t len = off[b + 1] - off[b];
    if (len < 0) {
      return InvalidArgumentError("sequence offsets decrease at sequence " + std::to_string(b));
    }
    // A sequence with a prefix continues it: its positions start after the prefix's tokens.
    int64_t start = 0;
    if (!prefix.empty() && prefix[b] != -1) {
      const int64_t r = prefix[b];
      if (r < 0 || r >= b || prefix[r] != -1) {
        return InvalidArgumentError("sequence " + std::to_string(b) + " has prefix " +
                                    std::to_string(r) +
                                    ": a prefix must be an earlier sequence without one");
      }
      start = off[r + 1] - off[r];
    }
    if (c.max_position_embeddings > 0 && start + len > c.max_position_embeddings) {
      return InvalidArgumentError("sequence " + std::to_string(b) + " has " +
                                  std::to_string(start + len) +
                                  " tokens with its prefix, beyond the model's context of " +
                                  std::to_string(c.max_position_embeddings));
    }
    for (int64_t i = 0; i < len; ++i) positions[off[b] + i] = static_cast<int32_t>(start + i);
  }
  for (int64_t i = 0; i < t; ++i) {
    if (batch.tokens[i] < 0 || batch.tokens[i] >= c.vocab_size) {
      return InvalidArgumentError("token " + std::to_string(i) + " has id " +
                                  std::to_string(batch.tokens[i]) + " outside the vocabulary of " +
                                  std::to_string(c.vocab_size));
    }
    if (batch.targets[i] < -1 || batch.targets[i] >= c.vocab_size) {
      return InvalidArgumentError(
          "target " + std::to_string(i) + " has id " + std::to_string(batch.targets[i]) +
          " (must be -1 or inside the vocabulary of " + std::to_string(c.vocab_size) + ")");
    }
  }
  values_ = values;
  batch_ = batch;
  rope_ = ops::MakeRopeTable(positions, inv_freq_);
  if (options_.bf16_compute) Rounded(values.data(), values.size(), rounded_values_);
  std::vector<T> x(static_cast<size_t>(t * dm));
  for (int64_t i = 0; i < t; ++i) {
    std::copy_n(values.data() + embed_ + batch.tokens[i] * dm, dm, &x[i * dm]);
  }
  acts_.resize(layer_params_.size());
  for (size_t l = 0; l < layer_params_.size(); ++l) {
    if (options_.recompute_activations) {
      acts_[l].x_in.assign(x.begin(), x.end());
      LayerForward(layer_params_[l], recompute_, x);
    } else {
      LayerForward(layer_params_[l], acts_[l], x);
    }
  }
  x_final_ = std::move(x);
  rstd_final_.resize(t);
  h_final_.resize(t * dm);
  NormForward(x_final_.data(), final_norm_, h_final_.data(), rstd_final_.data());
  head_rows_.clear();
  for (int64_t i = 0; i < t; ++i) {
    if (batch.targets[i] >= 0) head_rows_.push_back(i);
  }
  logprobs->assign(static_cast<size_t>(t), T(0));
  entropy->assign(static_cast<size_t>(t), T(0));
  HeadForward(logprobs, entropy);
  return OkStatus();
}

template <typename T>
Status LlamaGraph<T>::Backward(std::span<const T> grad_logprobs, std::span<const T> grad_entropy,
                               std::span<T> grads) {
  const auto& c = config_;
  const int64_t t = batch_.num_tokens(), dm = c.hidden_size;
  if (values_.empty()) return FailedPreconditionError("Backward called before Forward");
  if (static_cast<int64_t>(grad_logprobs.size()) != t ||
      (!grad_entropy.empty() && static_cast<int64_t>(grad_entropy.size()) != t)) {
    return InvalidArgumentError("gradients of logprobs/entropy must have the batch's " +
                                std::to_string(t) + " tokens");
  }
  if (grads.size() != num_params_) {
    return InvalidArgumentError("gradient buffer has " + std::to_string(grads.size()) +
                                " values, the model has " + std::to_string(num_params_));
  }
  std::vector<T> dhf(static_cast<size_t>(t * dm), T(0));
  HeadBackward(grad_logprobs, grad_entropy, dhf, grads);
  std::vector<T> dx(dhf.size());
  NormBackward(x_final_.data(), final_norm_, rstd_final_.data(), dhf.data(), dx.data(), grads);
  for (size_t l = layer_params_.size(); l-- > 0;) {
    if (options_.recompute_activations) {
      std::vector<T> x = acts_[l].x_in;
      LayerForward(layer_params_[l], recompute_, x);
      LayerBackward(layer_params_[l], recompute_, dx, grads);
    } else {
      LayerBackward(layer_params_[l], acts_[l], dx, grads);
    }
  }
  for (int64_t i = 0; i < t; ++i) {
    T* row = grads.data() + embed_ + batch_.tokens[i] * dm;
    for (int64_t j = 0; j < dm; ++j) row[j] += dx[i * dm + j];
  }
  values_ = {};
  return OkStatus();
}

template <typename T>
size_t LlamaGraph<T>::activation_bytes() const {
  size_t total = Bytes(x_final_) + Bytes(rstd_final_) + Bytes(h_final_) + Bytes(head_lse_) +
                 Bytes(head_entropy_);
  for (const auto& a : acts_) total += a.bytes();
  return total;
}

template class LlamaGraph<float>;
template class LlamaGraph<double>;

}  // namespace laminar::trainer
