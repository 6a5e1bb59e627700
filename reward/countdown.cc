// The countdown reward: equation extraction and a safe parser that checks it in exact rational
// arithmetic (no eval); see answer.h.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "core/json_util.h"
#include "reward/answer.h"
#include "reward/builtins.h"

namespace laminar::reward {
namespace {

// UTF-8 spellings of the operators people write: × ÷ − (U+00D7, U+00F7, U+2212).
constexpr std::string_view kTimes = "\xC3\x97", kDivide = "\xC3\xB7", kMinus = "\xE2\x88\x92";

// The operator at `i` ('+', '-', '*', '/') and its byte length; {0, 0} when there is none.
std::pair<char, size_t> OperatorAt(std::string_view s, size_t i) {
  const char c = s[i];
  if (c == '+' || c == '-' || c == '*' || c == '/') return {c, 1};
  if (s.substr(i, 2) == kTimes) return {'*', 2};
  if (s.substr(i, 2) == kDivide) return {'/', 2};
  if (s.substr(i, 3) == kMinus) return {'-', 3};
  return {0, 0};
}

// An exact fraction num/den with den > 0, in lowest terms.
struct Rational {
  __int128 num = 0;
  __int128 den = 1;
};

// Products of two values within the limit, and sums of two such products, fit in __int128.
constexpr __int128 kRationalLimit = static_cast<__int128>(1) << 60;

StatusOr<Rational> Reduce(__int128 num, __int128 den) {
  if (den == 0) return InvalidArgumentError("divides by zero");
  if (den < 0) num = -num, den = -den;
  __int128 a = num < 0 ? -num : num, b = den;
  while (b != 0) {
    const __int128 t = a % b;
    a = b;
    b = t;
  }
  if (a > 1) num /= a, den /= a;
  if (num > kRationalLimit || num < -kRationalLimit || den > kRationalLimit) {
    return InvalidArgumentError("overflows");
  }
  return Rational{num, den};
}

std::string ToString(const Rational& r) {
  auto str = [](__int128 v) {
    const bool neg = v < 0;
    if (neg) v = -v;
    std::string s;
    do {
      s += static_cast<char>('0' + static_cast<int>(v % 10));
      v /= 10;
    } while (v != 0);
    if (neg) s += '-';
    return std::string(s.rbegin(), s.rend());
  };
  return r.den == 1 ? str(r.num) : str(r.num) + "/" + str(r.den);
}

// expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*; factor := int | '(' expr ')'.
class EquationParser {
 public:
  explicit EquationParser(std::string_view s) : s_(s) {}

  StatusOr<Rational> Parse() {
    LAMINAR_ASSIGN_OR_RETURN(Rational v, Expr());
    SkipSpaces();
    if (pos_ < s_.size()) return Unexpected();
    return v;
  }
  const std::vector<int64_t>& numbers() const { return numbers_; }

 private:
  void SkipSpaces() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }

  Status Unexpected() const {
    if (pos_ >= s_.size()) return InvalidArgumentError("ends where a number or '(' is expected");
    if (OperatorAt(s_, pos_).first != 0) {
      return InvalidArgumentError("operator at offset " + std::to_string(pos_) +
                                  " where a number or '(' is expected (no unary signs)");
    }
    // A UTF-8 character is quoted whole.
    size_t len = 1;
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0xF0)
      len = 4;
    else if (c >= 0xE0)
      len = 3;
    else if (c >= 0xC0)
      len = 2;
    return InvalidArgumentError("'" + std::string(s_.substr(pos_, len)) + "' at offset " +
                                std::to_string(pos_) +
                                " is not an integer, + - * / or a parenthesis");
  }

  StatusOr<Rational> Expr() {
    if (++depth_ > 200) return InvalidArgumentError("parentheses nested too deeply");
    LAMINAR_ASSIGN_OR_RETURN(Rational v, Term());
    while (true) {
      SkipSpaces();
      if (pos_ >= s_.size()) break;
      auto [op, len] = OperatorAt(s_, pos_);
      if (op != '+' && op != '-') break;
      pos_ += len;
      LAMINAR_ASSIGN_OR_RETURN(Rational r, Term());
      const __int128 num =
          op == '+' ? v.num * r.den + r.num * v.den : v.num * r.den - r.num * v.den;
      LAMINAR_ASSIGN_OR_RETURN(v, Reduce(num, v.den * r.den));
    }
    --depth_;
    return v;
  }

  StatusOr<Rational> Term() {
    LAMINAR_ASSIGN_OR_RETURN(Rational v, Factor());
    while (true) {
      SkipSpaces();
      if (pos_ >= s_.size()) break;
      auto [op, len] = OperatorAt(s_, pos_);
      if (op != '*' && op != '/') break;
      pos_ += len;
      LAMINAR_ASSIGN_OR_RETURN(Rational r, Factor());
      if (op == '*') {
        LAMINAR_ASSIGN_OR_RETURN(v, Reduce(v.num * r.num, v.den * r.den));
      } else {
        LAMINAR_ASSIGN_OR_RETURN(v, Reduce(v.num * r.den, v.den * r.num));
      }
    }
    return v;
  }

  StatusOr<Rational> Factor() {
    SkipSpaces();
    if (pos_ < s_.size() && s_[pos_] == '(') {
      ++pos_;
      LAMINAR_ASSIGN_OR_RETURN(Rational v, Expr());
      SkipSpaces();
      if (pos_ >= s_.size() || s_[pos_] != ')') {
        return InvalidArgumentError("missing ')' at offset " + std::to_string(pos_));
      }
      ++pos_;
      return v;
    }
    const size_t b = pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    if (pos_ == b) return Unexpected();
    if (pos_ - b > 18)
      return InvalidArgumentError("number at offset " + std::to_string(b) + " is too long");
    const int64_t n = std::strtoll(std::string(s_.substr(b, pos_ - b)).c_str(), nullptr, 10);
    numbers_.push_back(n);
    return Rational{n, 1};
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::vector<int64_t> numbers_;
};

// An integer from a JSON number or a string holding one.
std::optional<int64_t> JsonInteger(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
    return std::nullopt;
  }
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    if (b == std::string::npos) return std::nullopt;
    const std::string t = s.substr(b, e - b + 1);
    char* end = nullptr;
    const long long n = std::strtoll(t.c_str(), &end, 10);
    if (end != t.c_str() + t.size()) return std::nullopt;
    return n;
  }
  return std::nullopt;
}

// A list of integers from a JSON array or a comma-separated string.
std::optional<std::vector<int64_t>> JsonIntegers(const nlohmann::json& v) {
  std::vector<int64_t> out;
  if (v.is_array()) {
    for (const auto& e : v) {
      std::optional<int64_t> n = JsonInteger(e);
      if (!n) return std::nullopt;
      out.push_back(*n);
    }
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    size_t start = 0;
    while (start <= s.size()) {
      size_t comma = s.find(',', start);
      if (comma == std::string::npos) comma = s.size();
      std::optional<int64_t> n = JsonInteger(s.substr(start, comma - start));
      if (!n) return std::nullopt;
      out.push_back(*n);
      start = comma + 1;
    }
  } else {
    return std::nullopt;
  }
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

StatusOr<CountdownProblem> ParseCountdownProblem(std::string_view ground_truth_json) {
  nlohmann::json j = nlohmann::json::parse(ground_truth_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgumentError(
        "countdown ground truth is not a JSON object like {\"target\": 23, \"numbers\": [30, 100, "
        "93]} or {\"input\": \"30,100,93\", \"output\": \"23\"}");
  }
  const char* target_key = j.contains("target") ? "target" : "output";
  const char* numbers_key = j.contains("target") ? "numbers" : "input";
  if (!j.contains(target_key) || !j.contains(numbers_key)) {
    return InvalidArgumentError(std::string("countdown ground truth: missing '") +
                                (j.contains(target_key) ? numbers_key : target_key) + "'");
  }
  CountdownProblem p;
  std::optional<int64_t> target = JsonInteger(j[target_key]);
  if (!target) {
    return InvalidArgumentError(std::string("countdown ground truth: '") + target_key +
                                "' is not an integer: " + JsonSnippet(j[target_key]));
  }
  std::optional<std::vector<int64_t>> numbers = JsonIntegers(j[numbers_key]);
  if (!numbers) {
    return InvalidArgumentError(std::string("countdown ground truth: '") + numbers_key +
                                "' is not a list of integers: " + JsonSnippet(j[numbers_key]));
  }
  p.target = *target;
  p.numbers = std::move(*numbers);
  return p;
}

std::optional<std::string> ExtractCountdownEquation(std::string_view response) {
  auto trim = [](std::string_view s) {
    const size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return std::string();
    return std::string(s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1));
  };
  if (size_t open = response.rfind("<answer>"); open != std::string_view::npos) {
    std::string_view content = response.substr(open + 8);
    content = content.substr(0, content.find("</answer>"));
    content = content.substr(0, content.find('='));
    std::string eq = trim(content);
    if (eq.empty()) return std::nullopt;
    return eq;
  }
  size_t line_end = response.size();
  while (true) {
    const size_t nl = line_end == 0 ? std::string_view::npos : response.rfind('\n', line_end - 1);
    const size_t line_begin = nl == std::string_view::npos ? 0 : nl + 1;
    std::string_view line = response.substr(line_begin, line_end - line_begin);
    std::string best, run;
    bool digit = false, op = false;
    auto finish_run = [&] {
      if (digit && op) best = trim(run);
      run.clear();
      digit = op = false;
    };
    for (size_t i = 0; i < line.size();) {
      const char c = line[i];
      if (auto [o, len] = OperatorAt(line, i); o != 0) {
        run.append(line.substr(i, len));
        op = true;
        i += len;
      } else if (std::isdigit(static_cast<unsigned char>(c)) || c == ' ' || c == '\t' || c == '(' ||
                 c == ')') {
        digit |= std::isdigit(static_cast<unsigned char>(c)) != 0;
        run += c;
        ++i;
      } else {
        finish_run();
        ++i;
      }
    }
    finish_run();
    if (!best.empty()) return best;
    if (line_begin == 0) return std::nullopt;
    line_end = line_begin - 1;
  }
}

Status CheckCountdownEquation(std::string_view equation, const CountdownProblem& problem) {
  EquationParser parser(equation);
  StatusOr<Rational> value = parser.Parse();
  std::map<int64_t, int> available, used;
  for (int64_t n : problem.numbers) ++available[n];
  for (int64_t n : parser.numbers()) ++used[n];
  for (const auto& [n, count] : used) {
    auto it = available.find(n);
    if (it == available.end()) {
      return InvalidArgumentError("uses " + std::to_string(n) +
                                  ", which is not one of the numbers");
    }
    if (count > it->second) {
      return InvalidArgumentError("uses " + std::to_string(n) + " " + std::to_string(count) +
                                  " times (given " + std::to_string(it->second) + ")");
    }
  }
  LAMINAR_RETURN_IF_ERROR(value.status());
  for (const auto& [n, count] : available) {
    if (used[n] < count) return InvalidArgumentError("does not use " + std::to_string(n));
  }
  if (value->den != 1 || value->num != problem.target) {
    return InvalidArgumentError("equals " + ToString(*value) + ", not " +
                                std::to_string(problem.target));
  }
  return OkStatus();
}

namespace internal {

StatusOr<RewardFn> MakeCountdownReward(ParamReader& params) {
  LAMINAR_ASSIGN_OR_RETURN(double format_score, params.Number("format_score", 0.0));
  return RewardFn([format_score](const RewardInput& in) -> StatusOr<RewardResult> {
    LAMINAR_ASSIGN_OR_RETURN(CountdownProblem problem, ParseCountdownProblem(in.ground_truth),
                             "reward countdown");
    RewardResult r;
    if (std::optional<std::string> eq = ExtractCountdownEquation(in.solution_str)) {
      r.score = CheckCountdownEquation(*eq, problem).ok() ? 1.0 : format_score;
    }
    return r;
  });
}

}  // namespace internal
}  // namespace laminar::reward
