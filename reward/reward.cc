// Built-in rewards; see reward.h.
#include "reward/reward.h"

#include <string>

namespace laminar::reward {
namespace {

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

StatusOr<RewardResult> ExactMatch(const RewardInput& in) {
  return RewardResult{.score = Trim(in.solution_str) == Trim(in.ground_truth) ? 1.0 : 0.0,
                      .extra = {}};
}

StatusOr<RewardResult> Contains(const RewardInput& in) {
  if (in.ground_truth.empty()) {
    return InvalidArgumentError("reward contains: the ground truth is empty");
  }
  return RewardResult{
      .score = in.solution_str.find(in.ground_truth) != std::string_view::npos ? 1.0 : 0.0,
      .extra = {}};
}

}  // namespace

std::vector<std::string> BuiltinRewardNames() { return {"contains", "exact_match"}; }

StatusOr<RewardFn> BuiltinReward(std::string_view name) {
  if (name == "exact_match") return RewardFn(ExactMatch);
  if (name == "contains") return RewardFn(Contains);
  std::string names;
  for (const std::string& n : BuiltinRewardNames()) names += (names.empty() ? "" : ", ") + n;
  return NotFoundError("no built-in reward named '" + std::string(name) + "' (built-ins: " + names +
                       ")");
}

}  // namespace laminar::reward
