// Learning a byte-level BPE vocabulary from text: the merges GPT-2's tokenizer training makes
// (count adjacent symbol pairs inside each pre-token, merge the most frequent, repeat), so the
// project can make its own small tokenizer from text it ships.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace laminar::model {

struct LearnedBpe {
  // Byte-level pieces (GPT-2's byte-to-unicode text): the 256 single bytes in byte order, then
  // one piece per merge in rank order.
  std::vector<std::string> pieces;
  std::vector<std::pair<std::string, std::string>> merges;  // rank order, as pieces
};

// Learns up to `num_merges` merges from `corpus`, pre-tokenized by `pre_tokenizer_regexes`
// (RegexPreTokenizer). Each step merges the pair with the highest count over all pre-tokens
// (weighted by how often the pre-token occurs); ties go to the pair whose pieces sort first, so
// the result depends on the corpus alone. Stops early when no pair occurs twice. Errors:
// InvalidArgument for num_merges < 0 or a regex that does not compile.
StatusOr<LearnedBpe> LearnByteLevelBpe(std::string_view corpus,
                                       const std::vector<std::string>& pre_tokenizer_regexes,
                                       int num_merges);

}  // namespace laminar::model
