// The suffix drafter: training-free and model-free, it drafts from n-grams of the sequence, its
// GRPO group and recent responses (SuffixDecoding, Oliaro et al., arXiv 2411.04975).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "rollout/speculation/drafter.h"

namespace laminar::rollout {

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

}  // namespace laminar::rollout
