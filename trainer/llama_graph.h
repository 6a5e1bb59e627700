// The Llama-family model (docs/architecture.md) as a training graph: forward over a packed batch of
// variable-length sequences (offsets, no padding: the ByteTransformer idea, arXiv 2210.03052),
// keeping the activations, and the backward pass into the ParameterSet's flat gradient buffer.
// Templated on the scalar: f32 trains, f64 checks gradients against finite differences.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model_config.h"
#include "trainer/parameters.h"
#include "trainer/train_ops.h"

namespace laminar::trainer {

// B sequences packed into T tokens. Sequence b owns tokens [seq_offsets[b], seq_offsets[b+1]);
// positions restart at 0 in each sequence. targets[t] is the token position t predicts (the
// next token of its sequence) or -1 where no logprob is wanted (prompt tokens, the last token):
// those rows skip the output head entirely.
//
// Shared prefixes (seq_prefix): sequence b may continue an earlier sequence r = seq_prefix[b]
// that has no prefix itself: b's positions start at r's length and its tokens attend to all of
// r's, then causally to its own. The n samples of a GRPO group share their prompt this way, so
// the prompt is computed once per group instead of n times (its gradient sums every sample's).
struct TrainBatch {
  std::vector<int32_t> tokens;       // [T] in [0, V)
  std::vector<int32_t> targets;      // [T] in [0, V) or -1
  std::vector<int64_t> seq_offsets;  // [B+1], 0 first, T last, non-decreasing
  std::vector<int64_t> seq_prefix;   // empty, or [B]: -1 or an earlier sequence's index
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

struct GraphOptions {
  // bf16 compute (f32 only): every operand of the projection and output-head GEMMs (weights,
  // activations, gradients) rounded to bf16, products accumulated in f32; attention's score and
  // value products, master weights and everything else stay f32.
  bool bf16_compute = false;
  // Keep only each layer's input and recompute the layer in the backward pass.
  bool recompute_activations = false;
  // Rows of [rows, V] logits materialized at once (never a [T, V] tensor): 256 rows of
  // SmolLM2's 49152-token vocabulary are 50 MB, and fewer rows re-read the head's weights and
  // gradient more often.
  int64_t logits_chunk_rows = 256;
  // Logprobs and entropies are of softmax(logits / temperature): the distribution a rollout
  // sampling at this temperature drew from (verl divides the actor's logits likewise). > 0.
  double temperature = 1.0;
};

// Owns its activations; uses the caller's parameter buffers, which must not change between
// Forward and Backward. Not thread-safe; the pool (may be null) is shared, not owned.
template <typename T>
class LlamaGraph {
 public:
  LlamaGraph(const model::ModelConfig& config, const std::vector<ParamInfo>& params,
             GraphOptions options, ThreadPool* pool);

  // Per-token logprobs of batch.targets and entropies of the next-token distribution, [T] each
  // (0 where the target is -1). `values` is the ParameterSet layout. Errors: InvalidArgument for
  // ids out of range, offsets that do not cover the batch, a seq_prefix entry that is not an
  // earlier sequence without a prefix, a sequence (with its prefix) longer than the model's
  // context, or a parameter buffer of the wrong size.
  Status Forward(const TrainBatch& batch, std::span<const T> values, std::vector<T>* logprobs,
                 std::vector<T>* entropy);

  // Accumulates into `grads` (ParameterSet layout) the gradient of
  //   Σ_t grad_logprobs[t] · logprob[t] + grad_entropy[t] · entropy[t]
  // for the last Forward. grad_entropy may be empty (no entropy term).
  Status Backward(std::span<const T> grad_logprobs, std::span<const T> grad_entropy,
                  std::span<T> grads);

  // Bytes of activations the last Forward kept for Backward.
  size_t activation_bytes() const;

 private:
  struct LayerParams {
    size_t attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    int64_t bq = -1, bk = -1, bv = -1;
  };
  struct LayerActs {
    std::vector<T> x_in, rstd1, hn1, q, k, v, att, x_mid, rstd2, hn2, gate, up, act;
    size_t bytes() const;
  };
  // The x[M, K] · W[N, K]ᵀ family, with bf16 operand rounding when asked.
  void Linear(const T* x, size_t w, int64_t m, int64_t n, int64_t k, T* out);
  void LinearBackward(const T* dy, const T* x, size_t w, int64_t m, int64_t n, int64_t k,
                      double beta_dx, T* dx, std::span<T> grads);
  const T* Rounded(const T* x, size_t n, std::vector<T>& scratch) const;
  void LayerForward(const LayerParams& lp, LayerActs& a, std::vector<T>& x);
  void LayerBackward(const LayerParams& lp, LayerActs& a, std::vector<T>& dx, std::span<T> grads);
  // Gathers head rows [r0, r0 + n) into hc (targets into tg) and computes their logits z [n, V];
  // returns the (bf16-rounded when asked) rows the GEMM read.
  const T* HeadLogits(int64_t r0, int64_t n, std::vector<T>& hc, std::vector<int32_t>& tg,
                      std::vector<T>& z);
  // The parameter at `offset` as the GEMMs read it (bf16-rounded with bf16 compute).
  const T* Weight(size_t offset) const {
    return (options_.bf16_compute ? rounded_values_.data() : values_.data()) + offset;
  }
  void HeadForward(std::vector<T>* logprobs, std::vector<T>* entropy);
  // fn(begin, end) over [0, n), split over the pool (f32 elementwise and row ops).
  template <typename Fn>
  void ParallelFor(int64_t n, const Fn& fn) const;
  void NormForward(const T* x, size_t w, T* y, T* rstd);
  void NormBackward(const T* x, size_t w, const T* rstd, const T* dy, T* dx, std::span<T> grads);
  void HeadBackward(std::span<const T> g_lp, std::span<const T> g_ent, std::vector<T>& dhf,
                    std::span<T> grads);

  model::ModelConfig config_;
  GraphOptions options_;
  ThreadPool* pool_;
  size_t num_params_ = 0;
  size_t embed_ = 0, final_norm_ = 0, lm_head_ = 0;
  std::vector<LayerParams> layer_params_;
  std::vector<double> inv_freq_;

  // State of the last Forward.
  std::span<const T> values_;
  std::vector<T> rounded_values_;  // bf16-rounded copy of values_ (bf16 compute only)
  TrainBatch batch_;
  ops::RopeTable rope_;
  // Kept across steps so that their pages are reused (allocating gigabytes per step costs page
  // faults); with recomputation, acts_ hold x_in only and recompute_ the layer being worked on.
  std::vector<LayerActs> acts_;
  LayerActs recompute_;
  // Backward temporaries, also kept.
  std::vector<T> d_act_, d_gate_, d_up_, d_hn_, d_tmp_, d_att_, dq_, dk_, dv_;
  std::vector<T> x_final_, rstd_final_, h_final_;
  std::vector<int64_t> head_rows_;  // rows with a target
  std::vector<T> head_lse_, head_entropy_;
  std::vector<T> scratch_a_, scratch_b_;
};

}  // namespace laminar::trainer
