// Answer extraction and comparison behind the gsm8k, math and countdown rewards (reward.h), exposed
// so that tests and tools can check each step alone. Pure functions of their arguments;
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar::reward {

// Two numbers are equal when |a - b| <= kRelativeTolerance * max(|a|, |b|) (so 0 equals only 0).
// 1e-9 rather than a looser 1e-6: GSM8K answers reach 10^7, and 1,450,000 must differ from
// 1,450,001; rounding in EvaluateMathNumber (\pi, \sqrt) stays near 1e-15.
inline constexpr double kRelativeTolerance = 1e-9;
bool NumbersEqual(double a, double b);

// ---- GSM8K ----

// The numbers in `text`, left to right. A number is digits with optional thousands commas (groups
// of exactly three: "1,000" is 1000, "1,2" is 1 and 2) and an optional fraction (".5" after a
// digit or alone); '$' or "\$" may stand between an optional sign and the digits. '-' (or U+2212)
// is a sign only when it does not follow a letter, digit, ')' or '}' ("5-3" is 5 and 3). A
// trailing '.' without digits ends the number ("18." is 18).
std::vector<double> FindNumbers(std::string_view text);

// The answer of a GSM8K-style response, in this order: the first number after the last "####";
// the first number after the last '=' in the last \boxed{} (the whole box without '='); the last
// number in the text. nullopt when none of these holds a number.
std::optional<double> ExtractGsm8kAnswer(std::string_view response);

// A GSM8K ground truth: the first number after the last "####" when there is one, else the text
// must be exactly one number (surrounding whitespace, '$' and a trailing '.' allowed).
// Errors: InvalidArgument quoting the text.
StatusOr<double> ParseGsm8kGroundTruth(std::string_view ground_truth);

// ---- MATH ----

// The content of the last \boxed{...} (or \fbox{...}) with nested braces, or of "\boxed x" (up to
// the next '$' or the end). nullopt when there is none or its braces do not close.
std::optional<std::string> LastBoxedContent(std::string_view text);

// A canonical form of a LaTeX answer, in the spirit of Hendrycks et al.'s MATH `is_equiv`
// normalization (written anew here):
//   - drops \left \right (and \left. \right.), \! \, \; \: \quad \qquad "\ " ~ \displaystyle,
//     '$', "\$", "\%", '%', degrees (^\circ, ^{\circ}, \circ, \degree, U+00B0) and all spaces;
//   - \dfrac \tfrac \cfrac -> \frac; \frac12 -> \frac{1}{2}; \frac{270}7 -> \frac{270}{7};
//     \sqrt2 -> \sqrt{2};
//   - a trailing unit \text{ ...} or \mbox{ ...} (alphabetic, after something) is dropped with
//     anything after it ("864 \mbox{ inches}^2" -> "864"); other \text{} \mbox{} \textbf{}
//     \mathrm{} \mathbf{} \textit{} are unwrapped;
//   - a leading "x =" or "x \in" (a name of at most two letters) is dropped;
//   - a trailing '.', one pair of braces around the whole, and parentheses around a single letter
//     ("(C)" -> "C") are dropped.
std::string NormalizeMathAnswer(std::string_view answer);

// The value of a normalized answer that is a real number expression: decimals, thousands commas
// ("10,080"), + - * / ^, \cdot \times, implicit products ("3\sqrt{13}"), \frac{}{}, \sqrt{} and
// \sqrt[n]{}, \pi, braces and parentheses; an integer directly before \frac{int}{int} is a mixed
// number ("1\frac{4}{5}" = 1.8). nullopt for anything else (variables, lists, i, bases like 52_8).
std::optional<double> EvaluateMathNumber(std::string_view normalized);

// Whether two LaTeX answers are equivalent: their normalized forms are equal; or both evaluate to
// numbers that are NumbersEqual; or both are tuples/intervals with the same brackets, or both
// matrices (pmatrix/bmatrix) of the same shape, whose elements are equivalent in order; or both
// are bare comma lists whose elements are equivalent in some order (the order of solutions "1,-2"
// does not matter).
bool MathAnswersEquivalent(std::string_view a, std::string_view b);

// ---- Countdown ----

struct CountdownProblem {
  int64_t target = 0;
  std::vector<int64_t> numbers;
};

// A countdown ground truth (JSON text): {"target": 23, "numbers": [30, 100, 93]} (verl/TinyZero;
// target and numbers may also be strings "23", "30,100,93") or the d1 dataset's row
// {"input": "30,100,93", "output": "23"}. Errors: InvalidArgument naming the missing or malformed
// field.
StatusOr<CountdownProblem> ParseCountdownProblem(std::string_view ground_truth_json);

// The equation of a countdown response: the text of the last <answer>...</answer> up to its first
// '='; without answer tags, the last maximal run of arithmetic characters (digits, spaces,
// + - * / × ÷ U+2212 and parentheses) that holds a digit and an operator, on the last line that
// has one ("so 100 - 93 + 30 = 37" gives "100 - 93 + 30"). nullopt when there is none.
std::optional<std::string> ExtractCountdownEquation(std::string_view response);

// Checks `equation` against `problem`. OK when it parses (integers, binary + - * / × ÷ U+2212,
// parentheses, spaces; no unary signs, decimals or other characters), uses each of the problem's
// numbers exactly once, never divides by zero, and equals the target exactly in rational
// arithmetic. Errors: InvalidArgument saying which of these fails, with the offset of a parse error
// ("'^' at offset 3 is not an integer, + - * / or a parenthesis", "uses 30 2 times (given 1)",
// "uses 7, which is not one of the numbers", "does not use 93", "equals 37, not 23", "divides by
// zero"; values beyond 2^60 "overflow").
Status CheckCountdownEquation(std::string_view equation, const CountdownProblem& problem);

}  // namespace laminar::reward
