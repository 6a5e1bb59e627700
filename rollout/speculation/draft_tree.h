// A drafted token tree and its verification, exact for RL: the acceptance rules keep every emitted
// token distributed as the policy's sampler would draw it, with the target's logprob recorded.
// References: speculative sampling (Leviathan et al., ICML 2023, §2.3; Chen et al., arXiv
// 2302.01318, Alg. 2), tree verification with recursive rejection over siblings (SpecInfer, Miao et
// al., ASPLOS 2024, §4.3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
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

}  // namespace laminar::rollout
