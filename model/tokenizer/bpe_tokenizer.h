// ByteLevelBpeTokenizer: GPT-2-style byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM2): regex
// pre-tokenization, bytes mapped through GPT-2's byte-to-unicode table, rank-ordered merges.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/tokenizer/bpe_merge.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace laminar::model {

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others to U+0100 onwards.
// Returns the UTF-8 text of the code point byte `b` maps to.
const std::string& ByteToUnicode(uint8_t b);

// Immutable; thread-safe.
class ByteLevelBpeTokenizer : public Tokenizer {
 public:
  struct Options {
    std::vector<std::string> pre_tokenizer_regexes;  // applied in order (RegexPreTokenizer)
    std::string pre_tokenizer_name;                  // "gpt2", "llama-bpe", ... or "" if custom
    // Hugging Face ignore_merges (Llama 3): a pre-token that is itself in the vocabulary is one
    // token, without merging.
    bool ignore_merges = false;
    // Hugging Face ByteLevel(add_prefix_space): a space is prepended unless the text starts with
    // one.
    bool add_prefix_space = false;
  };

  // `merges` in rank order, as pieces ("Ġ", "t"). Errors: InvalidArgument naming the first merge
  // whose pieces (or their concatenation) are not in the vocabulary; bad regexes; Vocab::Validate.
  static StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> Create(
      Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
      const Options& options, std::string_view source);

  TokenizerKind kind() const override { return TokenizerKind::kByteLevelBpe; }
  using Tokenizer::Encode;
  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        const EncodeOptions& options) const override;
  StatusOr<std::string> TokenBytes(int32_t id, bool skip_special) const override;

  // The pre-tokens of plain text (no special-token handling): for tests and debugging.
  StatusOr<std::vector<std::string>> PreTokenize(std::string_view text) const;

  const Options& options() const { return options_; }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  ByteLevelBpeTokenizer(Vocab vocab, const Options& options, RegexPreTokenizer pre);
  Status EncodePreToken(std::string_view pre_token, std::vector<int32_t>* out) const;

  Options options_;
  RegexPreTokenizer pre_;
  BpePairTable pairs_;
  std::vector<std::pair<int32_t, int32_t>> merges_;  // rank order
  std::array<int32_t, 256> byte_ids_{};              // token of each single byte, -1 if absent
};

}  // namespace laminar::model
