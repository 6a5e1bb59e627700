// The Llama-family forward pass (Llama 2/3, Qwen2/2.5, SmolLM2, Mistral) over a packed batch of
// variable-length sequences with a KV cache: prefill many sequences at once, then decode one token
// per sequence per step. The trainer and the rollout run this same code, so the logprob a rollout
// records equals the one the trainer recomputes.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "engine/kv_cache.h"
#include "engine/paged_kv_cache.h"
#include "kernels/cpu/quant_gemm.h"
#include "kernels/cpu/rope.h"
#include "kernels/reference/ops.h"
#include "kernels/reference/quant.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace laminar::kernels::cpu {
class ManyRowInt8Weights;  // kernels/cpu/quant_gemm.h
}  // namespace laminar::kernels::cpu

namespace laminar::engine {

// One sequence's part of a packed batch: `num_tokens` consecutive tokens of the batch, written
// to KV-cache `slot` at positions start_position .. start_position + num_tokens - 1.
//
// Token trees (speculative decoding's verification pass; paged Forward only): when tree_parents is
// non-empty the span's tokens are a tree rather than a chain. tree_parents[j] is token j's parent
// within the span (tree_parents[0] == -1: token 0 is the root, continuing the sequence's committed
// positions 0..start_position-1; tree_parents[j] in [0, j) otherwise), at most
// kernels::ref::kMaxTreeTokens tokens. Token j is at position start_position + depth(j) for RoPE
// and attention, attends to the committed positions and its ancestors (itself included), and its
// K/V is written to the slot of position start_position + j. A chain (tree_parents[j] = j - 1) is
// the same as no tree.
struct SequenceSpan {
  SequenceSpan() = default;
  SequenceSpan(int64_t slot_, int64_t start_position_, int64_t num_tokens_,
               std::span<const int32_t> tree_parents_ = {})
      : slot(slot_),
        start_position(start_position_),
        num_tokens(num_tokens_),
        tree_parents(tree_parents_) {}
  int64_t slot = 0;
  int64_t start_position = 0;
  int64_t num_tokens = 0;
  std::span<const int32_t> tree_parents;  // [num_tokens] or empty
};

struct Workspace;   // per-call activation buffers (llama_model.cc)
class KvAttention;  // writes new K/V into a cache and attends over it (llama_model.cc)

// The RoPE frequency scaling kernels take (kernels/reference/ops.h), from a model's config.
kernels::RopeScalingParams RopeScalingOf(const model::ModelConfig& config);

// Which kernels run the dense projections: the reference loops (the truth) or oneDNN.
enum class Backend { kReference, kCpu };

// How the projection weights (q/k/v/o, gate/up/down and the output head) are held and multiplied;
// norms and the embedding table stay f32. Names are the CLIs' `--weights` values and (all but gguf,
// which needs a GGUF checkpoint rather than the trainer's weights) the recipe's
// `rollout.weight_dtype`.
//   f32   as loaded (oneDNN f32 GEMM)
//   bf16  rounded to bf16, f32 accumulation (half the bytes per decode step); on CPUs with a bf16
//         dot product (AVX512-BF16) the activations are rounded to bf16 too and multiplied by it
//         (decode) or oneDNN's bf16 matmul (prefill), as GPUs do; elsewhere they stay f32
//         (LAMINAR_ISA=avx2 selects that path anywhere)
//   w8a8  int8 per output channel, activations int8 per token (kernels/reference/quant.h)
//   w4a8  4-bit groups of 64 in the LiquidQuant layout over int8 per channel, activations int8;
//         the output head in w8a8
//   q8_0  quantized here to ggml's Q8_0 blocks (32 weights, one f16 scale), activations as Q8_0
//         blocks: the gguf kernels below, from any checkpoint (and from the trainer's weights)
//   q4_1  likewise to Q4_1 blocks (32 weights, f16 scale and minimum), the output head in Q8_0
//         (as GGUF's Q4 files keep theirs 8-bit); for both, a matrix whose K is not a multiple
//         of 32 stays f32
//   gguf  the checkpoint's own Q4_0/Q4_1/Q8_0 blocks as stored, activations as Q8_0/Q8_1 blocks;
//         tensors stored otherwise run in f32
// The integer formats run every row count (prefill too) through the same kernels
// (kernels/cpu/quant_gemm.h), so prefill and decode are one quantized policy.
enum class WeightFormat { kF32, kBF16, kW8A8, kW4A8, kQ8_0, kQ4_1, kGguf };
// The w4a8 group size along K (kernels/reference/quant.h allows 64 or 128; 64 measured closer to
// f32 on SmolLM2).
inline constexpr int64_t kW4A8GroupSize = 64;
std::string WeightFormatName(WeightFormat format);
// Every format's name, in the order above (the CLIs' `--weights` choices).
std::vector<std::string> WeightFormatNames();
// What the CLIs' `--weights` help says about the formats.
inline constexpr char kWeightFormatHelp[] =
    "projection weights: f32 (default), bf16, w8a8, w4a8, q8_0 or q4_1 (quantized at load), or "
    "gguf (a GGUF checkpoint's Q4_0/Q4_1/Q8_0 blocks as stored)";
// InvalidArgument listing the names for an unknown one.
StatusOr<WeightFormat> ParseWeightFormat(std::string_view name);

// Which rows of logits Forward returns. kLastTokenOfEachSequence returns every token of a span
// with a token tree (the verification pass needs them all), in span order.
enum class LogitsFor { kAllTokens, kLastTokenOfEachSequence };

// Holds f32 copies (or views) of the weights and a thread pool for the dense projections.
// Forward calls with distinct caches may overlap (per-call workspaces, per-thread scratch); they
// then share the pool's workers (ThreadPool::ParallelFor is thread-safe).
class LlamaModel {
 public:
  // Checks every tensor the config implies is present with the right shape (errors name the
  // tensor and both shapes). Projection weights are held in `format` (above; f32 converted from
  // f16/bf16 when needed, the integer formats quantized here from the f32 values, spread over the
  // pool). The reference backend takes f32 only (InvalidArgument); kGguf needs a checkpoint with
  // Q4_0/Q4_1/Q8_0 projection tensors (InvalidArgument naming the formats otherwise).
  // f32 tensors are used in place, not copied: `weights` must outlive the model.
  static StatusOr<std::unique_ptr<LlamaModel>> Create(const model::ModelConfig& config,
                                                      const model::WeightStore& weights,
                                                      Backend backend = Backend::kCpu,
                                                      WeightFormat format = WeightFormat::kF32);

  // A model that runs only `layers` (ascending indices into this model's, at least one) with this
  // model's embedding, final norm and head: self-speculative decoding's drafter (layer skipping,
  // Draft & Verify, Zhang et al., ACL 2024). It shares the weights and the thread pool: this model
  // must outlive it; their Forward calls may overlap (distinct caches). Its config has
  // num_hidden_layers = layers.size(). InvalidArgument for an empty, unsorted or out-of-range list.
  StatusOr<std::unique_ptr<LlamaModel>> LayerSubset(std::span<const int64_t> layers) const;
  // A model whose output head computes only the logits of the tokens `ids` (ascending, distinct, in
  // [0, V), at least one): Forward still returns [*, V] logits, -inf for every other token, so a
  // sampler gives those tokens probability 0. A speculative drafter's head restricted to the
  // tokens it is likely to draft (FR-Spec, Zhao et al., arXiv 2502.14856: the head is the largest
  // matrix of a small model, and most of the vocabulary is never drafted). The head rows are
  // copied in this model's format, bit for bit (the logits of `ids` are this model's); everything
  // else is shared, as with LayerSubset (this model must outlive it). InvalidArgument for a bad
  // id list.
  StatusOr<std::unique_ptr<LlamaModel>> WithOutputVocab(std::span<const int32_t> ids) const;
  // The tokens the head computes (WithOutputVocab); empty: the whole vocabulary.
  std::span<const int32_t> output_vocab() const { return output_ids_; }

  const model::ModelConfig& config() const { return config_; }
  // The workers Forward uses (null on one hardware thread); callers may run their own
  // ParallelFor on it between or beside Forward calls (it is thread-safe).
  ThreadPool* pool() const { return pool_.get(); }
  WeightFormat weight_format() const { return format_; }
  // Bytes of projection weights one decode step reads (all layers and the head, in their format).
  int64_t projection_bytes() const { return projection_bytes_; }

  // A cache with room for `num_slots` sequences of up to `max_positions` tokens.
  KvCache NewCache(int64_t num_slots, int64_t max_positions) const;

  // Runs the packed batch `tokens` [T] (int32 ids in [0, V)) split into `spans` (in order, their
  // num_tokens summing to T). Logits out: [T, V] or [B, V] f32 by `which`.
  // Errors: InvalidArgument for an id out of range, spans that do not add up, a slot out of
  // range, or positions beyond the cache (naming the sequence and its length).
  Status Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                 KvCache* cache, LogitsFor which, std::vector<float>* logits) const;
  // As above, with span i's keys and values in caches[i] (its slot s.slot there): sequences that
  // each own a cache run in one batch (a speculative drafter's chains, one token of each per
  // call). Same logits as one call per span within kernels::kAttentionF32 (the projections see
  // more rows). Errors: as above, plus InvalidArgument when caches.size() is neither 1 (every
  // span in caches[0]) nor spans.size(), or a cache is null (naming the sequence).
  Status Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                 std::span<KvCache* const> caches, LogitsFor which,
                 std::vector<float>* logits) const;

  // A paged cache of `num_blocks` blocks of `block_size` tokens (both > 0).
  PagedKvCache NewPagedCache(int64_t num_blocks, int64_t block_size) const;

  // Forward over a paged KV cache: as the contiguous Forward, except that span i's keys and values
  // live in the blocks of block_tables[i] (int32 block ids; position p in slot p % block_size of
  // block block_tables[i][p / block_size], the rollout::KvBlockManager layout); SequenceSpan::slot
  // is ignored. Each layer writes the new tokens' K/V with kernels::ref::WriteKv and attends with
  // PagedCausalAttention (cpu:: or ref:: by backend). Tables of different spans must not share a
  // block that this call writes (copy-on-write is the caller's job: PagedKvCache::CopyBlock).
  // Same logits as the contiguous Forward within kernels::kAttentionF32.
  // Errors: as the contiguous Forward, plus InvalidArgument when block_tables.size() !=
  // spans.size(), a table does not cover start_position + num_tokens positions, or a block id is
  // outside the cache (naming the sequence).
  // Spans may carry token trees (SequenceSpan); a tree's slots start_position..+num_tokens-1 must
  // be writable (not shared). Errors also: InvalidArgument for a malformed tree (naming the
  // sequence and the token).
  // Source: PagedAttention (Kwon et al., SOSP 2023, §4.1); tree attention: SpecInfer (Miao et al.,
  // ASPLOS 2024, §4.2).
  Status Forward(std::span<const int32_t> tokens, std::span<const SequenceSpan> spans,
                 std::span<const std::span<const int32_t>> block_tables, PagedKvCache* cache,
                 LogitsFor which, std::vector<float>* logits) const;

 private:
  // A projection weight [N, K] in one format (exactly one member is set).
  struct Weight {
    std::span<const float> f32;
    std::span<const uint16_t> bf16;
    std::shared_ptr<const kernels::W8A8Weights> w8a8;
    std::shared_ptr<const kernels::W4A8Weights> w4a8;
    std::shared_ptr<const kernels::cpu::GgufRowGroups> gguf;
    // w8a8 / w4a8 packed for many-row calls (null where that path does not run).
    std::shared_ptr<const kernels::cpu::ManyRowInt8Weights> int8_packed;
  };
  struct Layer {
    std::span<const float> attn_norm, bq, bk, bv, ffn_norm;
    Weight wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  LlamaModel() = default;
  // A model sharing this one's configuration, head, layers, pool and tables (not owned_): the
  // start of LayerSubset and WithOutputVocab.
  std::unique_ptr<LlamaModel> SharedView() const;
  Status Bind(const model::WeightStore& weights);
  StatusOr<std::span<const float>> Tensor2D(const model::WeightStore& weights,
                                            const std::string& name, int64_t rows, int64_t cols);
  // A projection weight in format_ (conversions are owned; the integer formats are filled in by
  // Quantize).
  StatusOr<Weight> Projection(const model::WeightStore& weights, const std::string& name,
                              int64_t rows, int64_t cols);
  // Bytes of a weight in its format (the step's read of it).
  static int64_t WeightBytes(const Weight& w);
  // Quantizes every projection to w8a8 / w4a8 over the pool (Bind leaves them in f32 first).
  Status Quantize();
  // Quantizes `w` [n, k] to format_ in place, its f32 data dropped (*replaced says which); under
  // q8_0/q4_1 a K that is not whole ggml blocks stays f32. `threads` sizes the many-row packing.
  Status QuantizeWeight(Weight& w, int64_t n, int64_t k, int64_t threads,
                        const void** replaced) const;
  // Positions [T] of the packed batch from `spans`, after checking ids and span sums (errors as
  // Forward; per-span cache checks are the caller's).
  StatusOr<std::vector<int32_t>> PackedPositions(std::span<const int32_t> tokens,
                                                 std::span<const SequenceSpan> spans) const;
  // The layers, final norm and head, with K/V going through `kv`.
  void ForwardLayers(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     std::span<const SequenceSpan> spans, const KvAttention& kv, LogitsFor which,
                     std::vector<float>* logits) const;
  void AttentionBlock(const Layer& layer, int64_t li, std::span<const int32_t> positions,
                      std::span<const SequenceSpan> spans, const KvAttention& kv,
                      std::vector<float>& x, Workspace& ws) const;
  void FeedForwardBlock(const Layer& layer, std::vector<float>& x, Workspace& ws) const;
  void Norm(std::span<const float> x, std::span<const float> weight, int64_t t, int64_t c,
            double eps, std::span<float> out) const;
  // out[M, N] = x[M, K] · w[N, K]^T (+ bias) on the chosen backend.
  void Linear(std::span<const float> x, const Weight& w, std::span<const float> bias, int64_t m,
              int64_t n, int64_t k, std::span<float> out) const;

  model::ModelConfig config_;
  Backend backend_ = Backend::kCpu;
  WeightFormat format_ = WeightFormat::kF32;
  // bf16 weights multiply bf16-rounded activations (kernels/cpu/bf16_dot.h) on CPUs with a bf16
  // dot product; f32 activations otherwise.
  bool bf16_dot_ = false;
  int64_t projection_bytes_ = 0;
  // The caller's thread works too: hardware threads - 1. Shared with LayerSubset views.
  std::shared_ptr<ThreadPool> pool_;
  std::vector<Tensor> owned_;  // f32 conversions of f16/bf16 weights
  std::span<const float> embed_, final_norm_;
  Weight lm_head_;
  std::vector<int32_t> output_ids_;  // the head's rows are these tokens' (empty: all V)
  std::vector<Layer> layers_;
  std::vector<double> inv_freq_;
  std::shared_ptr<const kernels::cpu::RopeTable> rope_;  // the CPU backend's cos/sin table
};

}  // namespace laminar::engine
