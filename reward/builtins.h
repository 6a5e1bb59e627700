// Internal to reward/: the factories of the built-in rewards that MakeReward's registry maps names
// to, and the reader that checks their params.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "reward/reward.h"

namespace laminar::reward::internal {

// Reads a reward's params by name, remembering which were read, so that Finish() can name any
// param the reward does not know. Not thread-safe; used once per MakeReward call.
class ParamReader {
 public:
  ParamReader(std::string_view reward, const std::map<std::string, std::string>& params)
      : reward_(reward), params_(params) {}

  // The param's value as a finite number, `fallback` when absent. Errors: InvalidArgument
  // "reward <name>: param <key>: expected a number, got '<text>'".
  StatusOr<double> Number(const std::string& key, double fallback);
  // The param's value as a boolean (true/false/yes/no/1/0), `fallback` when absent.
  StatusOr<bool> Bool(const std::string& key, bool fallback);
  // The param's text; "" when absent and not `required`. Errors: InvalidArgument when a required
  // param is missing.
  StatusOr<std::string> Text(const std::string& key, bool required);

  // InvalidArgument naming the first param not read, listing the ones that were asked for.
  Status Finish() const;

 private:
  Status Error(const std::string& key, const std::string& what) const;
  std::string reward_;
  const std::map<std::string, std::string>& params_;
  std::set<std::string> known_;
};

StatusOr<RewardFn> MakeGsm8kReward(ParamReader& params);
StatusOr<RewardFn> MakeMathReward(ParamReader& params);
StatusOr<RewardFn> MakeCountdownReward(ParamReader& params);
StatusOr<RewardFn> MakeFormatReward(ParamReader& params);

}  // namespace laminar::reward::internal
