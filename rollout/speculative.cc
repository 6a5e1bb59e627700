// Speculative decoding: tree verification with exact acceptance, the suffix drafter, and the
// measured-cost planning of draft budgets (see speculative.h).
#include "rollout/speculative.h"

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

// ---------------------------------------------------------------------------------------------
// Model drafters

ModelDrafter::ModelDrafter(std::string name, double min_confidence, uint64_t seed,
                           int64_t draft_vocab)
    : name_(std::move(name)),
      min_confidence_(min_confidence),
      draft_vocab_(draft_vocab),
      rng_(seed) {}

std::unique_ptr<ModelDrafter> ModelDrafter::LayerSkip(int64_t keep_layers, double min_confidence,
                                                      uint64_t seed, int64_t draft_vocab) {
  std::unique_ptr<ModelDrafter> d(
      new ModelDrafter("layer_skip", min_confidence, seed, draft_vocab));
  d->keep_layers_ = keep_layers;
  return d;
}

std::unique_ptr<ModelDrafter> ModelDrafter::DraftModel(const engine::LlamaModel* draft,
                                                       double min_confidence, uint64_t seed,
                                                       int64_t draft_vocab) {
  LAMINAR_CHECK(draft != nullptr) << "draft_model needs a model";
  std::unique_ptr<ModelDrafter> d(
      new ModelDrafter("draft_model", min_confidence, seed, draft_vocab));
  d->model_ = draft;
  return d;
}

Status ModelDrafter::OnWeights(const engine::LlamaModel* policy, const engine::LlamaModel* draft) {
  // Checked before anything changes: on an error the drafter keeps its model (and the caller may
  // free `draft`).
  if (name_ == "draft_model") {
    const engine::LlamaModel* next = draft != nullptr ? draft : model_;
    if (next->config().vocab_size != policy->config().vocab_size) {
      return InvalidArgumentError(
          "draft_model: its vocabulary of " + std::to_string(next->config().vocab_size) +
          " tokens differs from the policy's " + std::to_string(policy->config().vocab_size));
    }
    model_ = next;
  } else {
    head_.reset();  // a view of the layer subset SkipLayersOf replaces (the whole head serves)
    LAMINAR_RETURN_IF_ERROR(SkipLayersOf(policy));  // replaces the subset only on success
  }
  caches_.clear();  // KV of the old drafter weights
  group_seqs_.clear();
  prompt_donors_.clear();
  donor_order_.clear();
  head_.reset();
  // The draft vocabulary: the lowest ids, plus every token seen (kept across versions).
  const int64_t v = model_->config().vocab_size;
  if (draft_vocab_ > 0 && draft_vocab_ < v) {
    if (std::ssize(in_vocab_) != v) {
      in_vocab_.assign(static_cast<size_t>(v), 0);
      std::fill_n(in_vocab_.begin(), draft_vocab_, 1);
      vocab_count_ = draft_vocab_;
    }
    vocab_pending_ = std::max<int64_t>(vocab_pending_, 1);
    RebuildHead(/*now=*/true);
  }
  return OkStatus();
}

void ModelDrafter::NoteTokens(std::span<const int32_t> tokens) {
  if (in_vocab_.empty()) return;
  for (const int32_t t : tokens) {
    if (t >= 0 && t < std::ssize(in_vocab_) && in_vocab_[t] == 0) {
      in_vocab_[t] = 1;
      ++vocab_pending_;
      ++vocab_count_;
    }
  }
}

void ModelDrafter::RebuildHead(bool now) {
  if (vocab_pending_ == 0 || model_ == nullptr) return;
  // A copy of the head per 1/256 of its rows added, at most per kVocabRebuildTokens.
  const int64_t every = std::clamp<int64_t>(vocab_count_ / 256, 1, kVocabRebuildTokens);
  if (!now && vocab_pending_ < every) return;
  vocab_pending_ = 0;
  auto whole_head = [this] {
    head_.reset();
    in_vocab_.clear();
    draft_vocab_ = 0;
  };
  // Past half the vocabulary the copy saves little: the whole head from here on.
  if (2 * vocab_count_ > std::ssize(in_vocab_)) return whole_head();
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(vocab_count_));
  for (size_t t = 0; t < in_vocab_.size(); ++t) {
    if (in_vocab_[t] != 0) ids.push_back(static_cast<int32_t>(t));
  }
  auto view = model_->WithOutputVocab(ids);
  if (!view.ok()) return whole_head();  // a head format without a row gather
  head_ = std::move(*view);
}

Status ModelDrafter::SkipLayersOf(const engine::LlamaModel* policy) {
  // Evenly spaced layers, the first and the last among them.
  const int64_t total = policy->config().num_hidden_layers;
  const int64_t keep =
      std::clamp<int64_t>(keep_layers_ > 0 ? keep_layers_ : (total + 1) / 2, 1, total);
  std::vector<int64_t> layers;
  for (int64_t i = 0; i < keep; ++i) {
    const int64_t l = keep == 1 ? 0 : i * (total - 1) / (keep - 1);
    if (layers.empty() || l > layers.back()) layers.push_back(l);
  }
  LAMINAR_ASSIGN_OR_RETURN(owned_, policy->LayerSubset(layers), "layer_skip drafter");
  model_ = owned_.get();
  return OkStatus();
}

void ModelDrafter::Feed(std::span<Chain* const> chains, bool catch_up,
                        std::vector<DraftForward>* log) {
  if (chains.empty()) return;
  std::vector<int32_t> tokens;
  std::vector<engine::SequenceSpan> spans;
  std::vector<engine::KvCache*> caches;
  for (const Chain* c : chains) {
    const int64_t n = std::ssize(c->seq) - c->fed;
    tokens.insert(tokens.end(), c->seq.begin() + c->fed, c->seq.end());
    spans.emplace_back(0, c->fed, n);
    caches.push_back(&c->cache->kv);
  }
  std::vector<float> logits;
  const auto start = std::chrono::steady_clock::now();
  const Status st = drafting()->Forward(tokens, spans, caches,
                                        engine::LogitsFor::kLastTokenOfEachSequence, &logits);
  LAMINAR_CHECK(st.ok()) << "drafter forward: " << st;
  if (log != nullptr) {
    log->push_back(
        {.rows = std::ssize(tokens),
         .seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
         .catch_up = catch_up});
  }
  const auto v = static_cast<size_t>(model_->config().vocab_size);
  for (size_t i = 0; i < chains.size(); ++i) {
    Chain& c = *chains[i];
    c.logits.assign(logits.begin() + static_cast<std::ptrdiff_t>(i * v),
                    logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * v));
    c.cache->tokens = c.seq;
    c.fed = std::ssize(c.seq);
  }
}

void ModelDrafter::Draw(std::vector<Chain*> chains, std::vector<DraftForward>* log) {
  const int64_t v = model_->config().vocab_size;
  engine::TokenDistribution dist;
  while (!chains.empty()) {
    std::vector<Chain*> going;
    for (Chain* c : chains) {
      // One stream for all chains, drawn in order: independent draws whatever the batch.
      engine::Sampler sampler(c->params, rng_.state());
      sampler.Distribution(c->logits, &dist);
      const bool greedy = dist.greedy;
      const size_t pick = greedy ? 0 : sampler.DrawIndex(dist.probs);
      rng_ = engine::Xoshiro256::FromState(sampler.rng_state());
      const int32_t token = dist.ids[pick];
      c->tokens.push_back(token);
      c->seq.push_back(token);
      if (!greedy) {
        std::vector<float>& row = c->q.emplace_back(static_cast<size_t>(v), 0.f);
        for (size_t j = 0; j < dist.ids.size(); ++j)
          row[dist.ids[j]] = static_cast<float>(dist.probs[j]);
        c->confidence *= dist.probs[pick];
      }
      if (std::ssize(c->tokens) < c->max_nodes && c->confidence >= min_confidence_) {
        going.push_back(c);
      }
    }
    Feed(going, /*catch_up=*/false, log);
    chains = std::move(going);
  }
}

namespace {

// Positions of `tokens` whose KV a drafter cache fed `fed` holds: their common prefix, leaving
// at least one token to feed (for the logits).
int64_t ValidPrefix(const std::vector<int32_t>& fed, std::span<const int32_t> tokens) {
  const int64_t len = std::ssize(tokens);
  int64_t valid = 0;
  while (valid < std::ssize(fed) && valid < len - 1 &&
         fed[static_cast<size_t>(valid)] == tokens[static_cast<size_t>(valid)]) {
    ++valid;
  }
  return valid;
}

}  // namespace

std::pair<int64_t, const ModelDrafter::SeqCache*> ModelDrafter::HeldPrefix(
    const DraftContext& ctx) const {
  int64_t held = 0;
  if (auto it = caches_.find(ctx.seq); it != caches_.end()) {
    held = ValidPrefix(it->second.tokens, ctx.tokens);
  }
  const SeqCache* donor = nullptr;
  if (held >= ctx.num_prompt_tokens) return {held, donor};
  if (auto g = group_seqs_.find(ctx.group); g != group_seqs_.end()) {
    for (int64_t sibling : g->second) {
      if (sibling == ctx.seq) continue;
      const SeqCache& other = caches_.at(sibling);
      if (const int64_t n = ValidPrefix(other.tokens, ctx.tokens); n > held) {
        held = n;
        donor = &other;
      }
    }
  }
  if (auto kept = prompt_donors_.find(ctx.group); kept != prompt_donors_.end()) {
    if (const int64_t n = ValidPrefix(kept->second.tokens, ctx.tokens); n > held) {
      held = n;
      donor = &kept->second;
    }
  }
  return {held, donor};
}

int64_t ModelDrafter::CatchUpTokens(const DraftContext& ctx) const {
  if (model_ == nullptr) return 0;  // Propose drafts nothing yet
  return std::ssize(ctx.tokens) - HeldPrefix(ctx).first;
}

std::vector<DraftTree> Drafter::ProposeBatch(std::span<const DraftContext> ctxs,
                                             int64_t /*warm_catch_up*/) {
  std::vector<DraftTree> trees;
  trees.reserve(ctxs.size());
  for (const DraftContext& ctx : ctxs)
    trees.push_back(ctx.max_nodes > 0 ? Propose(ctx) : DraftTree{});
  return trees;
}

void ModelDrafter::CopyHeld(const SeqCache& donor, SeqCache& cache, std::span<const int32_t> tokens,
                            int64_t held) {
  cache.kv.CopyPrefix(donor.kv, 0, 0, held);
  cache.tokens.assign(tokens.begin(), tokens.begin() + held);
}

DraftTree ModelDrafter::Propose(const DraftContext& ctx) {
  return std::move(ProposeBatch({&ctx, 1}, std::numeric_limits<int64_t>::max())[0]);
}

DraftTree ModelDrafter::Proposal(SeqCache& cache, std::span<const int32_t> tokens,
                                 std::vector<int32_t> chain, std::vector<std::vector<float>> q) {
  cache.ahead.clear();
  cache.ahead_q.clear();
  cache.ahead_base.clear();
  cache.proposed.assign(tokens.begin(), tokens.end());
  cache.proposed.insert(cache.proposed.end(), chain.begin(), chain.end());
  // A chain: node i + 1's parent is node i (0: the root); child_q[i] is the row node i's child
  // was drawn from, and the last node has no child.
  DraftTree tree;
  for (size_t i = 0; i < chain.size(); ++i) {
    tree.tokens.push_back(chain[i]);
    tree.parents.push_back(static_cast<int32_t>(i));
  }
  if (!q.empty()) {
    tree.child_q = std::move(q);
    tree.child_q.emplace_back();
  }
  return tree;
}

std::vector<DraftTree> ModelDrafter::ProposeBatch(std::span<const DraftContext> ctxs,
                                                  int64_t warm_catch_up) {
  std::vector<DraftTree> trees(ctxs.size());
  forwards_.clear();
  if (model_ == nullptr) return trees;
  std::vector<Chain> chains;
  chains.reserve(ctxs.size());
  bool first_draft = false;
  for (size_t i = 0; i < ctxs.size(); ++i) {
    const DraftContext& ctx = ctxs[i];
    if (ctx.max_nodes <= 0 || ctx.sampling == nullptr) continue;
    const int64_t len = std::ssize(ctx.tokens);
    const int64_t need = len + ctx.max_nodes;
    if (need > model_->config().max_position_embeddings) continue;
    const auto [held, donor] = HeldPrefix(ctx);
    auto it = caches_.find(ctx.seq);
    first_draft |= it == caches_.end();
    if (it == caches_.end() || it->second.kv.max_positions() < need) {
      // A new cache, or a larger one that keeps what the old one held.
      const int64_t cap = std::min<int64_t>(std::max<int64_t>(2 * need, 256),
                                            model_->config().max_position_embeddings);
      SeqCache grown(model_->NewCache(1, cap));
      grown.group = ctx.group;
      if (it == caches_.end()) {
        group_seqs_[ctx.group].push_back(ctx.seq);
        it = caches_.emplace(ctx.seq, std::move(grown)).first;
      } else {
        if (donor == nullptr && held > 0) CopyHeld(it->second, grown, ctx.tokens, held);
        it->second = std::move(grown);
      }
    }
    SeqCache& cache = it->second;
    if (donor != nullptr) CopyHeld(*donor, cache, ctx.tokens, held);
    NoteTokens(ctx.tokens);
    engine::SamplingParams params = *ctx.sampling;
    params.logprobs = 0;
    cache.params = params;
    if (!cache.ahead.empty() && std::ranges::equal(cache.ahead_base, ctx.tokens)) {
      // Re-rooted: the sequence took the drafted path and the guessed bonus token.
      const auto n =
          static_cast<std::ptrdiff_t>(std::min<int64_t>(ctx.max_nodes, std::ssize(cache.ahead)));
      std::vector<int32_t> chain(cache.ahead.begin(), cache.ahead.begin() + n);
      std::vector<std::vector<float>> q;
      if (!cache.ahead_q.empty()) q.assign(cache.ahead_q.begin(), cache.ahead_q.begin() + n);
      trees[i] = Proposal(cache, ctx.tokens, std::move(chain), std::move(q));
      ++rerooted_;
      continue;
    }
    Chain& c = chains.emplace_back();
    c.index = i;
    c.cache = &cache;
    c.seq.assign(ctx.tokens.begin(), ctx.tokens.end());
    c.fed = held;
    c.max_nodes = ctx.max_nodes;
    c.params = params;
  }
  // A sequence's first draft brings its prompt's tokens (what its response most likely reuses):
  // rebuilt at once; later ones wait for kVocabRebuildTokens new tokens (a token not in the head
  // yet just has q = 0, which stays exact).
  RebuildHead(/*now=*/first_draft);
  // Cold sequences catch up in a forward of their own: the first of each group, then the others
  // that share a prefix with it, from its KV (HeldPrefix: a GRPO group starting together
  // prefills its prompt once).
  std::vector<Chain*> leaders, followers, warm, all;
  for (Chain& c : chains) {
    all.push_back(&c);
    if (std::ssize(c.seq) - c.fed <= warm_catch_up) {
      warm.push_back(&c);
    } else if (std::ranges::any_of(leaders, [&](const Chain* l) {
                 return ctxs[l->index].group == ctxs[c.index].group &&
                        ValidPrefix(l->seq, c.seq) > c.fed;
               })) {
      followers.push_back(&c);
    } else {
      leaders.push_back(&c);
    }
  }
  Feed(leaders, /*catch_up=*/true, &forwards_);
  std::vector<Chain*> still_cold;
  for (Chain* c : followers) {
    if (const auto [held, donor] = HeldPrefix(ctxs[c->index]); donor != nullptr && held > c->fed) {
      CopyHeld(*donor, *c->cache, c->seq, held);
      c->fed = held;
    }
    (std::ssize(c->seq) - c->fed <= warm_catch_up ? warm : still_cold).push_back(c);
  }
  Feed(still_cold, /*catch_up=*/true, &forwards_);
  Feed(warm, /*catch_up=*/false, &forwards_);
  Draw(all, &forwards_);
  for (Chain& c : chains) {
    trees[c.index] = Proposal(*c.cache, ctxs[c.index].tokens, std::move(c.tokens), std::move(c.q));
  }
  return trees;
}

void ModelDrafter::DraftAhead(int64_t seq_id, int64_t max_nodes) {
  auto it = caches_.find(seq_id);
  if (it == caches_.end() || model_ == nullptr || max_nodes <= 0) return;
  SeqCache& cache = it->second;
  if (cache.proposed.empty()) return;
  // Room for the chain's last node, the guess and max_nodes more.
  if (std::ssize(cache.proposed) + 1 + max_nodes > cache.kv.max_positions()) return;
  Chain c;
  c.cache = &cache;
  c.seq = cache.proposed;
  c.fed = ValidPrefix(cache.tokens, c.seq);
  c.max_nodes = max_nodes;
  c.params = cache.params;
  Chain* one = &c;
  Feed({&one, 1}, /*catch_up=*/false, nullptr);
  // The guess of the bonus token: the drafter's most likely one (the bonus is drawn from the
  // policy, so this maximizes the chance to re-root when q is close to p).
  engine::Sampler sampler(c.params, rng_.state());
  engine::TokenDistribution dist;
  sampler.Distribution(c.logits, &dist);
  const auto best = dist.greedy ? dist.probs.begin() : std::ranges::max_element(dist.probs);
  c.seq.push_back(dist.ids[static_cast<size_t>(best - dist.probs.begin())]);
  cache.ahead_base = c.seq;  // proposed + the guess
  Feed({&one, 1}, /*catch_up=*/false, nullptr);
  Draw({one}, nullptr);
  cache.ahead = std::move(c.tokens);
  cache.ahead_q = std::move(c.q);
}

void ModelDrafter::OnSequenceEnd(int64_t seq, int64_t /*group*/, std::span<const int32_t> tokens,
                                 int64_t num_prompt_tokens) {
  if (auto it = caches_.find(seq); it != caches_.end()) {
    const int64_t group = it->second.group;
    auto g = group_seqs_.find(group);
    LAMINAR_CHECK(g != group_seqs_.end()) << "drafter cache of sequence " << seq << " has no group";
    std::erase(g->second, seq);
    if (g->second.empty()) group_seqs_.erase(g);
    // The last of its group still running: its prompt's KV waits for the group's next samples,
    // in a cache of the prompt's size (the sample's own holds its whole response, and more).
    const int64_t prompt =
        std::min<int64_t>(std::ssize(it->second.tokens), std::max<int64_t>(0, num_prompt_tokens));
    if (!group_seqs_.contains(group) && prompt > 0) {
      SeqCache kept(model_->NewCache(1, prompt));
      kept.group = group;
      CopyHeld(it->second, kept, it->second.tokens, prompt);
      std::erase(donor_order_, group);
      prompt_donors_.insert_or_assign(group, std::move(kept));
      donor_order_.push_back(group);
      while (donor_order_.size() > kMaxPromptDonors) {
        prompt_donors_.erase(donor_order_.front());
        donor_order_.pop_front();
      }
    }
    caches_.erase(it);
  }
  NoteTokens(tokens);  // its siblings and later responses may write them
}

// ---------------------------------------------------------------------------------------------
// Configuration

DrafterVariant ParseDrafterVariant(std::string_view name) {
  DrafterVariant v;
  for (bool more = true; more;) {
    more = false;
    for (const auto& [suffix, flag] :
         {std::pair<std::string_view, bool*>{"+async", &v.async_draft}, {"+vocab", &v.vocab}}) {
      if (name.ends_with(suffix)) {
        name.remove_suffix(suffix.size());
        *flag = true;
        more = true;
      }
    }
  }
  v.drafter = std::string(name);
  return v;
}

Status SpeculativeConfig::Validate() const {
  if (layer_skip_keep < 0) {
    return InvalidArgumentError("rollout.speculative.layer_skip_keep must be >= 0, got " +
                                std::to_string(layer_skip_keep));
  }
  if (draft_vocab < 0) {
    return InvalidArgumentError("rollout.speculative.draft_vocab must be >= 0, got " +
                                std::to_string(draft_vocab));
  }
  if (!(min_confidence >= 0 && min_confidence < 1)) {
    return InvalidArgumentError("rollout.speculative.min_confidence must be in [0, 1), got " +
                                std::to_string(min_confidence));
  }
  if (drafter != "off" && drafter != "suffix" && drafter != "layer_skip" &&
      drafter != "draft_model") {
    return InvalidArgumentError("rollout.speculative.drafter: '" + drafter +
                                "' is not one of off, suffix, layer_skip, draft_model");
  }
  // (async_draft with drafter off is ignored: turning speculation off keeps the rest valid.)
  if (async_draft && drafter == "suffix") {
    return InvalidArgumentError(
        "rollout.speculative.async_draft: only the model drafters (layer_skip, draft_model) draft "
        "ahead; the drafter is suffix");
  }
  if (max_draft_tokens < 1 || max_draft_tokens > 63) {
    return InvalidArgumentError("rollout.speculative.max_draft_tokens must be in [1, 63], got " +
                                std::to_string(max_draft_tokens));
  }
  return suffix.Validate();
}

StatusOr<std::unique_ptr<Drafter>> MakeDrafter(const SpeculativeConfig& config) {
  LAMINAR_RETURN_IF_ERROR(config.Validate());
  if (config.drafter == "suffix") return std::unique_ptr<Drafter>(new SuffixDrafter(config.suffix));
  if (config.drafter == "layer_skip") {
    return std::unique_ptr<Drafter>(ModelDrafter::LayerSkip(
        config.layer_skip_keep, config.min_confidence, config.seed, config.draft_vocab));
  }
  if (config.drafter == "draft_model") {
    if (config.draft_model == nullptr) {
      return InvalidArgumentError(
          "rollout.speculative.drafter: draft_model needs a drafter model (none given)");
    }
    return std::unique_ptr<Drafter>(ModelDrafter::DraftModel(
        config.draft_model, config.min_confidence, config.seed, config.draft_vocab));
  }
  return std::unique_ptr<Drafter>();
}

// ---------------------------------------------------------------------------------------------
// Adaptivity

void AcceptanceStats::Record(int64_t num_accepted, bool rejected, double decay) {
  accepted = decay * accepted + static_cast<double>(num_accepted);
  rejections = decay * rejections + (rejected ? 1.0 : 0.0);
}

AcceptanceStats AcceptanceStats::FadedToward(const AcceptanceStats& global, int64_t idle_steps,
                                             double decay) const {
  const double w = std::pow(decay, static_cast<double>(std::max<int64_t>(idle_steps, 0)));
  const AcceptanceStats prior = global.Prior();
  return {.accepted = w * accepted + (1 - w) * prior.accepted,
          .rejections = w * rejections + (1 - w) * prior.rejections};
}

void StepCostModel::RecordCatchUp(int64_t tokens, double seconds) {
  if (tokens <= 0 || !(seconds >= 0)) return;
  const double per_token = seconds / static_cast<double>(tokens);
  catch_up_per_token_ = catch_up_seen_ ? 0.8 * catch_up_per_token_ + 0.2 * per_token : per_token;
  catch_up_seen_ = true;
}

void StepCostModel::RecordDraft(int64_t rows, double seconds) {
  if (rows <= 0 || !(seconds >= 0)) return;
  draft_.Record(rows, seconds);
}

namespace {
constexpr size_t kCostWindow = 256;
constexpr size_t kMinRecordsOffTheMode = 3;  // CostLine::Fit
}  // namespace

void CostLine::Record(int64_t size, double seconds) {
  window_.emplace_back(size, seconds);
  if (window_.size() > kCostWindow) window_.pop_front();
  Fit();
}

void SpeculationGain::RecordPlain(double seconds, double line_seconds) {
  since_plain_ = 0;
  if (!(seconds > 0) || !(line_seconds > 0)) return;
  const double level = seconds / line_seconds;
  level_ = level_seen_ ? 0.7 * level_ + 0.3 * level : level;
  level_seen_ = true;
}

void SpeculationGain::Record(int64_t decodes, int64_t emitted, double seconds, double line_seconds,
                             double modelled_extra, double decay) {
  if (decodes <= 0 || seconds <= 0 || line_seconds <= 0) return;
  ++since_plain_;
  const double plain_seconds = line_seconds * level_;
  if (modelled_extra > 0 && level_seen_) {
    extra_seen_ = decay * extra_seen_ + (seconds - plain_seconds);
    extra_modelled_ = decay * extra_modelled_ + modelled_extra;
  }
  const double r =
      (static_cast<double>(emitted) / seconds) / (static_cast<double>(decodes) / plain_seconds);
  sum_ = decay * sum_ + r;
  weight_ = decay * weight_ + 1;
  if (++steps_ < kMinSteps) return;
  if (pays_ && ratio() < kOff) pays_ = false;
  if (!pays_ && ratio() > kOn) pays_ = true;
}

double SpeculationGain::extra_factor() const {
  if (!(extra_modelled_ > 0)) return 1.0;
  return std::clamp(extra_seen_ / extra_modelled_, kMinExtra, kMaxExtra);
}

void SpeculationGain::RecordAcceptance(double expected, int64_t accepted, double decay) {
  if (!(expected > 0)) return;
  expected_ = decay * expected_ + expected;
  accepted_ = decay * accepted_ + static_cast<double>(accepted);
}

double SpeculationGain::acceptance_factor() const {
  constexpr double kPrior = 2.0;  // tokens at factor 1
  return std::clamp((accepted_ + kPrior) / (expected_ + kPrior), kMinAcceptance, 1.0);
}

double CostLine::Seconds(int64_t size) const { return a_ + b_ * static_cast<double>(size); }

void CostLine::Fit() {
  // The median time of each size, then a least-squares line through those medians weighted by
  // their counts: one stalled record (a page fault, a neighbour's burst) moves a median little,
  // where it would tilt a plain fit over the records, and a slope measured from a stall would be
  // kept, switching speculation off for good.
  std::map<int64_t, std::vector<double>> by_size;
  for (const auto& [t, s] : window_) by_size[t].push_back(s);
  double n = 0, st = 0, ss = 0, stt = 0, sts = 0;
  for (auto& [t, times] : by_size) {
    const auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
    std::nth_element(times.begin(), mid, times.end());
    // The upper median for an even count: averaging the two middle times measured b1 speculation
    // at 1.0x instead of 1.4x (the warm-up's first steps, two per size, then set the slope).
    const double w = static_cast<double>(times.size()), x = static_cast<double>(t), y = *mid;
    n += w;
    st += w * x;
    ss += w * y;
    stt += w * x * x;
    sts += w * x * y;
  }
  largest_ = by_size.empty() ? 0 : by_size.rbegin()->first;
  const double var = stt - st * st / n;
  // Records of one size only (speculation off, a steady batch) say nothing of the slope: keep
  // the last one measured and move the line through their median. Nor does one record of another
  // size: at batch 16 a single drafted step of 20 tokens, a few ms off, set the slope to 0 (and
  // verification rows free) for a planner that then drafted for every sequence; the first slope
  // waits for 3 records outside the most common size, whose median one stall cannot move.
  size_t most_common = 0;
  for (const auto& [t, times] : by_size) most_common = std::max(most_common, times.size());
  if (by_size.size() >= 2 && var > 0 && window_.size() >= 4 &&
      (fitted_ || window_.size() - most_common >= kMinRecordsOffTheMode)) {
    b_ = std::max(0.0, (sts - st * ss / n) / var);
    fitted_ = true;
  }
  a_ = std::max(0.0, (ss - b_ * st) / n);
}

std::vector<int64_t> PlanDraftBudgets(std::span<const AcceptanceStats> alpha,
                                      const StepCostModel& cost, int64_t base_tokens,
                                      int64_t max_nodes, int64_t explore_nodes,
                                      std::span<const double> first_cost,
                                      std::span<const int64_t> catch_up,
                                      const PlanCalibration& calibration) {
  LAMINAR_CHECK(first_cost.empty() || first_cost.size() == alpha.size());
  LAMINAR_CHECK(catch_up.empty() || catch_up.size() == alpha.size());
  const size_t n = alpha.size();
  std::vector<int64_t> best(n, 0);
  if (max_nodes <= 0 || alpha.empty()) return best;
  if (!cost.ready()) {
    std::fill(best.begin(), best.end(), std::min(explore_nodes, max_nodes));
    return best;
  }
  constexpr double kMinGain = 0.05;  // expected tokens a draft token must add
  const double plain_s = std::max(cost.Seconds(base_tokens) * calibration.plain_level, 1e-12);
  const double extra = calibration.extra_factor;
  const double per_forward = extra * cost.draft().fixed(), per_row = extra * cost.draft_per_row();
  const double per_token = extra * cost.per_token();
  // A token after a chain's first: a row of the policy's step and a row of a drafter forward.
  const double marginal = per_token + per_row;
  double best_rate = static_cast<double>(n) / plain_s;
  const int64_t max_rows = std::max<int64_t>(2 * cost.largest_step(), base_tokens + 1);
  std::vector<int64_t> budget(n);
  std::vector<double> next_gain(n);
  for (int64_t depth = 1; depth <= max_nodes; ++depth) {
    double tokens = static_cast<double>(n);
    int64_t rows = base_tokens;  // the step's tokens, drafts included
    double seconds =
        plain_s + static_cast<double>(cost.forward_per_depth() ? depth : 1) * per_forward;
    double rate = tokens / seconds;
    std::fill(budget.begin(), budget.end(), 0);
    // Best next gain first (a heap of (gain of the sequence's next draft token, sequence)).
    std::priority_queue<std::pair<double, size_t>> next;
    for (size_t i = 0; i < n; ++i) {
      next_gain[i] = calibration.acceptance_factor * alpha[i].alpha();
      next.emplace(next_gain[i], i);
    }
    while (!next.empty()) {
      const auto [gain, i] = next.top();
      next.pop();
      if (gain < kMinGain) break;
      const double a = alpha[i].alpha();
      if (budget[i] == 0) {
        // A chain's first token also pays its catch-up (rows of the first forward, a cold
        // prefill), shared by the whole chain: take the length that raises the rate most, or
        // leave the sequence out (others may still pay).
        const double first = (first_cost.empty() ? 0.0 : first_cost[i]) +
                             (catch_up.empty() ? 0.0 : static_cast<double>(catch_up[i]) * per_row) +
                             per_token;
        double sum = 0, g = gain, chain_rate = rate;
        int64_t chain = 0;
        for (int64_t k = 1; k <= depth && rows + k <= max_rows && g >= kMinGain; ++k, g *= a) {
          sum += g;
          const double r =
              (tokens + sum) / (seconds + first + static_cast<double>(k - 1) * marginal);
          if (r > chain_rate) {
            chain_rate = r;
            chain = k;
          }
        }
        if (chain == 0) continue;
        for (int64_t k = 0; k < chain; ++k) {
          tokens += next_gain[i];
          next_gain[i] *= a;
        }
        seconds += first + static_cast<double>(chain - 1) * marginal;
        rate = chain_rate;
        budget[i] = chain;
        rows += chain;
      } else {
        const double new_rate = (tokens + gain) / (seconds + marginal);
        if (!(new_rate > rate) || rows + 1 > max_rows) continue;  // this chain stops here
        tokens += gain;
        seconds += marginal;
        rate = new_rate;
        ++rows;
        ++budget[i];
        next_gain[i] *= a;
      }
      if (budget[i] < depth) next.emplace(next_gain[i], i);
    }
    if (rate > best_rate) {
      best_rate = rate;
      best = budget;
    }
  }
  return best;
}

std::vector<int64_t> PlanCatchUps(std::span<const CatchUpNeed> need, int64_t warm, bool proven) {
  const size_t n = need.size();
  std::vector<int64_t> out(n);
  std::vector<int64_t> own(n);
  struct SharedPrompt {
    int64_t tokens = 0;  // the most prompt tokens a cold member lacks
    int64_t cold = 0;    // cold members lacking any
  };
  std::unordered_map<int64_t, SharedPrompt> shared;
  size_t cheapest = n;  // the cold sequence least behind
  for (size_t i = 0; i < n; ++i) {
    out[i] = own[i] = need[i].behind;
    if (need[i].behind <= warm) continue;
    if (cheapest == n || need[i].behind < need[cheapest].behind) cheapest = i;
    own[i] = std::min(need[i].behind, std::max<int64_t>(1, need[i].generated));
    if (own[i] == need[i].behind) continue;
    SharedPrompt& g = shared[need[i].group];
    g.tokens = std::max(g.tokens, need[i].behind - own[i]);
    ++g.cold;
  }
  for (size_t i = 0; i < n; ++i) {
    if (need[i].behind <= warm) continue;
    if (!proven) {
      // The cost model is a guess at a batch size where drafts have not run: at batch 4 the
      // drafter's rows cost 4 ms each, not the 2 ms its one-row forwards suggested, and
      // prefilling every cold sample of a wave for it lost 4% before drafting stopped.
      if (i != cheapest) out[i] = kCatchUpNotThisStep;
    } else if (own[i] < need[i].behind) {
      // Charging the prompt to one of them only (the first) planned drafts for its siblings
      // alone, which then paid the whole prompt: a 508 ms prefill planned as 5 ms.
      // Still a prefill of its own (the first of them to draft feeds the prompt in one).
      const SharedPrompt& g = shared.at(need[i].group);
      out[i] = std::max(warm + 1, own[i] + (g.tokens + g.cold - 1) / g.cold);
    }
  }
  return out;
}

bool DraftsCouldPay(const StepCostModel& cost, int64_t base_tokens, int64_t max_nodes,
                    std::span<const double> first_cost, std::span<const int64_t> catch_up,
                    const PlanCalibration& calibration) {
  if (!cost.ready() || base_tokens <= 0) return true;
  const std::vector<AcceptanceStats> sure(static_cast<size_t>(base_tokens),
                                          AcceptanceStats{.accepted = 19, .rejections = 1});
  PlanCalibration costs_only = calibration;  // nearly all accepted, whatever was measured
  costs_only.acceptance_factor = 1.0;
  const std::vector<int64_t> best =
      PlanDraftBudgets(sure, cost, base_tokens, max_nodes, 0, first_cost, catch_up, costs_only);
  return std::ranges::any_of(best, [](int64_t b) { return b > 0; });
}

}  // namespace laminar::rollout
