// The BPE merge loop shared by the SentencePiece-style and the byte-level tokenizers: adjacent
// symbols merge by a pair table, best pair first, leftmost on ties, in O(n log n) with a heap
// over a linked list of symbols.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace laminar::model {

// One symbol of a word being merged: a token id (-1: not in the vocabulary, never merges) and
// the byte span of the word it covers.
struct BpeSymbol {
  int32_t id = -1;
  uint32_t start = 0;
  uint32_t length = 0;
};

// (left id, right id) → the merged id and its priority (lower merges first).
// SentencePiece: priority = -score of the merged piece; Hugging Face / GPT-2: the merge's rank.
class BpePairTable {
 public:
  struct Merge {
    double priority;
    int32_t result;
  };
  // Keeps the existing entry when (left, right) is already present (the first rank wins).
  void Add(int32_t left, int32_t right, double priority, int32_t result) {
    pairs_.try_emplace(Key(left, right), Merge{priority, result});
  }
  const Merge* Find(int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return nullptr;
    auto it = pairs_.find(Key(left, right));
    return it == pairs_.end() ? nullptr : &it->second;
  }
  size_t size() const { return pairs_.size(); }
  void Reserve(size_t n) { pairs_.reserve(n); }

 private:
  static uint64_t Key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  std::unordered_map<uint64_t, Merge> pairs_;
};

// Merges `symbols` in place until no adjacent pair is in `table`: repeatedly the pair with the
// lowest priority, the leftmost among equals (SentencePiece's BPE and Hugging Face's BPE model).
// On return `symbols` holds the surviving symbols in order.
void BpeMergeSymbols(const BpePairTable& table, std::vector<BpeSymbol>* symbols);

}  // namespace laminar::model
