// `laminar score`: scores responses that already exist (a JSONL file) with a reward, so a user can
// check a reward on known outputs before a run. Each line is written back with its `score`.
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/json_util.h"
#include "reward/reward.h"

namespace laminar::cli {
namespace {

struct ScoreArgs {
  std::string input;   // JSONL path, "-" for stdin
  std::string reward;  // YAML: a name, a map or a list (ParseRewardSpecs); empty: by data_source
  std::string output;  // JSONL path; stdout when empty
};

int Fail(const std::string& message, int code = 1) { return CommandFail("score", message, code); }

// Text of a JSON value handed to a reward: strings as they are, anything else as JSON.
std::string AsText(const nlohmann::ordered_json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Scores one parsed line; `rewards` caches the data_source defaults (used when `fixed` is null).
StatusOr<reward::RewardResult> ScoreLine(const nlohmann::ordered_json& row,
                                         const reward::RewardFn* fixed,
                                         std::map<std::string, reward::RewardFn>* rewards) {
  if (!row.is_object())
    return InvalidArgumentError("expected a JSON object, got " + JsonSnippet(row));
  std::string data_source;
  if (row.contains("data_source")) {
    if (!row["data_source"].is_string()) {
      return InvalidArgumentError("'data_source' is not a string: " +
                                  JsonSnippet(row["data_source"]));
    }
    data_source = row["data_source"].get<std::string>();
  } else if (fixed == nullptr) {
    return InvalidArgumentError("missing 'data_source' (or choose a reward with --reward)");
  }
  if (!row.contains("response")) return InvalidArgumentError("missing 'response'");
  if (!row["response"].is_string()) {
    return InvalidArgumentError("'response' is not a string: " + JsonSnippet(row["response"]));
  }
  // verl's parquet rows keep the ground truth under reward_model.ground_truth.
  const nlohmann::ordered_json* truth = nullptr;
  if (row.contains("ground_truth")) {
    truth = &row["ground_truth"];
  } else if (row.contains("reward_model") && row["reward_model"].is_object() &&
             row["reward_model"].contains("ground_truth")) {
    truth = &row["reward_model"]["ground_truth"];
  }
  if (truth == nullptr || truth->is_null()) return InvalidArgumentError("missing 'ground_truth'");
  const std::string response = row["response"].get<std::string>();
  const std::string ground_truth = AsText(*truth);
  const std::string extra_info = row.contains("extra_info") ? row["extra_info"].dump() : "";
  if (fixed == nullptr) {
    auto it = rewards->find(data_source);
    if (it == rewards->end()) {
      LAMINAR_ASSIGN_OR_RETURN(std::string name, reward::DefaultRewardForDataSource(data_source));
      LAMINAR_ASSIGN_OR_RETURN(reward::RewardFn fn, reward::BuiltinReward(name));
      it = rewards->emplace(data_source, std::move(fn)).first;
    }
    fixed = &it->second;
  }
  return (*fixed)({.data_source = data_source,
                   .solution_str = response,
                   .ground_truth = ground_truth,
                   .extra_info_json = extra_info});
}

int RunScore(const ScoreArgs& args) {
  std::unique_ptr<reward::RewardFn> fixed;
  if (!args.reward.empty()) {
    auto fn = reward::RewardFromYamlText(args.reward, "--reward");
    if (!fn.ok()) return Fail(fn.status().message(), 2);
    fixed = std::make_unique<reward::RewardFn>(std::move(*fn));
  }
  std::ifstream file;
  std::istream* in = &std::cin;
  const std::string name = args.input == "-" ? "<stdin>" : args.input;
  if (args.input != "-") {
    file.open(args.input, std::ios::binary);
    if (!file) return Fail(args.input + ": cannot open");
    in = &file;
  }
  std::map<std::string, reward::RewardFn> rewards;
  std::string out, line;
  int64_t line_no = 0, scored = 0;
  double total = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines
    const std::string where = name + ":" + std::to_string(line_no);
    nlohmann::ordered_json row;
    try {
      row = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return Fail(where + ": not JSON: " + e.what());
    }
    auto result = ScoreLine(row, fixed.get(), &rewards);
    if (!result.ok()) return Fail(where + ": " + result.status().message());
    row["score"] = result->score;
    if (!result->extra.empty()) row["reward_extra"] = result->extra;
    out += row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    total += result->score;
    ++scored;
  }
  if (in->bad()) return Fail(name + ": read error");
  // Written only once every line has scored, so a bad line leaves no partial output.
  if (args.output.empty()) {
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    std::ofstream o(args.output, std::ios::binary);
    o << out;
    if (!o) return Fail(args.output + ": cannot write");
  }
  std::fprintf(stderr, "laminar score: %lld responses, mean score %.6g\n",
               static_cast<long long>(scored), scored > 0 ? total / scored : 0.0);
  return 0;
}

std::function<int()> SetupScore(CLI::App* app) {
  auto args = std::make_shared<ScoreArgs>();
  app->add_option("--input", args->input,
                  "JSONL of {\"data_source\", \"response\", \"ground_truth\", \"extra_info\"?} "
                  "('-' for stdin)")
      ->required();
  app->add_option("--reward", args->reward,
                  "the reward for every line: a name (gsm8k), or YAML such as "
                  "'{name: format, pattern: \"####\"}' or "
                  "'[{name: gsm8k, weight: 0.9}, {name: format, weight: 0.1, pattern: \"####\"}]'; "
                  "by default each line's data_source chooses it as in verl");
  app->add_option("--output", args->output, "JSONL to write (default stdout)");
  app->footer(
      "Writes each input line back with \"score\" (and \"reward_extra\" with the components of a "
      "combined reward) and a summary on stderr. A non-string ground_truth is passed as JSON "
      "text (a countdown problem); verl's reward_model.ground_truth is read too.\n"
      "Built-in rewards: gsm8k, math, countdown, format, exact_match, contains, auto.\n"
      "Exit codes: 0 ok, 1 error (file:line: message on stderr; nothing written), 2 usage.");
  return [args]() -> int { return RunScore(*args); };
}

LAMINAR_REGISTER_COMMAND("score", "score existing responses (JSONL) with a reward", SetupScore);

}  // namespace
}  // namespace laminar::cli
