// The model drafters; see model_drafter.h.
#include "rollout/speculation/model_drafter.h"

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
// Model drafters

ModelDrafter::ModelDrafter(DrafterKind kind, double min_confidence, uint64_t seed,
                           int64_t draft_vocab)
    : kind_(kind), min_confidence_(min_confidence), draft_vocab_(draft_vocab), rng_(seed) {}

Status ModelDrafter::OnWeights(const engine::LlamaModel* policy, const engine::LlamaModel* draft) {
  // Checked before anything changes: on an error the drafter keeps its model (and the caller may
  // free `draft`).
  if (kind_ == DrafterKind::kDraftModel) {
    LAMINAR_RETURN_IF_ERROR(UseDraftModel(policy, draft));
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

// Kept whole: the lockstep of one batched drafting pass (cold catch-ups, warm feed, one forward
// per depth); the chains' state is shared by every phase.
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

}  // namespace laminar::rollout
