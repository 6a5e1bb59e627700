// The suffix drafter; see suffix_drafter.h.
#include "rollout/speculation/suffix_drafter.h"

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
// Suffix drafter

Status SuffixDrafterConfig::Validate() const {
  if (min_match < 1 || max_match < min_match || max_match > 64) {
    return InvalidArgumentError(
        "rollout.speculative.suffix: need 1 <= min_match <= max_match <= 64, got " +
        std::to_string(min_match) + " and " + std::to_string(max_match));
  }
  if (max_continuations < 1 || recent_responses < 0) {
    return InvalidArgumentError(
        "rollout.speculative.suffix: max_continuations must be >= 1 and recent_responses >= 0");
  }
  if (!(min_share >= 0 && min_share <= 1)) {
    return InvalidArgumentError("rollout.speculative.suffix.min_share must be in [0, 1], got " +
                                std::to_string(min_share));
  }
  return OkStatus();
}

SuffixDrafter::SuffixDrafter(SuffixDrafterConfig config) : config_(config) {
  const Status st = config_.Validate();
  LAMINAR_CHECK(st.ok()) << st;
}

uint64_t SuffixDrafter::GramKey(std::span<const int32_t> gram) {
  // SplitMix64 steps over the length and the ids.
  uint64_t h = gram.size();
  for (int32_t t : gram) {
    uint64_t z = h + 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(t);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    h = z ^ (z >> 31);
  }
  return h;
}

void SuffixDrafter::IndexFrom(int64_t doc, int64_t from) {
  const std::vector<int32_t>& t = docs_.at(doc).tokens;
  for (int64_t end = from; end < std::ssize(t); ++end) {
    for (int64_t n = config_.min_match; n <= config_.max_match && n <= end + 1; ++n) {
      index_[GramKey(
                 std::span(t).subspan(static_cast<size_t>(end + 1 - n), static_cast<size_t>(n)))]
          .push_back({doc, end});
    }
  }
}

void SuffixDrafter::Unindex(int64_t doc) {
  const std::vector<int32_t>& t = docs_.at(doc).tokens;
  for (int64_t end = 0; end < std::ssize(t); ++end) {
    for (int64_t n = config_.min_match; n <= config_.max_match && n <= end + 1; ++n) {
      auto it = index_.find(
          GramKey(std::span(t).subspan(static_cast<size_t>(end + 1 - n), static_cast<size_t>(n))));
      if (it == index_.end()) continue;
      std::erase_if(it->second, [&](const Occurrence& o) { return o.doc == doc && o.end == end; });
      if (it->second.empty()) index_.erase(it);
    }
  }
}

void SuffixDrafter::Sync(int64_t doc, int64_t group, std::span<const int32_t> tokens) {
  auto it = docs_.find(doc);
  if (it != docs_.end() && it->second.tokens.size() <= tokens.size() &&
      std::equal(it->second.tokens.begin(), it->second.tokens.end(), tokens.begin())) {
    const int64_t from = std::ssize(it->second.tokens);
    it->second.tokens.insert(it->second.tokens.end(), tokens.begin() + from, tokens.end());
    IndexFrom(doc, from);
    return;
  }
  if (it != docs_.end()) {  // not a continuation of what was indexed: start over
    Unindex(doc);
    docs_.erase(it);
  }
  docs_[doc] = Document{.tokens = {tokens.begin(), tokens.end()}, .group = group};
  IndexFrom(doc, 0);
}

DraftTree SuffixDrafter::Propose(const DraftContext& ctx) {
  DraftTree tree;
  Sync(ctx.seq, ctx.group, ctx.tokens);
  const int64_t len = std::ssize(ctx.tokens);
  if (ctx.max_nodes <= 0) return tree;
  // The longest suffix that occurs somewhere visible with a continuation.
  std::vector<Occurrence> found;
  for (int64_t k = std::min<int64_t>(config_.max_match, len); k >= config_.min_match; --k) {
    const auto gram = ctx.tokens.subspan(static_cast<size_t>(len - k));
    auto it = index_.find(GramKey(gram));
    if (it == index_.end()) continue;
    for (auto o = it->second.rbegin(); o != it->second.rend(); ++o) {
      if (o->doc == ctx.seq && o->end == len - 1) continue;  // the suffix itself
      const Document& d = docs_.at(o->doc);
      if (d.group != -1 && d.group != ctx.group) continue;
      if (o->end + 1 >= std::ssize(d.tokens)) continue;  // nothing follows
      if (!std::equal(gram.begin(), gram.end(), d.tokens.begin() + (o->end + 1 - k))) continue;
      found.push_back(*o);
      if (std::ssize(found) >= config_.max_continuations) break;
    }
    if (!found.empty()) break;
  }
  if (found.empty()) return tree;
  // A trie of the continuations; node 0 is the root.
  struct TrieNode {
    int32_t token = 0, parent = -1, count = 0;
    std::vector<int32_t> children;
  };
  std::vector<TrieNode> trie(1);
  for (const Occurrence& o : found) {
    const auto& t = docs_.at(o.doc).tokens;
    int32_t at = 0;
    ++trie[0].count;
    for (int64_t p = o.end + 1; p < std::ssize(t) && p <= o.end + ctx.max_nodes; ++p) {
      int32_t next = -1;
      for (int32_t c : trie[at].children) {
        if (trie[c].token == t[p]) next = c;
      }
      if (next < 0) {
        next = static_cast<int32_t>(trie.size());
        trie.push_back({t[p], at, 0, {}});
        trie[at].children.push_back(next);
      }
      ++trie[next].count;
      at = next;
    }
  }
  // Best first by how many continuations pass through a node; a node's parent always comes first.
  const double total = trie[0].count;
  auto worse = [&](int32_t a, int32_t b) {
    return trie[a].count < trie[b].count || (trie[a].count == trie[b].count && a > b);
  };
  std::priority_queue<int32_t, std::vector<int32_t>, decltype(worse)> frontier(worse);
  for (int32_t c : trie[0].children) frontier.push(c);
  std::vector<int32_t> tree_index(trie.size(), 0);  // trie node -> tree node
  while (!frontier.empty() && tree.size() < ctx.max_nodes) {
    const int32_t best = frontier.top();
    frontier.pop();
    if (trie[best].count < config_.min_share * total) break;
    tree.tokens.push_back(trie[best].token);
    tree.parents.push_back(tree_index[trie[best].parent]);
    tree_index[best] = static_cast<int32_t>(tree.size());
    for (int32_t c : trie[best].children) frontier.push(c);
  }
  return tree;
}

void SuffixDrafter::OnSequenceEnd(int64_t seq, int64_t /*group*/, std::span<const int32_t> tokens,
                                  int64_t num_prompt_tokens) {
  if (docs_.contains(seq)) {
    Unindex(seq);
    docs_.erase(seq);
  }
  if (config_.recent_responses == 0 || std::ssize(tokens) <= num_prompt_tokens) return;
  const int64_t key = ~next_recent_++;  // negative: never a sequence id
  docs_[key] = Document{.tokens = {tokens.begin() + num_prompt_tokens, tokens.end()}, .group = -1};
  IndexFrom(key, 0);
  recent_.push_back(key);
  while (std::ssize(recent_) > config_.recent_responses) {
    Unindex(recent_.front());
    docs_.erase(recent_.front());
    recent_.pop_front();
  }
}

}  // namespace laminar::rollout
