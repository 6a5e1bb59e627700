// The reward layer's interface (docs/architecture.md): a reward scores one finished response with
// verl's signature compute_score(data_source, solution_str, ground_truth, extra_info). Rewards are
// built from a registry keyed by name (RewardSpec: name, weight, params) of built-ins and plug-ins
// (a user's Python function or C ABI shared library) and can be combined with weights. Rollout
// workers call them on each finished trajectory; `laminar score` runs them on a JSONL file of
// existing responses.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace YAML {
class Node;
}

namespace laminar::reward {

struct RewardInput {
  std::string_view data_source;      // the dataset a prompt came from ("openai/gsm8k")
  std::string_view solution_str;     // the decoded response text
  std::string_view ground_truth;     // the dataset's reference answer (JSON text for countdown)
  std::string_view extra_info_json;  // a JSON object of anything else, or ""
};

struct RewardResult {
  double score = 0;                     // the sequence reward (finite)
  std::map<std::string, double> extra;  // named sub-scores, reported as metrics
};

// Thread-safe: every reward MakeReward builds may be called from many threads at once. Errors:
// InvalidArgument naming what in the input cannot be scored (a ground truth that holds no answer,
// a countdown problem that is not JSON). A response that holds no answer is not an error: it
// scores 0.
using RewardFn = std::function<StatusOr<RewardResult>(const RewardInput&)>;

// One reward with its weight in a combination and its parameters (strings, parsed by the reward).
struct RewardSpec {
  std::string name;
  double weight = 1.0;
  std::map<std::string, std::string> params;
};

// The built-in rewards by name (scores are in [0, 1] unless a parameter says otherwise):
//   exact_match  1 when the response, trimmed of surrounding whitespace, equals the trimmed ground
//                truth; else 0. No params.
//   contains     1 when the response contains the (non-empty) ground truth; else 0. No params.
//   gsm8k        GSM8K (Cobbe et al. 2021): the response's answer is the first number after the
//                last `####`, else the first number after the last '=' in the last `\boxed{}`,
//                else the last number in the text (ExtractGsm8kAnswer, reward/answer.h); thousands
//                commas, '$', signs (also U+2212) and trailing units or periods are handled. The
//                ground truth is a number or a full GSM8K answer ending in `#### N`. Numbers are
//                equal within a relative 1e-9. Params: format_score (default 0): the score of an
//                extracted but wrong answer.
//   math         MATH (Hendrycks et al. 2021): the response's answer is the last `\boxed{...}`
//                (nested braces; also `\boxed x` and `\fbox{}`); no box scores 0. The ground truth
//                is an answer, or a solution whose last `\boxed{}` is taken. Answers are compared
//                by MathAnswersEquivalent (reward/answer.h). Params: format_score (default 0).
//   countdown    Countdown (TinyZero; d1): the equation in the last `<answer>...</answer>` (the
//                part before any '='), else the last arithmetic run on the last line that has one
//                (reward/answer.h ExtractCountdownEquation). It scores 1 when it uses each given
//                number exactly once, only + - * / (also × ÷ U+2212) and parentheses, no unary
//                signs, and equals the target exactly (rational arithmetic). The ground truth is
//                JSON: verl's {"target": 23, "numbers": [30, 100, 93]} or the d1 dataset's row
//                {"input": "30,100,93", "output": "23"}. Params: format_score (default 0): the
//                score of an equation that parses but is wrong.
//   format       the response (trimmed of surrounding whitespace) against a PCRE2 regex: 1 when the
//                whole of it matches, `partial_credit` when the pattern matches only somewhere
//                inside it, else 0. Params: pattern (required), partial_credit (default 0, in
//                [0, 1]), dotall (default true: '.' matches newlines), multiline (default false).
//                The ground truth is ignored. Invalid UTF-8 in a response is no error; its bytes
//                match nothing.
//   auto         verl's default_compute_score: the reward DefaultRewardForDataSource names for
//                each input's data_source. No params.
// The plug-ins, by name (a user's code; see the headers for the calling conventions and errors):
//   python       MakePythonReward (reward/python_reward.h): `function` (default compute_score) in
//                the .py file `path`, run in a pool of Python processes with a per-call deadline.
//                Params: path (required), function, num_workers (default 2), timeout_s (10),
//                startup_timeout_s (60), python (default python3).
//   c            MakeCReward (reward/c_reward.h): a shared library built against
//                reward/laminar_reward_plugin.h. Params: path (required), symbol (default
//                laminar_compute_score).
//   A relative `path` is relative to the working directory (ParseRewardSpecs can resolve it
//   against a recipe's folder instead).
// Errors: NotFound naming `spec.name` and listing the built-ins and plug-ins; InvalidArgument
// naming an unknown or malformed param ("reward format: unknown param 'patern' (params: dotall,
// multiline, ...)"), a regex that does not compile with PCRE2's message and the offset in the
// pattern, and a plug-in that cannot be loaded (a missing file, a Python file that does not import,
// with Python's message). `spec.weight` is ignored here (see CombineRewards).
StatusOr<RewardFn> MakeReward(const RewardSpec& spec);

// MakeReward({name}): the built-in with default params.
StatusOr<RewardFn> BuiltinReward(std::string_view name);
std::vector<std::string> BuiltinRewardNames();
// The plug-in names MakeReward knows besides the built-ins: {"c", "python"}.
std::vector<std::string> PluginRewardNames();

// A weighted sum of `specs`: score = sum_i weight_i * score_i. Each component's score is reported
// in RewardResult::extra as "reward/<name>" (the k-th repeat of a name, k >= 2, as
// "reward/<name>_<k>"), and its own extras as "reward/<name>/<key>", so rollouts can average them
// as metrics. A component's error is returned with the component named. Errors: InvalidArgument
// when `specs` is empty or a weight is not finite; MakeReward's errors with "reward[i]" context.
StatusOr<RewardFn> CombineRewards(const std::vector<RewardSpec>& specs);

// Reward specs from YAML (a recipe's `reward:` node or `laminar score --reward`):
//   gsm8k                                          a name
//   {name: format, weight: 0.2, pattern: "^#"}     a map: name, optional weight, params
//   {python: {path: r.py, function: f, timeout_s: 5, num_workers: 2}, weight: 0.5}
//   {c: {path: libr.so, symbol: s}}                a plug-in: its kind as the key of a map of
//                                                  params (the same as {name: python, path: ...})
//   [gsm8k, {name: format, pattern: "####"}]       a list of any of these
// Every param value must be a scalar (kept as its text). A plug-in's relative `path` is resolved
// against `base_dir` when it is not empty (a recipe's folder), else left relative to the working
// directory. Each spec is also checked with MakeReward (so a Python plug-in's file is imported once
// here, and a bad one fails before anything runs).
// Errors: InvalidArgument naming the path under `where`, e.g. "reward[1].weight: expected a
// number, got 'high'", "reward.name: missing", "reward: expected a name, a map or a list",
// "reward[1].python.timeout_s: expected a scalar value", "reward[1].python: python reward
// /abs/r.py:f: importing the file failed: ... SyntaxError: ...".
StatusOr<std::vector<RewardSpec>> ParseRewardSpecs(const YAML::Node& node, std::string_view where,
                                                   std::string_view base_dir = "");

// The reward a command-line flag gives as YAML text (`where` names the flag, e.g. "--reward"):
// ParseRewardSpecs of it; one spec of weight 1 is that reward, several their CombineRewards.
// Errors: InvalidArgument "<where>: not YAML: ..." and ParseRewardSpecs's.
StatusOr<RewardFn> RewardFromYamlText(const std::string& text, std::string_view where);

// The reward verl's default_compute_score would choose for a dataset name:
//   openai/gsm8k, gsm8k                                                   -> gsm8k
//   lighteval/MATH, DigitalLearningGmbH/MATH-lighteval, HuggingFaceH4/MATH-500,
//   math, math500                                                         -> math
//   any name containing "countdown" (case-insensitive)                    -> countdown
// Errors: NotFound naming `data_source` and listing the known names.
StatusOr<std::string> DefaultRewardForDataSource(std::string_view data_source);

}  // namespace laminar::reward
