// LlamaModel's forward pass: the linears and norms, the attention and feed-forward blocks, and
// Forward over contiguous and paged KV caches. See llama_model.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>

#include "core/dtype.h"
#include "engine/llama_model.h"
#include "kernels/cpu/bf16_dot.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/vec_ops.h"
#include "kernels/reference/paged_attention.h"
#include "model/ggml_quants.h"

namespace laminar::engine {

// Activation buffers of one Forward call, sized once and reused by every layer.
struct Workspace {
  std::vector<float> hn, q, k, v, att, out, gate, up;
};

void LlamaModel::Linear(std::span<const float> x, const Weight& w, std::span<const float> bias,
                        int64_t m, int64_t n, int64_t k, std::span<float> out) const {
  if (backend_ == Backend::kReference) {
    kernels::ref::MatMul(x, w.f32, bias, m, n, k, out);
    return;
  }
  if (!w.f32.empty()) {
    LAMINAR_CHECK_OK(kernels::cpu::MatMul(x, w.f32, bias, m, n, k, out, pool_.get()));
    return;
  }
  if (w.w8a8 || w.w4a8) {
    thread_local kernels::Int8Activations xq;
    kernels::QuantizeActivationsPerToken(x, m, k, &xq);
    const kernels::cpu::QuantIsa isa = kernels::cpu::BestQuantIsa();
    if (w.w8a8) {
      kernels::cpu::MatMulW8A8(xq, *w.w8a8, bias, out, pool_.get(), isa, w.int8_packed.get());
    } else {
      kernels::cpu::MatMulW4A8(xq, *w.w4a8, bias, out, pool_.get(), isa, w.int8_packed.get());
    }
    return;
  }
  if (w.gguf) {
    thread_local kernels::Q8BlockActivations xq;
    kernels::QuantizeActivationsQ8Blocks(x, m, k, &xq);
    kernels::cpu::MatMulGguf(xq, *w.gguf, bias, out, pool_.get());
    return;
  }
  kernels::cpu::MatMulBF16Weights(x, w.bf16, bias, m, n, k, out, pool_.get(), bf16_dot_);
}

void LlamaModel::Norm(std::span<const float> x, std::span<const float> weight, int64_t t, int64_t c,
                      double eps, std::span<float> out) const {
  if (backend_ == Backend::kReference) {
    kernels::ref::RmsNorm(x, weight, t, c, eps, out);
  } else {
    kernels::cpu::RmsNorm(x, weight, t, c, eps, out);
  }
}

KvCache LlamaModel::NewCache(int64_t num_slots, int64_t max_positions) const {
  return KvCache(config_.num_hidden_layers, num_slots, max_positions, config_.num_key_value_heads,
                 config_.head_dim);
}

// The step of an attention block that depends on where K/V live: store the new tokens' keys and
// values of one span and attend over the span's whole cache. One implementation per cache layout.
class KvAttention {
 public:
  KvAttention(int64_t h, int64_t hkv, int64_t d, bool reference)
      : h_(h), hkv_(hkv), d_(d), reference_(reference) {}
  virtual ~KvAttention() = default;
  // Span `si` = s of layer `layer`: q [n, H, D], k / v [n, Hkv, D] (RoPE applied), positions [n];
  // out [n, H, D]; heads split over `pool` when given. Spans write disjoint cache rows, so
  // distinct spans may run at once.
  virtual void Run(int64_t layer, size_t si, const SequenceSpan& s, std::span<const float> q,
                   std::span<const float> k, std::span<const float> v,
                   std::span<const int32_t> positions, std::span<float> out,
                   ThreadPool* pool) const = 0;

 protected:
  int64_t h_, hkv_, d_;
  bool reference_;
};

namespace {

// KvCache: each slot holds positions contiguously. Span i lives in caches[i], or all spans in
// caches[0] when only one is given.
class ContiguousKvAttention final : public KvAttention {
 public:
  ContiguousKvAttention(std::span<KvCache* const> caches, int64_t h, int64_t hkv, int64_t d,
                        bool reference)
      : KvAttention(h, hkv, d, reference), caches_(caches) {}
  void Run(int64_t layer, size_t si, const SequenceSpan& s, std::span<const float> q,
           std::span<const float> k, std::span<const float> v, std::span<const int32_t> pos,
           std::span<float> out, ThreadPool* pool) const override {
    const int64_t row = hkv_ * d_;
    KvCache* cache = caches_[caches_.size() == 1 ? 0 : si];
    auto kc = cache->Keys(layer, s.slot), vc = cache->Values(layer, s.slot);
    std::copy(k.begin(), k.end(), kc.begin() + s.start_position * row);
    std::copy(v.begin(), v.end(), vc.begin() + s.start_position * row);
    const int64_t cached = s.start_position + s.num_tokens;
    std::span<const float> ks(kc.data(), cached * row), vs(vc.data(), cached * row);
    if (reference_) {
      kernels::ref::CausalAttention(q, ks, vs, pos, s.num_tokens, h_, hkv_, d_, cached, out);
    } else {
      kernels::cpu::CausalAttention(q, ks, vs, pos, s.num_tokens, h_, hkv_, d_, cached, out, pool);
    }
  }

 private:
  std::span<KvCache* const> caches_;
};

// PagedKvCache: span i reaches its positions through tables[i].
class PagedKvAttention final : public KvAttention {
 public:
  PagedKvAttention(PagedKvCache* cache, std::span<const std::span<const int32_t>> tables, int64_t h,
                   int64_t hkv, int64_t d, bool reference)
      : KvAttention(h, hkv, d, reference), cache_(cache), tables_(tables) {}
  void Run(int64_t layer, size_t si, const SequenceSpan& s, std::span<const float> q,
           std::span<const float> k, std::span<const float> v, std::span<const int32_t> pos,
           std::span<float> out, ThreadPool* pool) const override {
    auto kp = cache_->Keys(layer), vp = cache_->Values(layer);
    const int64_t bs = cache_->block_size();
    if (!s.tree_parents.empty()) {
      RunTree(s, tables_[si], q, k, v, kp, vp, out, pool);
      return;
    }
    kernels::ref::WriteKv(k, v, tables_[si], bs, pos, s.num_tokens, hkv_, d_, kp, vp);
    if (reference_) {
      kernels::ref::PagedCausalAttention(q, kp, vp, tables_[si], bs, pos, s.num_tokens, h_, hkv_,
                                         d_, out);
    } else {
      kernels::cpu::PagedCausalAttention(q, kp, vp, tables_[si], bs, pos, s.num_tokens, h_, hkv_,
                                         d_, out, pool);
    }
  }

 private:
  // A token tree: node j's K/V goes to the slot of position start + j; each node sees the
  // committed positions and its ancestors.
  void RunTree(const SequenceSpan& s, std::span<const int32_t> table, std::span<const float> q,
               std::span<const float> k, std::span<const float> v, std::span<float> kp,
               std::span<float> vp, std::span<float> out, ThreadPool* pool) const {
    const int64_t n = s.num_tokens, bs = cache_->block_size();
    std::vector<int32_t> slots(static_cast<size_t>(n));
    std::vector<uint64_t> ancestors(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      slots[j] = static_cast<int32_t>(s.start_position + j);
      const int32_t parent = s.tree_parents[j];
      ancestors[j] = (parent < 0 ? 0 : ancestors[parent]) | (uint64_t{1} << j);
    }
    kernels::ref::WriteKv(k, v, table, bs, slots, n, hkv_, d_, kp, vp);
    if (reference_) {
      kernels::ref::PagedTreeAttention(q, kp, vp, table, bs, s.start_position, ancestors, n, h_,
                                       hkv_, d_, out);
    } else {
      kernels::cpu::PagedTreeAttention(q, kp, vp, table, bs, s.start_position, ancestors, n, h_,
                                       hkv_, d_, out, pool);
    }
  }

  PagedKvCache* cache_;
  std::span<const std::span<const int32_t>> tables_;
};

}  // namespace

void LlamaModel::AttentionBlock(const Layer& l, int64_t li, std::span<const int32_t> positions,
                                std::span<const SequenceSpan> spans, const KvAttention& kv,
                                std::vector<float>& x, Workspace& ws) const {
  const auto& c = config_;
  const int64_t t = static_cast<int64_t>(positions.size()), dm = c.hidden_size, d = c.head_dim;
  const int64_t h = c.num_attention_heads, hkv = c.num_key_value_heads;
  auto layout = c.rope_layout == model::RopeLayout::kInterleaved ? kernels::RopeLayout::kInterleaved
                                                                 : kernels::RopeLayout::kRotateHalf;
  ws.hn.resize(x.size());
  ws.q.resize(t * h * d);
  ws.k.resize(t * hkv * d);
  ws.v.resize(t * hkv * d);
  ws.att.resize(t * h * d);
  ws.out.resize(x.size());
  auto &hn = ws.hn, &q = ws.q, &k = ws.k, &v = ws.v, &att = ws.att, &out = ws.out;
  Norm(x, l.attn_norm, t, dm, c.rms_norm_eps, hn);
  Linear(hn, l.wq, l.bq, t, h * d, dm, q);
  Linear(hn, l.wk, l.bk, t, hkv * d, dm, k);
  Linear(hn, l.wv, l.bv, t, hkv * d, dm, v);
  if (backend_ == Backend::kCpu) {
    rope_->Apply(q, positions, t, h, d, layout);
    rope_->Apply(k, positions, t, hkv, d, layout);
  } else {
    kernels::ref::Rope(q, positions, t, h, d, inv_freq_, layout);
    kernels::ref::Rope(k, positions, t, hkv, d, inv_freq_, layout);
  }
  std::vector<int64_t> first_row(spans.size() + 1, 0);
  int64_t longest = 0;
  for (size_t si = 0; si < spans.size(); ++si) {
    first_row[si + 1] = first_row[si] + spans[si].num_tokens;
    longest = std::max(longest, spans[si].num_tokens);
  }
  auto attend = [&](size_t si, ThreadPool* pool) {
    const auto& s = spans[si];
    const int64_t row = first_row[si];
    std::span<const float> qs(&q[row * h * d], s.num_tokens * h * d);
    std::span<const float> ks(&k[row * hkv * d], s.num_tokens * hkv * d);
    std::span<const float> vs(&v[row * hkv * d], s.num_tokens * hkv * d);
    std::span<float> os(&att[row * h * d], s.num_tokens * h * d);
    kv.Run(li, si, s, qs, ks, vs, positions.subspan(row, s.num_tokens), os, pool);
  };
  // Many short spans (a decode step of many sequences, or their draft trees): the spans run in
  // parallel, each on one thread, instead of one pool hand-off per span. Otherwise (prefill) each
  // span splits its heads over the pool. Every head's sums are the same either way.
  if (pool_ != nullptr && spans.size() >= 8 && longest <= 64) {
    pool_->ParallelFor(std::ssize(spans), 1, [&](int64_t b, int64_t e) {
      for (int64_t si = b; si < e; ++si) attend(static_cast<size_t>(si), nullptr);
    });
  } else {
    for (size_t si = 0; si < spans.size(); ++si) attend(si, pool_.get());
  }
  Linear(att, l.wo, {}, t, dm, h * d, out);
  for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
}

void LlamaModel::FeedForwardBlock(const Layer& l, std::vector<float>& x, Workspace& ws) const {
  const auto& c = config_;
  const int64_t dm = c.hidden_size, f = c.intermediate_size;
  const int64_t t = static_cast<int64_t>(x.size()) / dm;
  ws.hn.resize(x.size());
  ws.gate.resize(t * f);
  ws.up.resize(t * f);
  ws.out.resize(x.size());
  auto &hn = ws.hn, &g = ws.gate, &u = ws.up, &out = ws.out;
  Norm(x, l.ffn_norm, t, dm, c.rms_norm_eps, hn);
  Linear(hn, l.w_gate, {}, t, f, dm, g);
  Linear(hn, l.w_up, {}, t, f, dm, u);
  if (backend_ == Backend::kReference) {
    kernels::ref::SwiGlu(g, u, g);
  } else {
    kernels::cpu::SwiGlu(g, u, g);
  }
  Linear(g, l.w_down, {}, t, dm, f, out);
  for (size_t i = 0; i < x.size(); ++i) x[i] += out[i];
}

StatusOr<std::vector<int32_t>> LlamaModel::PackedPositions(
    std::span<const int32_t> tokens, std::span<const SequenceSpan> spans) const {
  const int64_t t = static_cast<int64_t>(tokens.size());
  std::vector<int32_t> positions;
  positions.reserve(tokens.size());
  for (size_t si = 0; si < spans.size(); ++si) {
    const auto& s = spans[si];
    if (s.num_tokens <= 0 || s.start_position < 0) {
      return InvalidArgumentError("sequence " + std::to_string(si) + ": " +
                                  std::to_string(s.num_tokens) + " tokens from position " +
                                  std::to_string(s.start_position));
    }
    if (s.tree_parents.empty()) {
      for (int64_t i = 0; i < s.num_tokens; ++i)
        positions.push_back(static_cast<int32_t>(s.start_position + i));
      continue;
    }
    // A token tree: each token one position past its parent.
    const std::string name = "sequence " + std::to_string(si) + ": token tree";
    if (static_cast<int64_t>(s.tree_parents.size()) != s.num_tokens ||
        s.num_tokens > kernels::ref::kMaxTreeTokens) {
      return InvalidArgumentError(name + " of " + std::to_string(s.tree_parents.size()) +
                                  " parents for " + std::to_string(s.num_tokens) +
                                  " tokens (at most " +
                                  std::to_string(kernels::ref::kMaxTreeTokens) + ")");
    }
    const size_t base = positions.size();
    for (int64_t j = 0; j < s.num_tokens; ++j) {
      const int32_t parent = s.tree_parents[j];
      if (j == 0 ? parent != -1 : (parent < 0 || parent >= j)) {
        return InvalidArgumentError(name + ": token " + std::to_string(j) + " has parent " +
                                    std::to_string(parent) + " (the root's is -1, others' < " +
                                    "their own index)");
      }
      positions.push_back(j == 0 ? static_cast<int32_t>(s.start_position)
                                 : positions[base + static_cast<size_t>(parent)] + 1);
    }
  }
  if (static_cast<int64_t>(positions.size()) != t) {
    return InvalidArgumentError("sequence spans cover " + std::to_string(positions.size()) +
                                " tokens but the batch has " + std::to_string(t));
  }
  for (int64_t i = 0; i < t; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size) {
      return InvalidArgumentError("token " + std::to_string(i) + " has id " +
                                  std::to_string(tokens[i]) + " outside the vocabulary of " +
                                  std::to_string(config_.vocab_size));
    }
  }
  return positions;
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                           KvCache* cache, LogitsFor which, std::vector<float>* logits) const {
  return Forward(tokens, spans, std::span<KvCache* const>(&cache, 1), which, logits);
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                           std::span<KvCache* const> caches, LogitsFor which,
                           std::vector<float>* logits) const {
  if (caches.size() != 1 && caches.size() != spans.size()) {
    return InvalidArgumentError(std::to_string(caches.size()) + " KV caches for " +
                                std::to_string(spans.size()) + " sequences");
  }
  for (size_t si = 0; si < spans.size(); ++si) {
    const auto& s = spans[si];
    const KvCache* cache = caches[caches.size() == 1 ? 0 : si];
    if (cache == nullptr) {
      return InvalidArgumentError("sequence " + std::to_string(si) + ": no KV cache");
    }
    if (!s.tree_parents.empty()) {
      return InvalidArgumentError("sequence " + std::to_string(si) +
                                  ": token trees need the paged KV cache");
    }
    if (s.slot < 0 || s.slot >= cache->num_slots()) {
      return InvalidArgumentError("sequence " + std::to_string(si) + ": KV slot " +
                                  std::to_string(s.slot) + " outside the cache's " +
                                  std::to_string(cache->num_slots()) + " slots");
    }
    if (s.num_tokens <= 0 || s.start_position < 0 ||
        s.start_position + s.num_tokens > cache->max_positions()) {
      return InvalidArgumentError(
          "sequence " + std::to_string(si) + ": positions " + std::to_string(s.start_position) +
          ".." + std::to_string(s.start_position + s.num_tokens - 1) +
          " do not fit the context of " + std::to_string(cache->max_positions()) + " tokens");
    }
  }
  LAMINAR_ASSIGN_OR_RETURN(std::vector<int32_t> positions, PackedPositions(tokens, spans));
  ContiguousKvAttention kv(caches, config_.num_attention_heads, config_.num_key_value_heads,
                           config_.head_dim, backend_ == Backend::kReference);
  ForwardLayers(tokens, positions, spans, kv, which, logits);
  return OkStatus();
}

PagedKvCache LlamaModel::NewPagedCache(int64_t num_blocks, int64_t block_size) const {
  return PagedKvCache(config_.num_hidden_layers, num_blocks, block_size,
                      config_.num_key_value_heads, config_.head_dim);
}

Status LlamaModel::Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                           std::span<const std::span<const int32_t>> block_tables,
                           PagedKvCache* cache, LogitsFor which, std::vector<float>* logits) const {
  if (block_tables.size() != spans.size()) {
    return InvalidArgumentError(std::to_string(block_tables.size()) + " block tables for " +
                                std::to_string(spans.size()) + " sequences");
  }
  const int64_t bs = cache->block_size();
  for (size_t si = 0; si < spans.size(); ++si) {
    const auto& s = spans[si];
    const auto& table = block_tables[si];
    const int64_t slots = static_cast<int64_t>(table.size()) * bs;
    if (s.start_position + s.num_tokens > slots) {
      return InvalidArgumentError("sequence " + std::to_string(si) + ": positions up to " +
                                  std::to_string(s.start_position + s.num_tokens - 1) +
                                  " but its block table of " + std::to_string(table.size()) +
                                  " blocks holds " + std::to_string(slots) + " tokens");
    }
    for (int32_t b : table) {
      if (b < 0 || b >= cache->num_blocks()) {
        return InvalidArgumentError("sequence " + std::to_string(si) + ": block id " +
                                    std::to_string(b) + " outside the cache's " +
                                    std::to_string(cache->num_blocks()) + " blocks");
      }
    }
  }
  LAMINAR_ASSIGN_OR_RETURN(std::vector<int32_t> positions, PackedPositions(tokens, spans));
  PagedKvAttention kv(cache, block_tables, config_.num_attention_heads, config_.num_key_value_heads,
                      config_.head_dim, backend_ == Backend::kReference);
  ForwardLayers(tokens, positions, spans, kv, which, logits);
  return OkStatus();
}

void LlamaModel::ForwardLayers(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                               std::span<const SequenceSpan> spans, const KvAttention& kv,
                               LogitsFor which, std::vector<float>* logits) const {
  const auto& c = config_;
  const int64_t t = static_cast<int64_t>(tokens.size());
  std::vector<float> x(t * c.hidden_size);
  Workspace ws;
  if (backend_ == Backend::kReference) {
    kernels::ref::Embedding(embed_, tokens, c.hidden_size, x);
  } else {
    kernels::cpu::Embedding(embed_, tokens, c.hidden_size, x);
  }
  for (size_t li = 0; li < layers_.size(); ++li) {
    AttentionBlock(layers_[li], static_cast<int64_t>(li), positions, spans, kv, x, ws);
    FeedForwardBlock(layers_[li], x, ws);
  }
  // Select rows, then the final norm and the output head on those rows only.
  std::vector<float> rows;
  int64_t n = 0;
  if (which == LogitsFor::kAllTokens) {
    rows = std::move(x);
    n = t;
  } else {
    int64_t end = 0;
    for (const auto& s : spans) {
      const int64_t first = s.tree_parents.empty() ? end + s.num_tokens - 1 : end;
      end += s.num_tokens;
      rows.insert(rows.end(), x.begin() + first * c.hidden_size, x.begin() + end * c.hidden_size);
      n += end - first;
    }
  }
  std::vector<float> normed(rows.size());
  Norm(rows, final_norm_, n, c.hidden_size, c.rms_norm_eps, normed);
  if (output_ids_.empty()) {
    logits->assign(static_cast<size_t>(n * c.vocab_size), 0.f);
    Linear(normed, lm_head_, {}, n, c.vocab_size, c.hidden_size, *logits);
    return;
  }
  const int64_t s = std::ssize(output_ids_);
  std::vector<float> part(static_cast<size_t>(n * s));
  Linear(normed, lm_head_, {}, n, s, c.hidden_size, part);
  logits->assign(static_cast<size_t>(n * c.vocab_size), -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < s; ++j) (*logits)[i * c.vocab_size + output_ids_[j]] = part[i * s + j];
  }
}

}  // namespace laminar::engine
