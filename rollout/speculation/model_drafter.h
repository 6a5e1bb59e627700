// The model drafters, layer_skip (self-speculation) and draft_model (a small model with the
// policy's vocabulary), with batched drafting, shared group prompts, drafting ahead (SwiftSpec,
// arXiv 2506.11309) and a draft vocabulary (FR-Spec, arXiv 2502.14856).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "engine/kv_cache.h"
#include "engine/llama_model.h"
#include "engine/sampler.h"
#include "rollout/speculation/drafter.h"
#include "rollout/speculation/speculative_config.h"

namespace laminar::rollout {

// The model drafters: `layer_skip` (the policy itself with a subset of its layers, rebuilt from
// every new version: self-speculation) and `draft_model` (a separate small model with the same
// vocabulary). Each running sequence has its own KV cache in the drafter; a proposal catches the
// cache up on the sequence's new tokens (reusing the longest prefix it already holds), then
// drafts a chain: greedy at temperature 0 (deterministic: the point-mass rule), otherwise each
// token drawn from the drafter's distribution q under the request's sampling parameters, with q
// recorded for the min(1, p/q) test. The chain stops early once the product of the drafted
// tokens' q falls below min_confidence (SpeculativeConfig; 0, never, by default).
// ProposeBatch drafts the chains of all its sequences in lockstep: one forward feeds the warm
// sequences' catch-ups (and gives each chain's first token; cold sequences catch up in a forward
// of their own before), then one forward per depth feeds every chain's last token
// (engine::LlamaModel::Forward over one cache per sequence). Draws come from one random stream in
// context order, so the chains are independent of each other. The samples of a GRPO group share
// their prompt: a sequence whose cache does not hold it yet copies a sibling's KV of it
// (engine::KvCache::CopyPrefix) rather than computing it, so a group prefills its prompt once.
// Drafting ahead (DraftAhead, rollout.speculative.async_draft): while the chain is verified, the
// drafter guesses the bonus token that follows the chain's last node (g, its most likely token),
// then drafts a chain after g. When the verification accepts the whole chain and its bonus token is
// g, the next Propose returns that chain (the tree re-rooted at the accepted path, its KV already
// in the drafter's cache). It is exact: the chain after g was drawn from q given the sequence's
// actual prefix, independently of the target's draws.
// Draft vocabulary (draft_vocab > 0; FR-Spec, Zhao et al., arXiv 2502.14856): the drafter's output
// head computes only the `draft_vocab` lowest token ids (a BPE vocabulary is numbered in merge
// order, most frequent first) and every token of the prompts and responses it has seen (a GRPO
// response mostly reuses its prompt's and its siblings' tokens), rebuilt
// (engine::LlamaModel::WithOutputVocab) at a sequence's first proposal and after every
// kVocabRebuildTokens new tokens (fewer for a small vocabulary); past half the vocabulary the whole
// head is used. The head is the largest matrix of a small model: this cuts the bytes a drafted
// token reads. Other tokens get q = 0: the drafter never proposes them, and the residual of the
// min(1, p/q) test emits the policy's mass there exactly.
class ModelDrafter final : public Drafter {
 public:
  // layer_skip: `keep_layers` evenly spaced layers of each policy (first and last included).
  static std::unique_ptr<ModelDrafter> LayerSkip(int64_t keep_layers, double min_confidence,
                                                 uint64_t seed, int64_t draft_vocab = 0);
  // draft_model: `draft` (borrowed, outliving the drafter); its vocabulary must be the policy's
  // (checked in OnWeights).
  static std::unique_ptr<ModelDrafter> DraftModel(const engine::LlamaModel* draft,
                                                  double min_confidence, uint64_t seed,
                                                  int64_t draft_vocab = 0);

  std::string name() const override { return std::string(DrafterName(kind_)); }
  DraftTree Propose(const DraftContext& ctx) override;
  std::vector<DraftTree> ProposeBatch(std::span<const DraftContext> ctxs,
                                      int64_t warm_catch_up) override;
  bool runs_model() const override { return true; }
  std::span<const DraftForward> last_forwards() const override { return forwards_; }
  void OnSequenceEnd(int64_t seq, int64_t group, std::span<const int32_t> tokens,
                     int64_t num_prompt_tokens) override;
  Status OnWeights(const engine::LlamaModel* policy,
                   const engine::LlamaModel* draft = nullptr) override;
  void DraftAhead(int64_t seq, int64_t max_nodes) override;
  // The model drafting now (null before OnWeights for layer_skip), without the draft vocabulary.
  const engine::LlamaModel* model() const { return model_; }
  // Tokens the drafting head computes now (0: the whole vocabulary).
  int64_t draft_vocab_size() const { return head_ ? std::ssize(head_->output_vocab()) : 0; }
  int64_t rerooted() const override { return rerooted_; }
  int64_t CatchUpTokens(const DraftContext& ctx) const override;

 private:
  ModelDrafter(DrafterKind kind, double min_confidence, uint64_t seed, int64_t draft_vocab);
  // Adds `tokens` to the draft vocabulary (draft_vocab > 0).
  void NoteTokens(std::span<const int32_t> tokens);
  // layer_skip (layer_skip_drafter.cc): model_ becomes the view of `policy` with the kept layers.
  Status SkipLayersOf(const engine::LlamaModel* policy);
  // draft_model (draft_model_drafter.cc): model_ becomes `draft` (or stays, when null) after
  // checking its vocabulary is the policy's; unchanged on an error.
  Status UseDraftModel(const engine::LlamaModel* policy, const engine::LlamaModel* draft);
  // Rebuilds head_ from model_ and the draft vocabulary when tokens were added since (`now`) or
  // enough were (1/256 of the vocabulary's size, at most kVocabRebuildTokens); past half the
  // vocabulary (or for a head without a row gather) the whole head is used from then on.
  void RebuildHead(bool now);
  static constexpr int64_t kVocabRebuildTokens = 32;
  // model_, or its view with the draft vocabulary's head.
  const engine::LlamaModel* drafting() const { return head_ ? head_.get() : model_; }
  struct SeqCache {
    explicit SeqCache(engine::KvCache cache) : kv(std::move(cache)) {}
    engine::KvCache kv;
    int64_t group = 0;
    std::vector<int32_t> tokens;  // the tokens whose KV it holds, positions 0..size-1
    // The last proposal: the sequence followed by the drafted chain, and its sampling parameters.
    std::vector<int32_t> proposed;
    engine::SamplingParams params;
    // Drafted ahead: the sequence `ahead_base` (proposed + the guessed bonus token) continues with
    // `ahead`, ahead[i] drawn from ahead_q[i] (rows empty at temperature 0).
    std::vector<int32_t> ahead_base, ahead;
    std::vector<std::vector<float>> ahead_q;
  };
  // A chain being drafted for one sequence.
  struct Chain {
    size_t index = 0;  // its context in ProposeBatch
    SeqCache* cache = nullptr;
    std::vector<int32_t> seq;  // the sequence, then the chain drawn so far
    int64_t fed = 0;           // leading tokens of seq whose KV the cache holds
    int64_t max_nodes = 0;
    engine::SamplingParams params;
    std::vector<float> logits;  // [V] the next-token logits after seq
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> q;  // each token's distribution (none at temperature 0)
    double confidence = 1.0;
  };
  // The longest prefix of ctx.tokens (leaving one token to feed) whose KV a cache holds: the
  // sequence's own, or, before its own holds the prompt, a sibling's of its group or the prompt
  // kept from one that ended (the GRPO group's shared prompt, copied instead of recomputed). The
  // donor is null for its own cache.
  std::pair<int64_t, const SeqCache*> HeldPrefix(const DraftContext& ctx) const;
  // `cache` takes the KV of `donor`'s first `held` positions, which hold tokens[0, held).
  static void CopyHeld(const SeqCache& donor, SeqCache& cache, std::span<const int32_t> tokens,
                       int64_t held);
  // One forward feeding each chain's seq[fed..] into its cache; each chain's logits become those
  // after its last token. Timed into `log` when given.
  void Feed(std::span<Chain* const> chains, bool catch_up, std::vector<DraftForward>* log);
  // From chains whose logits are fed: draws each chain's tokens in lockstep, one forward per
  // depth for the chains still going, until each has max_nodes tokens or its product of q fell
  // below min_confidence (the last token drawn is not fed).
  void Draw(std::vector<Chain*> chains, std::vector<DraftForward>* log);
  // The proposal `chain` (drawn after `tokens`, q per token) as a tree; the cache remembers it
  // for drafting ahead.
  static DraftTree Proposal(SeqCache& cache, std::span<const int32_t> tokens,
                            std::vector<int32_t> chain, std::vector<std::vector<float>> q);

  DrafterKind kind_;
  double min_confidence_;
  int64_t keep_layers_ = 0;                    // layer_skip
  std::unique_ptr<engine::LlamaModel> owned_;  // layer_skip: the view of the current policy
  const engine::LlamaModel* model_ = nullptr;
  int64_t draft_vocab_ = 0;
  std::vector<uint8_t> in_vocab_;             // [V] 1: in the draft vocabulary (draft_vocab > 0)
  int64_t vocab_pending_ = 0;                 // tokens added since head_ was built
  int64_t vocab_count_ = 0;                   // tokens in the draft vocabulary (ones in in_vocab_)
  std::unique_ptr<engine::LlamaModel> head_;  // model_ with the draft vocabulary's head
  engine::Xoshiro256 rng_;
  std::unordered_map<int64_t, SeqCache> caches_;
  std::unordered_map<int64_t, std::vector<int64_t>> group_seqs_;  // group -> sequences in caches_
  // The cache of the last sample of a group to end, its tokens cut to the prompt, for the group's
  // samples still to come (HeldPrefix): a rollout at batch 1 runs a GRPO group's samples one
  // after another, and each would prefill the prompt again. The kMaxPromptDonors groups that
  // ended last, oldest first in donor_order_.
  static constexpr size_t kMaxPromptDonors = 4;
  std::unordered_map<int64_t, SeqCache> prompt_donors_;
  std::deque<int64_t> donor_order_;
  int64_t rerooted_ = 0;
  std::vector<DraftForward> forwards_;  // the last ProposeBatch's
};

}  // namespace laminar::rollout
