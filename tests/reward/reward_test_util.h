// Helpers shared by the reward tests: scoring one response and reading a shared JSONL dataset.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "reward/reward.h"

namespace laminar::reward {

// The score of `response` against `truth`; -1 (and a test failure) on an error.
inline double Score(const RewardFn& f, std::string_view response, std::string_view truth,
                    std::string_view data_source = "test") {
  auto r = f({.data_source = data_source,
              .solution_str = response,
              .ground_truth = truth,
              .extra_info_json = ""});
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->score : -1;
}

// Every line of a JSONL file, parsed.
inline std::vector<nlohmann::json> ReadJsonl(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

inline RewardFn MustMake(const RewardSpec& spec) {
  auto f = MakeReward(spec);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? *f : RewardFn();
}

}  // namespace laminar::reward
