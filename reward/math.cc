// The math reward: \boxed{} extraction, LaTeX answer normalization and equivalence; see answer.h.
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "reward/answer.h"
#include "reward/builtins.h"

namespace laminar::reward {
namespace {

bool IsLetter(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }
bool IsSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string Trimmed(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && IsSpace(s[b])) ++b;
  while (e > b && IsSpace(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

// The index one past the '}' that closes the '{' at `open`, skipping escaped braces "\{" "\}";
// npos when it does not close.
size_t CloseBrace(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      continue;
    }
    if (s[i] == '{') ++depth;
    if (s[i] == '}' && --depth == 0) return i + 1;
  }
  return std::string_view::npos;
}

// Replaces the LaTeX command `cmd` ("\dfrac") by `repl` wherever it is not the prefix of a longer
// command name.
void ReplaceCommand(std::string* s, std::string_view cmd, std::string_view repl) {
  size_t pos = 0;
  while ((pos = s->find(cmd, pos)) != std::string::npos) {
    const size_t end = pos + cmd.size();
    if (end < s->size() && IsLetter((*s)[end])) {
      pos = end;
      continue;
    }
    s->replace(pos, cmd.size(), repl);
    pos += repl.size();
  }
}

void ReplaceAll(std::string* s, std::string_view from, std::string_view to) {
  size_t pos = 0;
  while ((pos = s->find(from, pos)) != std::string::npos) {
    s->replace(pos, from.size(), to);
    pos += to.size();
  }
}

// Drops spacing commands and escaped '$' '%' in one left-to-right pass, so that the row break
// "\\" followed by a space is not mistaken for "\ ".
std::string DropSpacingAndEscapes(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char n = s[i + 1];
      if (n == '\\') {
        out += "\\\\";
        ++i;
        continue;
      }
      if (n == '!' || n == ',' || n == ';' || n == ':' || n == ' ' || n == '$' || n == '%') {
        ++i;
        continue;
      }
    }
    if (s[i] == '$' || s[i] == '%' || s[i] == '~') continue;
    out += s[i];
  }
  return out;
}

bool IsUnitWords(std::string_view content) {
  std::string t = Trimmed(content);
  return !t.empty() &&
         std::all_of(t.begin(), t.end(), [](char c) { return IsLetter(c) || c == ' '; });
}

// Whether `rest` is empty or only a power ("^2", "^{3}") of a unit.
bool IsUnitTail(std::string_view rest) {
  std::string t = Trimmed(rest);
  if (t.empty()) return true;
  if (t[0] != '^') return false;
  return std::all_of(t.begin() + 1, t.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '{' || c == '}';
  });
}

// Unwraps text-like groups; drops a trailing unit \text{...} / \mbox{...}.
std::string HandleText(std::string s) {
  static const std::string_view kWrappers[] = {"\\text",   "\\mbox",   "\\textrm", "\\textbf",
                                               "\\textit", "\\mathrm", "\\mathbf", "\\mathit"};
  for (std::string_view cmd : kWrappers) {
    size_t pos = 0;
    while ((pos = s.find(cmd, pos)) != std::string::npos) {
      const size_t open = pos + cmd.size();
      if (open >= s.size() || s[open] != '{') {
        pos = open;
        continue;
      }
      const size_t close = CloseBrace(s, open);
      if (close == std::string::npos) break;
      const std::string content = s.substr(open + 1, close - open - 2);
      const bool unit_cmd = cmd == "\\text" || cmd == "\\mbox" || cmd == "\\textrm";
      if (unit_cmd && !Trimmed(s.substr(0, pos)).empty() && IsUnitWords(content) &&
          IsUnitTail(std::string_view(s).substr(close))) {
        s.erase(pos);
        break;
      }
      s.replace(pos, close - pos, content);
      pos += content.size();
    }
  }
  // A plain unit word after a number: "5.4 cents" -> "5.4".
  const std::string t = Trimmed(s);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.' ||
                          t[i] == ',' || (i == 0 && t[i] == '-'))) {
    ++i;
  }
  if (i > 0 && i < t.size() && t[i] == ' ') {
    std::string rest = Trimmed(std::string_view(t).substr(i));
    if (rest.size() >= 2 && IsUnitWords(rest)) return t.substr(0, i);
  }
  return s;
}

// The argument at `pos` braced: a "{...}" group as is, a command's name, or one character.
size_t BraceArgument(std::string* s, size_t pos) {
  if (pos >= s->size()) return pos;
  if ((*s)[pos] == '{') {
    const size_t close = CloseBrace(*s, pos);
    return close == std::string::npos ? s->size() : close;
  }
  size_t end = pos + 1;
  if ((*s)[pos] == '\\') {
    while (end < s->size() && IsLetter((*s)[end])) ++end;
  }
  s->insert(end, "}");
  s->insert(pos, "{");
  return end + 2;
}

// \frac12 -> \frac{1}{2}, \sqrt2 -> \sqrt{2}; on a string without spaces.
void BraceArguments(std::string* s) {
  for (const auto& [cmd, args] : {std::pair<std::string_view, int>{"\\frac", 2}, {"\\sqrt", 1}}) {
    size_t pos = 0;
    while ((pos = s->find(cmd, pos)) != std::string::npos) {
      size_t at = pos + cmd.size();
      if (at < s->size() && IsLetter((*s)[at])) {
        pos = at;
        continue;
      }
      if (cmd == "\\sqrt" && at < s->size() && (*s)[at] == '[') {
        const size_t close = s->find(']', at);
        at = close == std::string::npos ? s->size() : close + 1;
      }
      for (int a = 0; a < args; ++a) at = BraceArgument(s, at);
      pos = pos + cmd.size();
    }
  }
}

// Whether the bracket at 0 closes exactly at the end (any of ( [ { against any of ) ] }).
bool EnclosesWhole(std::string_view s) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(' || s[i] == '[' || s[i] == '{') ++depth;
    if (s[i] == ')' || s[i] == ']' || s[i] == '}') {
      if (--depth == 0) return i + 1 == s.size();
    }
  }
  return false;
}

// Splits `s` at top-level occurrences of `sep` (outside all brackets).
std::vector<std::string> SplitTopLevel(std::string_view s, std::string_view sep) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
    if (depth == 0 && s.substr(i, sep.size()) == sep) {
      parts.emplace_back(s.substr(start, i - start));
      start = i + sep.size();
      i = start - 1;
    }
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

bool EquivalentNormalized(const std::string& a, const std::string& b, int depth);

bool AllInOrder(const std::vector<std::string>& a, const std::vector<std::string>& b, int depth) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!EquivalentNormalized(a[i], b[i], depth + 1)) return false;
  }
  return true;
}

bool AllInAnyOrder(const std::vector<std::string>& a, const std::vector<std::string>& b,
                   int depth) {
  if (a.size() != b.size()) return false;
  std::vector<bool> used(b.size(), false);
  for (const std::string& x : a) {
    bool found = false;
    for (size_t j = 0; j < b.size() && !found; ++j) {
      if (!used[j] && EquivalentNormalized(x, b[j], depth + 1)) used[j] = found = true;
    }
    if (!found) return false;
  }
  return true;
}

// The cells of a pmatrix/bmatrix, row by row; empty when `s` is not one.
std::vector<std::vector<std::string>> MatrixCells(std::string_view s) {
  for (std::string_view kind : {"pmatrix", "bmatrix"}) {
    const std::string begin = "\\begin{" + std::string(kind) + "}";
    const std::string end = "\\end{" + std::string(kind) + "}";
    if (s.size() < begin.size() + end.size() || s.substr(0, begin.size()) != begin ||
        s.substr(s.size() - end.size()) != end) {
      continue;
    }
    std::vector<std::vector<std::string>> rows;
    for (const std::string& row :
         SplitTopLevel(s.substr(begin.size(), s.size() - begin.size() - end.size()), "\\\\")) {
      if (!row.empty()) rows.push_back(SplitTopLevel(row, "&"));
    }
    return rows;
  }
  return {};
}

bool EquivalentNormalized(const std::string& a, const std::string& b, int depth) {
  if (a == b) return true;
  if (depth > 8) return false;
  std::optional<double> va = EvaluateMathNumber(a), vb = EvaluateMathNumber(b);
  if (va && vb) return NumbersEqual(*va, *vb);
  if (a.empty() || b.empty()) return false;
  auto ma = MatrixCells(a), mb = MatrixCells(b);
  if (!ma.empty() || !mb.empty()) {
    if (ma.size() != mb.size()) return false;
    for (size_t r = 0; r < ma.size(); ++r) {
      if (!AllInOrder(ma[r], mb[r], depth)) return false;
    }
    return true;
  }
  // Sets "\{...\}": elements in any order.
  auto is_set = [](const std::string& s) {
    return s.size() >= 4 && s.substr(0, 2) == "\\{" && s.substr(s.size() - 2) == "\\}";
  };
  if (is_set(a) && is_set(b)) {
    return AllInAnyOrder(SplitTopLevel(a.substr(2, a.size() - 4), ","),
                         SplitTopLevel(b.substr(2, b.size() - 4), ","), depth);
  }
  // Unions of intervals, in order.
  auto ua = SplitTopLevel(a, "\\cup"), ub = SplitTopLevel(b, "\\cup");
  if (ua.size() > 1 || ub.size() > 1) return AllInOrder(ua, ub, depth);
  // Tuples and intervals: the same brackets, elements in order.
  const bool ta = EnclosesWhole(a) && a[0] != '{', tb = EnclosesWhole(b) && b[0] != '{';
  if (ta || tb) {
    if (!(ta && tb) || a.front() != b.front() || a.back() != b.back()) return false;
    return AllInOrder(SplitTopLevel(a.substr(1, a.size() - 2), ","),
                      SplitTopLevel(b.substr(1, b.size() - 2), ","), depth);
  }
  // Bare lists of solutions: in any order.
  auto la = SplitTopLevel(a, ","), lb = SplitTopLevel(b, ",");
  if (la.size() > 1 || lb.size() > 1) return AllInAnyOrder(la, lb, depth);
  return false;
}

}  // namespace

std::optional<std::string> LastBoxedContent(std::string_view text) {
  size_t pos = std::string_view::npos;
  size_t cmd_size = 0;
  for (std::string_view cmd : {"\\boxed", "\\fbox"}) {
    const size_t p = text.rfind(cmd);
    if (p != std::string_view::npos && (pos == std::string_view::npos || p > pos)) {
      pos = p;
      cmd_size = cmd.size();
    }
  }
  if (pos == std::string_view::npos) return std::nullopt;
  size_t at = pos + cmd_size;
  if (at < text.size() && text[at] == '{') {
    const size_t close = CloseBrace(text, at);
    if (close == std::string_view::npos) return std::nullopt;
    return std::string(text.substr(at + 1, close - at - 2));
  }
  if (at < text.size() && text[at] == ' ') {
    std::string_view rest = text.substr(at + 1);
    const size_t end = rest.find('$');
    std::string content = Trimmed(rest.substr(0, end));
    if (!content.empty()) return content;
  }
  return std::nullopt;
}

std::string NormalizeMathAnswer(std::string_view answer) {
  std::string s = DropSpacingAndEscapes(answer);
  ReplaceAll(&s, "\n", " ");
  ReplaceAll(&s, "\xC2\xB0", "");  // U+00B0 DEGREE SIGN
  ReplaceAll(&s, "^{\\circ}", "");
  ReplaceAll(&s, "^\\circ", "");
  for (std::string_view cmd : {"\\circ", "\\degree", "\\displaystyle", "\\quad", "\\qquad"}) {
    ReplaceCommand(&s, cmd, "");
  }
  for (std::string_view cmd : {"\\dfrac", "\\tfrac", "\\cfrac"}) ReplaceCommand(&s, cmd, "\\frac");
  ReplaceAll(&s, "\\left.", "");
  ReplaceAll(&s, "\\right.", "");
  ReplaceCommand(&s, "\\left", "");
  ReplaceCommand(&s, "\\right", "");
  s = HandleText(std::move(s));
  s.erase(std::remove_if(s.begin(), s.end(), IsSpace), s.end());
  BraceArguments(&s);
  // A leading "x=" or "x\in" naming the variable of the answer.
  size_t name = 0;
  while (name < s.size() && name < 3 && IsLetter(s[name])) ++name;
  if (name >= 1 && name <= 2) {
    if (s.compare(name, 1, "=") == 0 && std::count(s.begin(), s.end(), '=') == 1) {
      s.erase(0, name + 1);
    } else if (s.compare(name, 3, "\\in") == 0 &&
               (name + 3 == s.size() || !IsLetter(s[name + 3]))) {
      s.erase(0, name + 3);
    }
  }
  while (!s.empty() && s.back() == '.') s.pop_back();
  if (s.size() >= 2 && s.front() == '{' && CloseBrace(s, 0) == s.size())
    s = s.substr(1, s.size() - 2);
  if (s.size() == 3 && s[0] == '(' && IsLetter(s[1]) && s[2] == ')') s = s.substr(1, 1);
  return s;
}

bool MathAnswersEquivalent(std::string_view a, std::string_view b) {
  return EquivalentNormalized(NormalizeMathAnswer(a), NormalizeMathAnswer(b), 0);
}

namespace internal {

StatusOr<RewardFn> MakeMathReward(ParamReader& params) {
  LAMINAR_ASSIGN_OR_RETURN(double format_score, params.Number("format_score", 0.0));
  return RewardFn([format_score](const RewardInput& in) -> StatusOr<RewardResult> {
    std::string truth = std::string(in.ground_truth);
    if (truth.find("\\boxed") != std::string::npos || truth.find("\\fbox") != std::string::npos) {
      std::optional<std::string> boxed = LastBoxedContent(truth);
      if (!boxed)
        return InvalidArgumentError("reward math: the ground truth's \\boxed{} does not close");
      truth = *boxed;
    }
    if (Trimmed(truth).empty())
      return InvalidArgumentError("reward math: the ground truth is empty");
    RewardResult r;
    if (std::optional<std::string> answer = LastBoxedContent(in.solution_str)) {
      r.score = MathAnswersEquivalent(*answer, truth) ? 1.0 : format_score;
    }
    return r;
  });
}

}  // namespace internal
}  // namespace laminar::reward
