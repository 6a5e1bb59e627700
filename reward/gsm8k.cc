// The gsm8k reward: number extraction from GSM8K-style responses and answers; see answer.h.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

#include "reward/answer.h"
#include "reward/builtins.h"

namespace laminar::reward {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// U+2212 MINUS SIGN in UTF-8.
constexpr std::string_view kUnicodeMinus = "\xE2\x88\x92";

// Whether the digits of a number that start at `i` carry a minus sign before them (past an
// optional '$' or "\$").
bool NegativeBefore(std::string_view s, size_t i) {
  if (i >= 1 && s[i - 1] == '$') {
    --i;
    if (i >= 1 && s[i - 1] == '\\') --i;
  }
  size_t sign = std::string_view::npos;
  if (i >= 1 && s[i - 1] == '-') {
    sign = i - 1;
  } else if (i >= kUnicodeMinus.size() &&
             s.substr(i - kUnicodeMinus.size(), kUnicodeMinus.size()) == kUnicodeMinus) {
    sign = i - kUnicodeMinus.size();
  }
  if (sign == std::string_view::npos) return false;
  if (sign == 0) return true;
  const char before = s[sign - 1];
  return !(IsAlnum(before) || before == ')' || before == '}' || before == ']');
}

// Parses the unsigned number whose first character (a digit, or '.' before a digit) is at `i`;
// returns its value and sets `*end` past it.
double ParseUnsigned(std::string_view s, size_t i, size_t* end) {
  std::string digits;
  size_t j = i;
  while (j < s.size() && IsDigit(s[j])) digits += s[j++];
  // Thousands groups: a lead of 1-3 digits, then ",ddd" groups not followed by another digit.
  if (!digits.empty() && digits.size() <= 3) {
    while (j + 3 < s.size() && s[j] == ',' && IsDigit(s[j + 1]) && IsDigit(s[j + 2]) &&
           IsDigit(s[j + 3]) && (j + 4 >= s.size() || !IsDigit(s[j + 4]))) {
      digits.append(s.substr(j + 1, 3));
      j += 4;
    }
  }
  if (j + 1 < s.size() && s[j] == '.' && IsDigit(s[j + 1])) {
    digits += '.';
    ++j;
    while (j < s.size() && IsDigit(s[j])) digits += s[j++];
  }
  *end = j;
  if (digits.empty() || digits == ".") return 0;
  return std::strtod(digits.c_str(), nullptr);
}

std::optional<double> FirstNumber(std::string_view text) {
  std::vector<double> v = FindNumbers(text);
  if (v.empty()) return std::nullopt;
  return v.front();
}

}  // namespace

bool NumbersEqual(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b)) return false;
  return std::fabs(a - b) <= kRelativeTolerance * std::max(std::fabs(a), std::fabs(b));
}

std::vector<double> FindNumbers(std::string_view s) {
  std::vector<double> out;
  size_t i = 0;
  while (i < s.size()) {
    const bool starts = IsDigit(s[i]) || (s[i] == '.' && i + 1 < s.size() && IsDigit(s[i + 1]) &&
                                          (i == 0 || !IsDigit(s[i - 1])));
    if (!starts) {
      ++i;
      continue;
    }
    size_t end = i;
    const double v = ParseUnsigned(s, i, &end);
    out.push_back(NegativeBefore(s, i) ? -v : v);
    i = end;
  }
  return out;
}

std::optional<double> ExtractGsm8kAnswer(std::string_view response) {
  if (size_t hashes = response.rfind("####"); hashes != std::string_view::npos) {
    if (auto v = FirstNumber(response.substr(hashes + 4))) return v;
  }
  if (std::optional<std::string> boxed = LastBoxedContent(response)) {
    std::string_view content = *boxed;
    if (size_t eq = content.rfind('='); eq != std::string_view::npos) {
      content = content.substr(eq + 1);
    }
    if (auto v = FirstNumber(content)) return v;
  }
  std::vector<double> all = FindNumbers(response);
  if (all.empty()) return std::nullopt;
  return all.back();
}

StatusOr<double> ParseGsm8kGroundTruth(std::string_view ground_truth) {
  const std::string quoted =
      "'" + std::string(ground_truth.substr(0, 80)) + (ground_truth.size() > 80 ? "...'" : "'");
  if (size_t hashes = ground_truth.rfind("####"); hashes != std::string_view::npos) {
    if (auto v = FirstNumber(ground_truth.substr(hashes + 4))) return *v;
    return InvalidArgumentError("ground truth " + quoted + " has no number after '####'");
  }
  std::vector<double> numbers = FindNumbers(ground_truth);
  const bool letters = std::any_of(ground_truth.begin(), ground_truth.end(), [](char c) {
    return std::isalpha(static_cast<unsigned char>(c));
  });
  if (numbers.size() != 1 || letters) {
    return InvalidArgumentError("ground truth " + quoted +
                                " is neither one number nor a GSM8K answer ending in '#### N'");
  }
  return numbers.front();
}

namespace internal {

StatusOr<RewardFn> MakeGsm8kReward(ParamReader& params) {
  LAMINAR_ASSIGN_OR_RETURN(double format_score, params.Number("format_score", 0.0));
  return RewardFn([format_score](const RewardInput& in) -> StatusOr<RewardResult> {
    LAMINAR_ASSIGN_OR_RETURN(double truth, ParseGsm8kGroundTruth(in.ground_truth), "reward gsm8k");
    std::optional<double> answer = ExtractGsm8kAnswer(in.solution_str);
    RewardResult r;
    if (answer) r.score = NumbersEqual(*answer, truth) ? 1.0 : format_score;
    return r;
  });
}

}  // namespace internal
}  // namespace laminar::reward
