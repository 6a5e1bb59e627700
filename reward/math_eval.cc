// EvaluateMathNumber: a small recursive-descent evaluator of real-number LaTeX expressions (the
// normalized answers of reward/math.cc); see answer.h.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <numbers>
#include <string>

#include "reward/answer.h"

namespace laminar::reward {
namespace {

// Grammar (input without spaces):
//   expr    := ['+'|'-'] term (('+'|'-') term)*
//   term    := unary ((('*' | \cdot | \times | '/' | \div) unary) | implicit-product)*
//              where an integer literal followed by \frac{int}{int} is a mixed number
//   unary   := ('+'|'-') unary | power
//   power   := primary ['^' (primary | digit)]
//   primary := number | '(' expr ')' | '{' expr '}' | \frac{expr}{expr} | \sqrt[expr]{expr}
//              | \sqrt{expr} | \pi
class Evaluator {
 public:
  explicit Evaluator(std::string_view s) : s_(s) {}

  std::optional<double> Run() {
    std::optional<double> v = Expr();
    if (!v || pos_ != s_.size() || !std::isfinite(*v)) return std::nullopt;
    return v;
  }

 private:
  bool Eat(std::string_view token) {
    if (s_.substr(pos_, token.size()) != token) return false;
    // A command must not be the prefix of a longer one (\pi in \pill).
    const size_t end = pos_ + token.size();
    if (token[0] == '\\' && std::isalpha(static_cast<unsigned char>(token.back())) &&
        end < s_.size() && std::isalpha(static_cast<unsigned char>(s_[end]))) {
      return false;
    }
    pos_ = end;
    return true;
  }
  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }

  std::optional<double> Expr() {
    if (++depth_ > 64) return std::nullopt;  // nesting bound: no stack overflow on hostile input
    double sign = 1;
    if (Eat("-")) {
      sign = -1;
    } else {
      Eat("+");
    }
    std::optional<double> v = Term();
    if (!v) return std::nullopt;
    double total = sign * *v;
    while (true) {
      if (Eat("+")) {
        v = Term();
        if (!v) return std::nullopt;
        total += *v;
      } else if (Eat("-")) {
        v = Term();
        if (!v) return std::nullopt;
        total -= *v;
      } else {
        break;
      }
    }
    --depth_;
    return total;
  }

  // Whether the next character can start an implicitly multiplied factor.
  bool StartsFactor() const {
    const char c = Peek();
    return c == '(' || c == '{' ||
           (c == '\\' && (s_.substr(pos_, 5) == "\\frac" || s_.substr(pos_, 5) == "\\sqrt" ||
                          s_.substr(pos_, 3) == "\\pi"));
  }

  std::optional<double> Term() {
    const size_t start = pos_;
    std::optional<double> v = Unary();
    if (!v) return std::nullopt;
    double product = *v;
    // Mixed number: an integer literal directly followed by \frac{int}{int}.
    if (IsIntegerLiteral(s_.substr(start, pos_ - start)) && s_.substr(pos_, 5) == "\\frac") {
      const size_t save = pos_;
      std::optional<std::pair<std::string_view, std::string_view>> args = FracLiteralArgs();
      if (args) {
        const double num = std::strtod(std::string(args->first).c_str(), nullptr);
        const double den = std::strtod(std::string(args->second).c_str(), nullptr);
        if (den == 0) return std::nullopt;
        product += num / den;
      } else {
        pos_ = save;
      }
    }
    while (true) {
      if (Eat("*") || Eat("\\cdot") || Eat("\\times")) {
        v = Unary();
        if (!v) return std::nullopt;
        product *= *v;
      } else if (Eat("/") || Eat("\\div")) {
        v = Unary();
        if (!v || *v == 0) return std::nullopt;
        product /= *v;
      } else if (StartsFactor()) {
        v = Power();
        if (!v) return std::nullopt;
        product *= *v;
      } else {
        break;
      }
    }
    return product;
  }

  static bool IsIntegerLiteral(std::string_view t) {
    if (t.empty()) return false;
    for (char c : t) {
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    }
    return true;
  }

  // At "\frac{digits}{digits}": consumes it and returns the two literals.
  std::optional<std::pair<std::string_view, std::string_view>> FracLiteralArgs() {
    if (!Eat("\\frac")) return std::nullopt;
    std::string_view parts[2];
    for (auto& part : parts) {
      if (!Eat("{")) return std::nullopt;
      const size_t b = pos_;
      while (std::isdigit(static_cast<unsigned char>(Peek()))) ++pos_;
      part = s_.substr(b, pos_ - b);
      if (part.empty() || !Eat("}")) return std::nullopt;
    }
    return std::make_pair(parts[0], parts[1]);
  }

  std::optional<double> Unary() {
    if (++depth_ > 64) return std::nullopt;  // "----...1" must not overflow the stack either
    std::optional<double> v = UnsignedUnary();
    --depth_;
    return v;
  }

  std::optional<double> UnsignedUnary() {
    if (Eat("-")) {
      std::optional<double> v = Unary();
      if (!v) return std::nullopt;
      return -*v;
    }
    if (Eat("+")) return Unary();
    return Power();
  }

  std::optional<double> Power() {
    std::optional<double> base = Primary();
    if (!base) return std::nullopt;
    if (!Eat("^")) return base;
    std::optional<double> exponent;
    if (std::isdigit(static_cast<unsigned char>(Peek()))) {
      exponent = Peek() - '0';
      ++pos_;
    } else {
      exponent = Primary();
    }
    if (!exponent) return std::nullopt;
    const double v = std::pow(*base, *exponent);
    if (!std::isfinite(v)) return std::nullopt;
    return v;
  }

  std::optional<double> Group(char open, char close) {
    if (!Eat(std::string_view(&open, 1))) return std::nullopt;
    std::optional<double> v = Expr();
    if (!v || !Eat(std::string_view(&close, 1))) return std::nullopt;
    return v;
  }

  std::optional<double> Number() {
    const size_t b = pos_;
    std::string digits;
    while (std::isdigit(static_cast<unsigned char>(Peek()))) digits += s_[pos_++];
    // Thousands groups ",ddd" not followed by a digit, after a lead of 1-3 digits.
    if (!digits.empty() && digits.size() <= 3) {
      while (Peek() == ',') {
        std::string_view g = s_.substr(pos_ + 1, 3);
        const bool group =
            g.size() == 3 && IsIntegerLiteral(g) &&
            (pos_ + 4 >= s_.size() || !std::isdigit(static_cast<unsigned char>(s_[pos_ + 4])));
        if (!group) break;
        digits.append(g);
        pos_ += 4;
      }
    }
    if (Peek() == '.' && pos_ + 1 < s_.size() &&
        std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
      digits += s_[pos_++];
      while (std::isdigit(static_cast<unsigned char>(Peek()))) digits += s_[pos_++];
    }
    if (digits.empty()) {
      pos_ = b;
      return std::nullopt;
    }
    return std::strtod(digits.c_str(), nullptr);
  }

  std::optional<double> Primary() {
    const char c = Peek();
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') return Number();
    if (c == '(') return Group('(', ')');
    if (c == '{') return Group('{', '}');
    if (Eat("\\pi")) return std::numbers::pi;
    if (Eat("\\frac")) {
      std::optional<double> num = Group('{', '}');
      if (!num) return std::nullopt;
      std::optional<double> den = Group('{', '}');
      if (!den || *den == 0) return std::nullopt;
      return *num / *den;
    }
    if (Eat("\\sqrt")) {
      double index = 2;
      if (Peek() == '[') {
        std::optional<double> n = Group('[', ']');
        if (!n || *n == 0) return std::nullopt;
        index = *n;
      }
      std::optional<double> radicand = Group('{', '}');
      if (!radicand || *radicand < 0) return std::nullopt;
      return std::pow(*radicand, 1.0 / index);
    }
    return std::nullopt;
  }

  std::string_view s_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::optional<double> EvaluateMathNumber(std::string_view normalized) {
  if (normalized.empty()) return std::nullopt;
  return Evaluator(normalized).Run();
}

}  // namespace laminar::reward
