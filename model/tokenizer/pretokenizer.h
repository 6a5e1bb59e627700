// RegexPreTokenizer: splits text into pre-tokens with a sequence of PCRE2 regexes (UTF + UCP,
// JIT when available), as Hugging Face's Split(behavior=Isolated) pre-tokenizers and llama.cpp's
// regex lists do; and the regex lists of the named pre-tokenizers (GGUF tokenizer.ggml.pre).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar::model {

// Immutable after Create; Split is thread-safe (match data is per call).
class RegexPreTokenizer {
 public:
  // Compiles each pattern. Errors: InvalidArgument with PCRE2's message and offset.
  static StatusOr<RegexPreTokenizer> Create(std::vector<std::string> patterns);

  // Applies each regex in turn to every piece the previous one produced; a piece splits into its
  // matches and the gaps between them (both kept, in order; empty pieces dropped). With no
  // patterns the text is one piece. The views point into `text`.
  // Errors: Internal for a PCRE2 matching failure (e.g. the JIT stack limit).
  StatusOr<std::vector<std::string_view>> Split(std::string_view text) const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  struct Compiled;
  Status SplitOne(const Compiled& re, std::string_view text,
                  std::vector<std::string_view>* out) const;
  std::vector<std::string> patterns_;
  std::vector<std::shared_ptr<Compiled>> compiled_;
};

// The regex list of a named pre-tokenizer: "gpt2"/"gpt-2", "llama3"/"llama-bpe", "qwen2",
// "smollm". Errors: Unimplemented naming the unknown pre-tokenizer.
StatusOr<std::vector<std::string>> PreTokenizerRegexes(std::string_view name);

// GPT-2's byte-level pre-tokenizer regex (Hugging Face ByteLevel(use_regex=true)).
inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace laminar::model
