// Draft trees and their exact verification; see draft_tree.h.
#include "rollout/speculation/draft_tree.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <queue>
#include <utility>

#include "core/check.h"

namespace laminar::rollout {

// ---------------------------------------------------------------------------------------------
// DraftTree

void DraftTree::Truncate(int64_t n) {
  if (n >= size()) return;
  tokens.resize(static_cast<size_t>(n));
  parents.resize(static_cast<size_t>(n));
  if (!child_q.empty()) {
    child_q.resize(static_cast<size_t>(n + 1));
    // A kept node whose children were all cut keeps its row; it is never read.
  }
}

std::vector<int32_t> DraftTree::SpanParents() const {
  std::vector<int32_t> out = {-1};
  out.insert(out.end(), parents.begin(), parents.end());
  return out;
}

Status DraftTree::Validate(int64_t vocab) const {
  if (parents.size() != tokens.size()) {
    return InvalidArgumentError("draft tree: " + std::to_string(parents.size()) + " parents for " +
                                std::to_string(tokens.size()) + " tokens");
  }
  for (size_t j = 0; j < tokens.size(); ++j) {
    if (parents[j] < 0 || parents[j] > static_cast<int32_t>(j)) {
      return InvalidArgumentError("draft tree: node " + std::to_string(j + 1) + " has parent " +
                                  std::to_string(parents[j]) + " (must be in [0, " +
                                  std::to_string(j) + "])");
    }
    if (tokens[j] < 0 || tokens[j] >= vocab) {
      return InvalidArgumentError("draft tree: node " + std::to_string(j + 1) + " has token " +
                                  std::to_string(tokens[j]) + " outside the vocabulary of " +
                                  std::to_string(vocab));
    }
  }
  if (!child_q.empty()) {
    if (child_q.size() != tokens.size() + 1) {
      return InvalidArgumentError("draft tree: " + std::to_string(child_q.size()) +
                                  " drafter distributions for " +
                                  std::to_string(tokens.size() + 1) + " nodes");
    }
    for (size_t j = 0; j < tokens.size(); ++j) {
      const auto& q = child_q[static_cast<size_t>(parents[j])];
      if (static_cast<int64_t>(q.size()) != vocab || q[static_cast<size_t>(tokens[j])] <= 0) {
        return InvalidArgumentError("draft tree: node " + std::to_string(j + 1) +
                                    " was not drawn from its parent's distribution (size " +
                                    std::to_string(q.size()) + ")");
      }
    }
  }
  return OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Verification

namespace {

// Divides `w` by its sum; false (and `w` unchanged) when the sum is not positive.
bool Normalize(std::vector<double>& w) {
  double sum = 0;
  for (double x : w) sum += x;
  if (!(sum > 0)) return false;
  for (double& x : w) x /= sum;
  return true;
}

}  // namespace

VerifiedPath VerifyTree(const DraftTree& tree, std::span<const float> logits, int64_t vocab,
                        engine::Sampler& sampler) {
  const int64_t n = tree.size();
  LAMINAR_CHECK_EQ(static_cast<int64_t>(logits.size()), (n + 1) * vocab);
  std::vector<std::vector<int32_t>> children(static_cast<size_t>(n + 1));
  for (int64_t j = 0; j < n; ++j) children[tree.parents[j]].push_back(static_cast<int32_t>(j + 1));
  const bool has_q = !tree.child_q.empty();
  VerifiedPath out;
  engine::TokenDistribution dist;
  std::vector<double> residual;
  int32_t node = 0;
  while (true) {
    sampler.Distribution(
        logits.subspan(static_cast<size_t>(node * vocab), static_cast<size_t>(vocab)), &dist);
    int32_t accepted = -1;
    if (dist.greedy) {
      // The point mass on the argmax: a child is accepted iff it is the argmax.
      for (int32_t c : children[node]) {
        if (tree.tokens[c - 1] == dist.ids[0]) {
          accepted = c;
          break;
        }
      }
      out.tokens.push_back(sampler.Record(dist, 0));
      if (accepted < 0) return out;
      out.accepted_nodes.push_back(accepted);
      node = accepted;
      continue;
    }
    residual = dist.probs;
    for (int32_t c : children[node]) {
      const int32_t x = tree.tokens[c - 1];
      const int64_t ix = dist.IndexOf(x);
      const double px = ix < 0 ? 0.0 : residual[static_cast<size_t>(ix)];
      double accept = px;
      const std::vector<float>* q = has_q ? &tree.child_q[node] : nullptr;
      if (q != nullptr) {
        const double qx = (*q)[static_cast<size_t>(x)];
        accept = px <= 0 ? 0.0 : qx > 0 ? std::min(1.0, px / qx) : 1.0;
      }
      if (sampler.Uniform() < accept) {
        accepted = c;
        out.tokens.push_back(sampler.Record(dist, static_cast<size_t>(ix)));
        break;
      }
      // Rejected: the residual distribution the next sibling (or the final draw) is tested on.
      std::vector<double> before = residual;
      if (q != nullptr) {
        for (size_t i = 0; i < residual.size(); ++i)
          residual[i] = std::max(0.0, residual[i] - double((*q)[static_cast<size_t>(dist.ids[i])]));
      } else if (ix >= 0) {
        residual[static_cast<size_t>(ix)] = 0;
      }
      if (!Normalize(residual)) residual = std::move(before);  // rounding only: p == q
    }
    if (accepted < 0) {
      out.tokens.push_back(sampler.Record(dist, sampler.DrawIndex(residual)));
      return out;
    }
    out.accepted_nodes.push_back(accepted);
    node = accepted;
  }
}

}  // namespace laminar::rollout
