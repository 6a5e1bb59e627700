// SentencePieceBpeTokenizer: SentencePiece-style BPE as Llama 2 / Hugging Face's LlamaTokenizer
// use it: spaces become "▁", a dummy-prefix space starts each run of text, pieces merge by score,
// characters outside the vocabulary fall back to "<0xHH>" byte tokens.
#pragma once

#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "model/tokenizer/bpe_merge.h"
#include "model/tokenizer/tokenizer.h"

namespace laminar::model {

// "▁" (U+2581), SentencePiece's visible space.
inline constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

// Immutable; thread-safe.
class SentencePieceBpeTokenizer : public Tokenizer {
 public:
  struct Options {
    // Prepend a space to the text and after each special token (SentencePiece's
    // add_dummy_prefix; GGUF tokenizer.ggml.add_space_prefix).
    bool add_space_prefix = true;
  };

  // Merges come from the scores: any two normal pieces whose concatenation is a normal piece
  // merge, the highest-scoring result first (SentencePiece BPE). Errors: Vocab::Validate's.
  static StatusOr<std::unique_ptr<SentencePieceBpeTokenizer>> FromScores(Vocab vocab,
                                                                         const Options& options,
                                                                         std::string_view source);
  // Merges come from an explicit ranked list of (left id, right id), rank 0 first (Hugging Face
  // BPE with byte_fallback). Errors: a merge whose pieces do not concatenate to a vocab piece.
  static StatusOr<std::unique_ptr<SentencePieceBpeTokenizer>> FromMerges(
      Vocab vocab, const std::vector<std::pair<int32_t, int32_t>>& merges, const Options& options,
      std::string_view source);

  TokenizerKind kind() const override { return TokenizerKind::kSentencePieceBpe; }
  using Tokenizer::Encode;
  StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                        const EncodeOptions& options) const override;
  StatusOr<std::string> TokenBytes(int32_t id, bool skip_special) const override;
  bool strips_leading_space() const override { return options_.add_space_prefix; }

  const Options& options() const { return options_; }
  // The merges in priority order (best first), as a Hugging Face BPE model lists them.
  std::vector<std::pair<int32_t, int32_t>> RankedMerges() const;

 private:
  SentencePieceBpeTokenizer(Vocab vocab, const Options& options);
  void BuildIndex();
  // Id of a normal piece equal to `text`, or -1.
  int32_t NormalPiece(std::string_view text) const;
  Status EncodeText(std::string_view text, bool prefix, std::vector<int32_t>* out) const;

  Options options_;
  BpePairTable pairs_;
  std::vector<std::pair<std::pair<int32_t, int32_t>, double>> merge_list_;  // for RankedMerges
  std::array<int32_t, 256> byte_ids_{};  // "<0xHH>" token of each byte, -1 if absent
};

}  // namespace laminar::model
