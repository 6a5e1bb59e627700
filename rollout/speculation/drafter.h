// The drafter interface: what a drafter sees of a sequence (DraftContext), the trees it proposes
// and the forwards it reports. Implementations: suffix_drafter.h, model_drafter.h; chosen by
// speculative_config.h's registry.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/llama_model.h"
#include "engine/sampler.h"
#include "rollout/speculation/draft_tree.h"

namespace laminar::rollout {

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

}  // namespace laminar::rollout
