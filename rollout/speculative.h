// Speculative decoding for the rollout engine, exact for RL (issue 11): drafters propose a token
// tree per sequence, the target verifies every tree of a step in one packed forward with a tree
// mask (engine::SequenceSpan::tree_parents), and the acceptance rules below keep every emitted
// token distributed exactly as the policy's sampler would draw it, with the target's logprob
// recorded. References: speculative sampling (Leviathan et al., ICML 2023, §2.3; Chen et al.,
// arXiv 2302.01318, Alg. 2), tree verification with recursive rejection over siblings (SpecInfer,
// Miao et al., ASPLOS 2024, §4.3), suffix-based drafting (SuffixDecoding, Oliaro et al., arXiv
// 2411.04975), SwiftSpec (arXiv 2506.11309).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/kv_cache.h"
#include "engine/llama_model.h"
#include "engine/sampler.h"

namespace laminar::rollout {

// A token tree drafted for one sequence. Node 0 is the root: the sequence's last sampled token,
// fed this step. Nodes 1..n are drafted, parents before children (node j's parent < j), so every
// prefix of the node list is itself a tree.
struct DraftTree {
  std::vector<int32_t> tokens;   // [n] token of node j + 1
  std::vector<int32_t> parents;  // [n] parent node of node j + 1, in [0, j]
  // For drafters that sample: child_q[node] is the distribution [V] (probabilities summing to 1)
  // every child of `node` was drawn from, independently; an empty row for a node without
  // children. Empty for deterministic drafters (their candidates are tested with the point-mass
  // rule).
  std::vector<std::vector<float>> child_q;  // [n + 1] or empty
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  // Keeps the first `n` drafted nodes (a tree, by the order above).
  void Truncate(int64_t n);
  // The span's parents for engine::SequenceSpan::tree_parents: [n + 1], -1 for the root.
  std::vector<int32_t> SpanParents() const;
  // InvalidArgument naming the first bad node (parent order, ids outside [0, vocab), q rows).
  Status Validate(int64_t vocab) const;
};

// What verification of one tree emits.
struct VerifiedPath {
  std::vector<int32_t> accepted_nodes;  // drafted nodes on the accepted path, root excluded
  // accepted_nodes.size() + 1 tokens: each accepted node's, then the one sampled where the path
  // ends (the correction after a rejection, or the bonus token when a leaf was accepted). Each
  // with the target's logprob under the sampler's distribution (engine::Sampler::Record).
  std::vector<engine::SampledToken> tokens;
};

// Verifies `tree` against the target's logits [(n + 1), V] (row j: the target's next-token logits
// after node j) and emits the accepted path, drawing every uniform from `sampler` (the sequence's
// own stream, so an exported sample carries it). The target distribution p at a node is the
// sampler's (temperature, top-k, top-p, min-p: engine::Sampler::Distribution). Walking down from
// the root, the children of the current node are tried in order:
//   - drafter probabilities q (tree.child_q): accept child x with probability min(1, p(x)/q(x));
//     on rejection p becomes the residual norm(max(0, p - q)) and the next sibling is tried;
//   - deterministic drafter: accept x with probability p(x) (the point-mass rule); on rejection
//     p becomes p with x removed, renormalized.
// The first accepted child becomes the current node; when no child is accepted (or the node has
// none) one token is drawn from the current p and the walk ends. At temperature 0 p is the point
// mass on the argmax, so exactly the greedy tokens come out. Recorded logprobs are always those of
// the unmodified p (the policy), never of q or of a residual.
VerifiedPath VerifyTree(const DraftTree& tree, std::span<const float> logits, int64_t vocab,
                        engine::Sampler& sampler);

// What a drafter sees of one sequence when asked for a tree.
struct DraftContext {
  int64_t seq = 0;                  // the engine's sequence id (unique while it runs)
  int64_t group = 0;                // the request id: the samples of one GRPO group share it
  std::span<const int32_t> tokens;  // prompt then generated tokens; the last one is the root
  int64_t num_prompt_tokens = 0;
  int64_t max_nodes = 0;  // drafted nodes at most (>= 1)
  const engine::SamplingParams* sampling = nullptr;
};

// One forward a model drafter ran in its last ProposeBatch, timed by the drafter.
struct DraftForward {
  int64_t rows = 0;  // tokens fed, all sequences together
  double seconds = 0;
  bool catch_up = false;  // the catch-up prefills of cold sequences alone (a one-time cost)
};

// Proposes token trees. Called from the engine's thread.
class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  // A tree of at most ctx.max_nodes drafted nodes (possibly none).
  virtual DraftTree Propose(const DraftContext& ctx) = 0;
  // Trees for several sequences at once, one per context in order (a context with max_nodes 0
  // gets an empty tree). A model drafter runs one forward per chain depth for all sequences
  // together (batched drafting: a decode step reads the weights once for every row), and feeds
  // catch-ups longer than `warm_catch_up` tokens (cold sequences) in a forward of their own.
  // Default: Propose for each.
  virtual std::vector<DraftTree> ProposeBatch(std::span<const DraftContext> ctxs,
                                              int64_t warm_catch_up);
  // Whether the drafter runs a model: one forward per chain depth, reported by last_forwards().
  virtual bool runs_model() const { return false; }
  // The forwards the last ProposeBatch (or Propose) ran, in order (none when every chain was
  // re-rooted); always empty for drafters without a model. The engine fits the drafter's cost
  // per forward and per row from them, and leaves the catch-up ones out of drafting's cost (a
  // one-time prefill is not the marginal cost of a drafted token).
  virtual std::span<const DraftForward> last_forwards() const { return {}; }
  // `seq` left the engine (finished, aborted or exported) with these tokens.
  virtual void OnSequenceEnd(int64_t seq, int64_t group, std::span<const int32_t> tokens,
                             int64_t num_prompt_tokens) = 0;
  // The engine's policy is now `policy` (at creation and at every weight swap; borrowed, alive
  // until the next call), and, when `draft` is given, the draft_model drafter's model is now
  // `draft` (borrowed likewise: a draft built from each version, e.g. the policy's own weights in
  // a cheaper format; ignored by drafters without one). Errors: the drafter cannot follow it
  // (a draft with another vocabulary); the drafter keeps its model, and the engine's SetWeights
  // fails.
  virtual Status OnWeights(const engine::LlamaModel* /*policy*/,
                           const engine::LlamaModel* /*draft*/ = nullptr) {
    return OkStatus();
  }
  // Asynchronous drafting (SwiftSpec, arXiv 2506.11309 §3: the drafter runs off the target's
  // critical path): called on the engine's drafter thread while the target verifies the tree the
  // last proposal (Propose or ProposeBatch) returned for `seq`, to keep drafting past it (up to
  // `max_nodes` more). A later proposal whose sequence took exactly that path re-roots there and
  // returns what was drafted ahead without waiting. Calls never overlap proposals or each other.
  // Default: nothing.
  virtual void DraftAhead(int64_t /*seq*/, int64_t /*max_nodes*/) {}
  // Proposals so far that were answered from what DraftAhead drafted (re-rooted).
  virtual int64_t rerooted() const { return 0; }
  // Tokens of ctx.tokens that a proposal now would feed to catch up before drafting (sampling
  // unused): the whole sequence before its first draft (less the prompt when a sibling of its
  // group holds it), the tokens emitted since its last draft after. 0 for drafters without a
  // model.
  virtual int64_t CatchUpTokens(const DraftContext& /*ctx*/) const { return 0; }
};

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

  std::string name() const override { return name_; }
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
  ModelDrafter(std::string name, double min_confidence, uint64_t seed, int64_t draft_vocab);
  // Adds `tokens` to the draft vocabulary (draft_vocab > 0).
  void NoteTokens(std::span<const int32_t> tokens);
  // layer_skip: model_ becomes the view of `policy` with the kept layers.
  Status SkipLayersOf(const engine::LlamaModel* policy);
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

  std::string name_;
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

struct SuffixDrafterConfig {
  int32_t max_match = 8;           // longest suffix looked up, in tokens
  int32_t min_match = 2;           // shorter matches propose nothing
  int32_t max_continuations = 16;  // occurrences of the longest match followed, most recent first
  int32_t recent_responses = 64;   // finished responses kept for every sequence to draft from
  // A node is drafted only when at least this share of the followed continuations pass through it.
  double min_share = 0.1;
  Status Validate() const;
};

// The `suffix` drafter: training-free, model-free, always in step with the policy. It indexes
// every n-gram (n <= max_match) of each running sequence (prompt and response, as they grow), of
// the other samples of its GRPO group, and of the last `recent_responses` finished responses. To
// draft, it finds the longest suffix of the sequence (>= min_match tokens) that occurs elsewhere
// in its group's or the recent texts, follows up to max_continuations occurrences, merges what
// follows them into a trie, and drafts the trie's most shared nodes (best first, up to the node
// budget). GRPO samples of one prompt repeat each other heavily, which this exploits.
class SuffixDrafter final : public Drafter {
 public:
  explicit SuffixDrafter(SuffixDrafterConfig config);
  std::string name() const override { return "suffix"; }
  DraftTree Propose(const DraftContext& ctx) override;
  void OnSequenceEnd(int64_t seq, int64_t group, std::span<const int32_t> tokens,
                     int64_t num_prompt_tokens) override;
  // Texts indexed now (running sequences and recent responses). For tests.
  int64_t num_documents() const { return static_cast<int64_t>(docs_.size()); }

 private:
  struct Document {
    std::vector<int32_t> tokens;
    int64_t group = -1;  // -1: a recent response, visible to every sequence
  };
  struct Occurrence {
    int64_t doc = 0;
    int64_t end = 0;  // index of the n-gram's last token in the document
  };
  static uint64_t GramKey(std::span<const int32_t> gram);
  // Indexes the n-grams of `doc` ending at positions [from, size).
  void IndexFrom(int64_t doc, int64_t from);
  void Unindex(int64_t doc);
  // Appends the tokens `doc` does not hold yet (a running sequence's new tokens).
  void Sync(int64_t doc, int64_t group, std::span<const int32_t> tokens);

  SuffixDrafterConfig config_;
  std::unordered_map<int64_t, Document> docs_;  // key: sequence id, or ~n for recent response n
  std::unordered_map<uint64_t, std::vector<Occurrence>> index_;
  std::deque<int64_t> recent_;  // document keys of recent responses, oldest first
  int64_t next_recent_ = 0;
};

// `rollout.speculative.draft_model: policy`: the draft_model drafter's model is the policy itself
// in `draft_weight_dtype`, built by each rollout from every version it pulls (so it follows the
// policy; the actor publishes no draft tensors). The policy's weights in a cheaper format are a
// draft with the same vocabulary and close distributions (QSpec, Zhao et al., arXiv 2410.11305).
inline constexpr std::string_view kPolicyDraftModel = "policy";

// The recipe's `rollout.speculative` block.
struct SpeculativeConfig {
  // off | suffix | layer_skip | draft_model (ModelDrafter)
  std::string drafter = "off";
  // Drafted nodes per tree at most, in [1, 63] (the verification span holds the root too, and
  // tree attention takes at most 64 tokens).
  int64_t max_draft_tokens = 8;
  // true: each step's budgets come from PlanDraftBudgets (acceptance history and measured step
  // costs; speculation switches itself off when it does not pay). false: every decode asks for
  // max_draft_tokens.
  bool adaptive = true;
  // Model drafters draft ahead on their own thread while the target verifies (DraftAhead).
  bool async_draft = false;
  SuffixDrafterConfig suffix;
  int64_t layer_skip_keep = 0;  // layer_skip: layers kept (0: half the policy's, rounded up)
  // draft_model: the drafter model (borrowed; outlives the engine). Required for draft_model by
  // MakeDrafter (not by Validate: a rollout worker builds it from the first version it pulls).
  const engine::LlamaModel* draft_model = nullptr;
  // Model drafters stop a chain once the product of its tokens' q falls below this (see
  // ModelDrafter). Off by default: at temperature > 0 the chance that a drawn token is accepted,
  // min(1, p/q), does not grow with q of the draw, and a near-exact drafter (SmolLM2's own Q4_1
  // blocks with Q8 activations: 0.97 of its tokens accepted at T = 1) stopped after 2-3 tokens of
  // its budget of 8 at 0.05. Chains are bounded by the budgets planned from measured acceptance
  // (adaptive), or run to max_draft_tokens (adaptive: false). Greedy chains never use it.
  double min_confidence = 0;
  // Model drafters: tokens of the drafter's output head besides those seen (ModelDrafter's draft
  // vocabulary); 0: the whole vocabulary.
  int64_t draft_vocab = 0;
  uint64_t seed = 0;  // model drafters' own sampling stream
  bool enabled() const { return drafter != "off"; }
  // InvalidArgument naming the field.
  Status Validate() const;
};

// A drafter's name with variant suffixes, as benchmarks and tests write it: "draft_model+async",
// "layer_skip+vocab", "draft_model+async+vocab" (suffixes in any order).
struct DrafterVariant {
  std::string drafter;       // off | suffix | layer_skip | draft_model
  bool async_draft = false;  // +async: SpeculativeConfig::async_draft
  bool vocab = false;        // +vocab: a draft vocabulary (SpeculativeConfig::draft_vocab)
};
DrafterVariant ParseDrafterVariant(std::string_view name);

// The drafter `config` names (null for off). Errors: config.Validate()'s; InvalidArgument for
// draft_model without a draft model.
StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const SpeculativeConfig& config);

// Counters of speculation in an engine (totals since construction). The per-step metrics
// (docs/metrics.md): rollout/spec_accept_rate = accepted_tokens / drafted_tokens,
// rollout/spec_mean_accepted_len = (accepted_tokens + verify_steps) / verify_steps (tokens emitted
// per verified tree), rollout/spec_enabled_frac = verify_steps / decode_steps.
struct SpecStats {
  int64_t decode_steps = 0;     // decode entries (one sequence, one step), speculating or not
  int64_t verify_steps = 0;     // of those, with a draft tree
  int64_t drafted_tokens = 0;   // nodes verified
  int64_t accepted_tokens = 0;  // nodes accepted
  int64_t budgeted = 0;         // decodes given a draft budget (the drafter was asked)
  int64_t empty_drafts = 0;     // of those, the drafter proposed nothing
  int64_t rerooted = 0;         // proposals taken from a chain drafted ahead (async_draft)
  // The counts since `earlier` (a snapshot of the same engine's running totals).
  SpecStats operator-(const SpecStats& earlier) const {
    return {.decode_steps = decode_steps - earlier.decode_steps,
            .verify_steps = verify_steps - earlier.verify_steps,
            .drafted_tokens = drafted_tokens - earlier.drafted_tokens,
            .accepted_tokens = accepted_tokens - earlier.accepted_tokens,
            .budgeted = budgeted - earlier.budgeted,
            .empty_drafts = empty_drafts - earlier.empty_drafts,
            .rerooted = rerooted - earlier.rerooted};
  }
};

// The acceptance history of one sequence: alpha, the per-token acceptance rate (maximum-likelihood
// of a geometric acceptance process: accepted / (accepted + rejections)), with exponential
// forgetting so it follows the sequence.
struct AcceptanceStats {
  double accepted = 1.0;  // prior: one accepted of two tried
  double rejections = 1.0;
  void Record(int64_t num_accepted, bool rejected, double decay = 0.9);
  double alpha() const { return accepted / (accepted + rejections); }
  // A fresh history with this one's alpha and the weight of the default prior (two tries).
  AcceptanceStats Prior() const {
    return {.accepted = 2 * alpha(), .rejections = 2 * (1 - alpha())};
  }
  // This history after `idle_steps` steps without a try: its evidence fades by `decay` per step
  // toward `global`'s Prior(). A sequence switched off by a run of rejections (frequent at
  // temperature 1, where a near-exact drafter still loses some draws) comes back once the
  // engine-wide rate says drafting pays, instead of waiting for exploration.
  AcceptanceStats FadedToward(const AcceptanceStats& global, int64_t idle_steps,
                              double decay = 0.9) const;
};

// A cost measured as a line, seconds = a + b * size, through the median time of each size over
// the recent records (a sliding window; least squares weighted by each size's count, so a stalled
// record does not tilt it), so speculation is decided from measured costs, not constants.
class CostLine {
 public:
  void Record(int64_t size, double seconds);
  // False until records of at least two distinct sizes were seen together (4 or more in the
  // window, 3 or more of them outside the most common size); then true for good (the slope is
  // kept while the window holds one size). Before, the line is flat through the median of what
  // was seen.
  bool ready() const { return fitted_; }
  bool seen() const { return !window_.empty(); }
  double Seconds(int64_t size) const;  // a + b * size (b >= 0)
  double fixed() const { return a_; }
  double per_unit() const { return b_; }
  // The largest size recorded in the window (0 before any): how far the line was measured.
  int64_t largest() const { return largest_; }

 private:
  void Fit();
  std::deque<std::pair<int64_t, double>> window_;
  double a_ = 0, b_ = 0;
  bool fitted_ = false;  // a slope was measured (records of two sizes at least)
  int64_t largest_ = 0;
};

// The measured costs speculation is planned from: the policy's step against the tokens it feeds,
// the drafter's forward against the rows it feeds (a batched drafter runs one forward per chain
// depth for all its sequences: a fixed part that reads the weights, and a part per row), and a
// model drafter's catch-up prefill per token.
class StepCostModel {
 public:
  // A decode step of the policy fed `tokens` tokens in `seconds`.
  void Record(int64_t tokens, double seconds) { step_.Record(tokens, seconds); }
  // A drafter forward fed `rows` (> 0) tokens in `seconds` (DraftForward). A drafter without a
  // model records each step's proposals as one "forward" whose rows are the tokens it drafted.
  void RecordDraft(int64_t rows, double seconds);
  const CostLine& draft() const { return draft_; }
  // What the planner takes a drafter row to cost: the draft line's slope once it has one.
  // Before, a model drafter's row costs what a policy token does: measured at one row count only
  // (one sequence drafting at a time while the step line is measured) the slope is 0, and rows
  // that looked free planned a draft for 14 of 16 sequences (each row cost 1.8 ms there: 0.94x of
  // off). A drafter without a model keeps its own line (rows are drafted tokens, microseconds).
  // The calibration's modelled extra (SpeculationGain) stays on the draft line itself: with this
  // stand-in there too, batch 4 drafted at a loss (0.98x).
  double draft_per_row() const {
    if (draft_.ready() || !forward_per_depth_) return draft_.per_unit();
    return std::max(draft_.per_unit(), step_.per_unit());
  }
  // Whether the drafter runs a forward per chain depth (a model drafter; the default) or once per
  // step whatever the depth (set by the engine from Drafter::runs_model).
  void set_forward_per_depth(bool per_depth) { forward_per_depth_ = per_depth; }
  bool forward_per_depth() const { return forward_per_depth_; }
  // A model drafter fed `tokens` (> 0) tokens of cold sequences in one prefill to catch their
  // caches up: an exponential moving average of seconds per token. Before one is seen,
  // catch_up_per_token() is a one-row draft forward's (a decode per token: an upper bound).
  void RecordCatchUp(int64_t tokens, double seconds);
  double catch_up_per_token() const {
    return catch_up_seen_ ? catch_up_per_token_ : draft_.Seconds(1);
  }
  // The policy's step line (CostLine::ready and the rest).
  bool ready() const { return step_.ready(); }
  double Seconds(int64_t tokens) const { return step_.Seconds(tokens); }
  double fixed() const { return step_.fixed(); }
  double per_token() const { return step_.per_unit(); }
  int64_t largest_step() const { return step_.largest(); }

 private:
  CostLine step_, draft_;
  bool forward_per_depth_ = true;
  double catch_up_per_token_ = 0;
  bool catch_up_seen_ = false;
};

// What speculation actually yields, measured: per step with drafts (decode steps only), the
// tokens it emitted per second of the whole step (drafting, forward, verification), against the
// tokens per second the same step would have emitted without drafts. That plain time is the step
// cost line at its decode count times a level measured on recent plain steps (their whole time
// over the line's), so a machine that slows down or speeds up, or overheads the line does not
// see, do not bias it; the first step after the line is measured, and while speculation runs
// every kPlainEvery-th step, is plain (plain_due) to keep the level fresh. A moving average of the
// ratio (exponential, corrected for its start so the first step weighs no more than the others);
// from kMinSteps steps on, pays() turns false below kOff and true again above kOn (hysteresis: near
// 1 the ratio is mostly noise). PlanDraftBudgets plans from expectations (acceptance history, a
// linear step cost); this closes the loop on what they missed (a step cost that is not linear in
// the rows, acceptance that does not hold, verification's own cost), so that speculation that loses
// is switched off (the "never slower than off").
class SpeculationGain {
 public:
  static constexpr int64_t kMinSteps = 8;
  static constexpr int64_t kPlainEvery = 16;
  static constexpr double kOff = 0.97, kOn = 1.03;
  // A step with drafts: `decodes` decoding sequences emitted `emitted` tokens in `seconds`; the
  // step cost line puts the same step without drafts at `line_seconds`, and the cost model put
  // what the drafts added (their rows in the policy's forward, the drafter's forwards) at
  // `modelled_extra` seconds (0: not known).
  void Record(int64_t decodes, int64_t emitted, double seconds, double line_seconds,
              double modelled_extra = 0, double decay = 0.95);
  // A plain step (no drafts) took `seconds` where the line puts it at `line_seconds`.
  void RecordPlain(double seconds, double line_seconds);
  bool pays() const { return pays_; }
  // kMinSteps drafted steps measured, and they pay: the cost model is trusted at this batch size
  // (PlanCatchUps' `proven`).
  bool measured_to_pay() const { return steps_ >= kMinSteps && pays_; }
  double ratio() const { return weight_ > 0 ? sum_ / weight_ : 1.0; }  // 1 before any step
  int64_t steps() const { return steps_; }
  // Plain steps' time over the line's, recent ones weighing most (1 before any).
  double level() const { return level_; }
  // No plain step measured the level yet, or kPlainEvery steps with drafts ran since the last.
  bool plain_due() const { return !level_seen_ || since_plain_ >= kPlainEvery; }
  // What drafted steps took beyond a plain step (their time less the line's times the level) over
  // what the cost model put their drafts at, recent steps weighing most, in [kMinExtra, kMaxExtra]
  // (1 before any): the costs the model does not see (verification's sampling, the drafter's
  // draws and bookkeeping, a drafter forward slower at its real shapes than its line), which
  // PlanDraftBudgets scales its modelled costs by (PlanCalibration). Never below 1: a step of a
  // few drafted tokens measures its extra within the noise of a plain step, and a factor of 0.5
  // from such steps doubled how often suffix drafted at batch 4 (0.96x of off).
  double extra_factor() const;
  static constexpr double kMinExtra = 1.0, kMaxExtra = 4.0;
  // A step's verified drafts: the planner expected `expected` of their tokens to be accepted (for
  // each sequence, alpha + alpha^2 + ... over the nodes it verified, alpha as planned) and
  // `accepted` were.
  void RecordAcceptance(double expected, int64_t accepted, double decay = 0.95);
  // Accepted over expected tokens, recent steps weighing most, with two tokens of prior at 1,
  // in [kMinAcceptance, 1]: what PlanDraftBudgets scales its expected gains by
  // (PlanCalibration). The planner drafts for the sequences whose histories look best, and a
  // history that looks good by chance then accepts less than it promised (selection bias): suffix
  // at batch 16, T = 1, drafted where alpha said 0.35 paid and accepted 0.31 of its tokens, 0.89x
  // of off in one round. Never above 1: the bias runs one way, and exploration (not chosen by its
  // history) brings the factor back when drafts get better.
  double acceptance_factor() const;
  static constexpr double kMinAcceptance = 0.25;

 private:
  double sum_ = 0, weight_ = 0;  // Σ decay^age · ratio, Σ decay^age
  int64_t steps_ = 0;
  bool pays_ = true;
  double level_ = 1.0;
  bool level_seen_ = false;
  int64_t since_plain_ = 0;
  double extra_seen_ = 0, extra_modelled_ = 0;  // Σ decay^age · seconds
  double accepted_ = 0, expected_ = 0;          // Σ decay^age · tokens
};

// What the cost model is corrected by when planning (SpeculationGain, measured per batch size):
// a plain step takes plain_level times the step cost line, the costs drafts add extra_factor
// times what the model puts them at, and drafts are accepted acceptance_factor times as often as
// their sequences' histories say.
struct PlanCalibration {
  double plain_level = 1.0;
  double extra_factor = 1.0;
  double acceptance_factor = 1.0;
};

// How many draft nodes each decoding sequence gets this step, for the most tokens per second
// expected from `cost`. A chain of k tokens for sequence i is expected to add alpha_i + ... +
// alpha_i^k tokens (a geometric acceptance process). It costs k rows of the policy's step
// (per_token), its catch-up rows in the drafter's first forward (catch_up[i] when given: the
// tokens emitted since its last draft) plus k - 1 more rows, and first_cost[i] when given (a cold
// sequence's catch-up prefill, spread over the steps it will serve). Chains of depth D cost D
// drafter forwards (their fixed part; one for a drafter without a model), shared by every sequence
// drafting. For each D the draft
// tokens are added greedily, the next one most likely accepted first, each sequence's first
// chain at the length that pays most, for as long as the tokens per second rise and a token is
// expected to add at least 0.05 tokens; the D that gives most wins, against no drafts at all. A
// step feeds at most twice the largest step measured (base_tokens + 1 at least): the line is a
// straight fit, so a plan far beyond what it measured (96 tokens from steps of 16 and 20 at batch
// 16: a 632 ms step where plain ones took 53) extends it a doubling at a time instead.
// `calibration` corrects the model by what was measured: the plain step the plan is compared with
// is the line's times plain_level, and the rows and forwards drafts add cost extra_factor times
// the lines' (first_cost, measured per catch-up token, is not scaled), and a draft token's
// expected acceptance is acceptance_factor times its history's.
// Returns [alpha.size()] budgets in [0, max_nodes]; all 0 when speculation does not pay (a large
// batch whose extra rows cost real compute). Before `cost` is ready, every sequence gets
// `explore_nodes` so that costs get measured.
std::vector<int64_t> PlanDraftBudgets(std::span<const AcceptanceStats> alpha,
                                      const StepCostModel& cost, int64_t base_tokens,
                                      int64_t max_nodes, int64_t explore_nodes,
                                      std::span<const double> first_cost = {},
                                      std::span<const int64_t> catch_up = {},
                                      const PlanCalibration& calibration = {});

// A decoding sequence's drafter cache as the planner sees it (PlanCatchUps): `behind` tokens of
// the sequence it has not fed (Drafter::CatchUpTokens), `generated` tokens after its prompt, in
// GRPO group `group`.
struct CatchUpNeed {
  int64_t behind = 0;
  int64_t group = 0;
  int64_t generated = 0;
};
inline constexpr int64_t kCatchUpNotThisStep = std::numeric_limits<int64_t>::max() / 4;

// The catch-up each sequence's first draft this step is planned to feed: `behind` for a warm one
// (behind <= warm: rows of the drafter's first forward); for a cold one, a prefill of its own.
// Cold sequences of one group share their prompt's prefill (the model drafter prefills it for the
// first that drafts and copies it to the others, ModelDrafter::HeldPrefix), so each is charged
// its own response tokens and an equal share of the prompt tokens the group lacks (at least
// warm + 1: still cold). Unless `proven` (SpeculationGain::measured_to_pay at this batch size),
// only the cold sequence least behind (the first of equals) may draft this step, charged its
// whole catch-up; the others get kCatchUpNotThisStep (RolloutEngine::PlanDrafts gives them an
// infinite first_cost, which PlanDraftBudgets leaves out). Returns [need.size()] tokens.
std::vector<int64_t> PlanCatchUps(std::span<const CatchUpNeed> need, int64_t warm, bool proven);

// Whether drafting could pay for any of `base_tokens` decoding sequences if nearly all drafts
// were accepted (alpha 0.95; the other arguments as for PlanDraftBudgets): exploration, which
// measures acceptance, has nothing to learn where it could not (a batch whose verification and
// drafter rows cost real compute). True before `cost` is ready. The calibration's
// acceptance_factor is not applied (nearly all accepted is the question).
bool DraftsCouldPay(const StepCostModel& cost, int64_t base_tokens, int64_t max_nodes,
                    std::span<const double> first_cost = {}, std::span<const int64_t> catch_up = {},
                    const PlanCalibration& calibration = {});

}  // namespace laminar::rollout
