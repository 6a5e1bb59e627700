// The reward layer's interface (DESIGN.md §1-2): a reward scores one finished response with
// verl's signature compute_score(data_source, solution_str, ground_truth, extra_info), and
// built-ins are looked up by name. Rollout workers call it on each finished trajectory.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar::reward {

struct RewardInput {
  std::string_view data_source;      // the dataset a prompt came from ("openai/gsm8k")
  std::string_view solution_str;     // the decoded response text
  std::string_view ground_truth;     // the dataset's reference answer
  std::string_view extra_info_json;  // a JSON object of anything else, or ""
};

struct RewardResult {
  double score = 0;                     // the sequence reward (finite)
  std::map<std::string, double> extra;  // named sub-scores, reported as metrics
};

// Thread-safe when the built-in is (all built-ins here are). Errors: InvalidArgument naming what
// in the input cannot be scored.
using RewardFn = std::function<StatusOr<RewardResult>(const RewardInput&)>;

// The built-in reward `name`:
//   exact_match  1 when the response, trimmed of surrounding whitespace, equals the trimmed
//                ground truth; else 0.
//   contains     1 when the response contains the (non-empty) ground truth; else 0.
// Errors: NotFound naming `name` and listing the built-ins.
StatusOr<RewardFn> BuiltinReward(std::string_view name);
std::vector<std::string> BuiltinRewardNames();

}  // namespace laminar::reward
