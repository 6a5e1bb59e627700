// RegexPreTokenizer over PCRE2 and the regex lists of the named pre-tokenizers.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "model/tokenizer/pretokenizer.h"

#include <pcre2.h>

namespace laminar::model {

struct RegexPreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

StatusOr<RegexPreTokenizer> RegexPreTokenizer::Create(std::vector<std::string> patterns) {
  RegexPreTokenizer pre;
  for (const std::string& pattern : patterns) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    auto compiled = std::make_shared<Compiled>();
    compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      return InvalidArgumentError("pre-tokenizer regex '" + pattern + "' at offset " +
                                  std::to_string(offset) + ": " +
                                  reinterpret_cast<const char*>(msg));
    }
    compiled->jit = pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE) == 0;
    pre.compiled_.push_back(std::move(compiled));
  }
  pre.patterns_ = std::move(patterns);
  return pre;
}

Status RegexPreTokenizer::SplitOne(const Compiled& re, std::string_view text,
                                   std::vector<std::string_view>* out) const {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(re.code, nullptr), pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;  // where the next search starts
  size_t gap = 0;  // start of the text not yet emitted
  while (pos < text.size()) {
    // The text was validated as UTF-8 and pos is always on a character boundary.
    int rc = re.jit ? pcre2_jit_match(re.code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                                      md.get(), nullptr)
                    : pcre2_match(re.code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(),
                                  nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      return InternalError(std::string("pre-tokenizer regex match failed: ") +
                           reinterpret_cast<const char*>(msg));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {  // an empty match: step over one character
      size_t step = 1;
      while (begin + step < text.size() &&
             (static_cast<uint8_t>(text[begin + step]) & 0xC0) == 0x80) {
        ++step;
      }
      pos = begin + step;
      continue;
    }
    if (begin > gap) out->push_back(text.substr(gap, begin - gap));
    out->push_back(text.substr(begin, end - begin));
    gap = pos = end;
  }
  if (gap < text.size()) out->push_back(text.substr(gap));
  return OkStatus();
}

StatusOr<std::vector<std::string_view>> RegexPreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (const auto& re : compiled_) {
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) LAMINAR_RETURN_IF_ERROR(SplitOne(*re, piece, &next));
    pieces = std::move(next);
  }
  return pieces;
}

StatusOr<std::vector<std::string>> PreTokenizerRegexes(std::string_view name) {
  // Llama 3's pattern (Hugging Face tokenizer.json of Meta-Llama-3); Qwen2 differs only in
  // splitting digits one by one.
  static constexpr std::string_view kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static constexpr std::string_view kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (name == "gpt2" || name == "gpt-2") return std::vector<std::string>{std::string(kGpt2Regex)};
  if (name == "llama3" || name == "llama-bpe")
    return std::vector<std::string>{std::string(kLlama3)};
  if (name == "qwen2") return std::vector<std::string>{std::string(kQwen2)};
  // SmolLM2: Hugging Face Sequence[Digits(individual_digits), ByteLevel(use_regex)].
  if (name == "smollm") {
    return std::vector<std::string>{R"(\p{N})", std::string(kGpt2Regex)};
  }
  return UnimplementedError("unknown pre-tokenizer '" + std::string(name) +
                            "' (known: gpt2, llama-bpe, qwen2, smollm)");
}

}  // namespace laminar::model
