// LearnByteLevelBpe; see bpe_trainer.h.
#include "model/tokenizer/bpe_trainer.h"

#include <cstdint>
#include <map>
#include <tuple>

#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/pretokenizer.h"

namespace laminar::model {
namespace {

using Pair = std::pair<int32_t, int32_t>;

struct Word {
  std::vector<int32_t> symbols;  // piece ids
  int64_t count = 0;
};

// Replaces every (a, b) in `w` by `merged`, left to right.
void MergeInWord(Word* w, Pair pair, int32_t merged) {
  std::vector<int32_t>& s = w->symbols;
  size_t out = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i + 1 < s.size() && s[i] == pair.first && s[i + 1] == pair.second) {
      s[out++] = merged;
      ++i;
    } else {
      s[out++] = s[i];
    }
  }
  s.resize(out);
}

}  // namespace

StatusOr<LearnedBpe> LearnByteLevelBpe(std::string_view corpus,
                                       const std::vector<std::string>& pre_tokenizer_regexes,
                                       int num_merges) {
  if (num_merges < 0) {
    return InvalidArgumentError("bpe training: num_merges must be >= 0, got " +
                                std::to_string(num_merges));
  }
  LAMINAR_ASSIGN_OR_RETURN(RegexPreTokenizer pre, RegexPreTokenizer::Create(pre_tokenizer_regexes));
  LAMINAR_ASSIGN_OR_RETURN(std::vector<std::string_view> pre_tokens, pre.Split(corpus));

  LearnedBpe out;
  for (int b = 0; b < 256; ++b) out.pieces.push_back(ByteToUnicode(static_cast<uint8_t>(b)));
  std::map<std::string, int32_t> ids;  // piece -> id
  for (int b = 0; b < 256; ++b) ids.emplace(out.pieces[b], b);
  std::map<std::string_view, int64_t> counts;  // ordered: the words' order is the text's sort
  for (std::string_view t : pre_tokens) ++counts[t];
  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [text, count] : counts) {
    Word w;
    w.count = count;
    for (char c : text) w.symbols.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }

  for (int m = 0; m < num_merges; ++m) {
    std::map<Pair, int64_t> pair_counts;
    for (const Word& w : words) {
      for (size_t i = 0; i + 1 < w.symbols.size(); ++i) {
        pair_counts[{w.symbols[i], w.symbols[i + 1]}] += w.count;
      }
    }
    const Pair* best = nullptr;
    int64_t best_count = 1;  // a merge must occur at least twice
    for (const auto& [pair, count] : pair_counts) {
      const bool better =
          count > best_count || (count == best_count && best != nullptr &&
                                 std::tie(out.pieces[pair.first], out.pieces[pair.second]) <
                                     std::tie(out.pieces[best->first], out.pieces[best->second]));
      if (better) {
        best = &pair;
        best_count = count;
      }
    }
    if (best == nullptr) break;
    const Pair pair = *best;
    out.merges.emplace_back(out.pieces[pair.first], out.pieces[pair.second]);
    // Two merges can spell the same piece ("a"+"bc", "ab"+"c"): it stays one token.
    std::string piece = out.pieces[pair.first] + out.pieces[pair.second];
    auto [it, added] = ids.try_emplace(piece, static_cast<int32_t>(out.pieces.size()));
    if (added) out.pieces.push_back(std::move(piece));
    const int32_t merged = it->second;
    for (Word& w : words) MergeInWord(&w, pair, merged);
  }
  return out;
}

}  // namespace laminar::model
