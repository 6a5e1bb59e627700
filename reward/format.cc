// The format reward: a PCRE2 regular expression the response must match; see reward.h.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>
#include <string>

#include "reward/builtins.h"

namespace laminar::reward::internal {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR msg[256];
  pcre2_get_error_message(code, msg, sizeof(msg));
  return reinterpret_cast<const char*>(msg);
}

// A compiled pattern; matching only reads it, so one is shared by all threads.
struct CompiledPattern {
  pcre2_code* code = nullptr;
  CompiledPattern() = default;
  CompiledPattern(const CompiledPattern&) = delete;
  CompiledPattern& operator=(const CompiledPattern&) = delete;
  ~CompiledPattern() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

// Whether `re` matches `text` (the whole of it when `whole`). Errors: InvalidArgument with PCRE2's
// message (the match limit hit by a pathological pattern, for one).
StatusOr<bool> Matches(const CompiledPattern& re, std::string_view text, bool whole) {
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(re.code, nullptr), pcre2_match_data_free);
  if (md == nullptr) return ResourceExhaustedError("reward format: no memory for match data");
  const uint32_t options = whole ? (PCRE2_ANCHORED | PCRE2_ENDANCHORED) : 0;
  const char* subject = text.empty() ? "" : text.data();  // never a null subject
  const int rc = pcre2_match(re.code, reinterpret_cast<PCRE2_SPTR>(subject), text.size(), 0,
                             options, md.get(), nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) return InvalidArgumentError("reward format: matching failed: " + Pcre2Message(rc));
  if (!whole) return true;
  // With PCRE2_MATCH_INVALID_UTF an anchored match may start past invalid leading bytes, so a
  // whole match is checked by its span.
  const PCRE2_SIZE* span = pcre2_get_ovector_pointer(md.get());
  return span[0] == 0 && span[1] == text.size();
}

}  // namespace

StatusOr<RewardFn> MakeFormatReward(ParamReader& params) {
  LAMINAR_ASSIGN_OR_RETURN(std::string pattern, params.Text("pattern", /*required=*/true));
  LAMINAR_ASSIGN_OR_RETURN(double partial, params.Number("partial_credit", 0.0));
  LAMINAR_ASSIGN_OR_RETURN(bool dotall, params.Bool("dotall", true));
  LAMINAR_ASSIGN_OR_RETURN(bool multiline, params.Bool("multiline", false));
  if (partial < 0 || partial > 1) {
    return InvalidArgumentError("reward format: param partial_credit: " + std::to_string(partial) +
                                " is not in [0, 1]");
  }
  auto re = std::make_shared<CompiledPattern>();
  int err = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_MATCH_INVALID_UTF: a response that is not valid UTF-8 is never an error; its invalid
  // bytes match nothing (not even '.').
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  if (dotall) options |= PCRE2_DOTALL;
  if (multiline) options |= PCRE2_MULTILINE;
  re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                           &err, &offset, nullptr);
  if (re->code == nullptr) {
    return InvalidArgumentError("reward format: param pattern '" + pattern + "' at offset " +
                                std::to_string(offset) + ": " + Pcre2Message(err));
  }
  return RewardFn([re, partial](const RewardInput& in) -> StatusOr<RewardResult> {
    std::string_view text = in.solution_str;
    const size_t b = text.find_first_not_of(" \t\r\n");
    text = b == std::string_view::npos ? std::string_view()
                                       : text.substr(b, text.find_last_not_of(" \t\r\n") - b + 1);
    RewardResult r;
    LAMINAR_ASSIGN_OR_RETURN(bool whole, Matches(*re, text, /*whole=*/true));
    if (whole) {
      r.score = 1.0;
    } else if (partial != 0) {
      LAMINAR_ASSIGN_OR_RETURN(bool found, Matches(*re, text, /*whole=*/false));
      r.score = found ? partial : 0.0;
    }
    return r;
  });
}

}  // namespace laminar::reward::internal
