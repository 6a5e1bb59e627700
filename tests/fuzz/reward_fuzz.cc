// libFuzzer target: arbitrary model output scored by every built-in reward. The input is the
// response; its first line, when there is one, the ground truth. Scores must be finite or an
// error: a response is the most untrusted input laminar reads (GSM8K and MATH answer extraction,
// LaTeX normalisation and equivalence, countdown's arithmetic parser, the format regex).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reward/reward.h"

namespace {

const std::vector<laminar::reward::RewardFn>& Rewards() {
  static const std::vector<laminar::reward::RewardFn> rewards = [] {
    std::vector<laminar::reward::RewardFn> out;
    for (const std::string& name : laminar::reward::BuiltinRewardNames()) {
      auto fn = laminar::reward::BuiltinReward(name);
      if (fn.ok()) out.push_back(std::move(*fn));
    }
    return out;
  }();
  return rewards;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::reward;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view truth =
      newline == std::string_view::npos ? std::string_view("42") : input.substr(0, newline);
  const std::string_view response =
      newline == std::string_view::npos ? input : input.substr(newline + 1);
  for (const RewardFn& fn : Rewards()) {
    for (const std::string_view data_source : {"openai/gsm8k", "countdown", "math"}) {
      auto r = fn({.data_source = data_source,
                   .solution_str = response,
                   .ground_truth = truth,
                   .extra_info_json = ""});
      if (r.ok() && !std::isfinite(r->score)) __builtin_trap();
    }
  }
  return 0;
}
