// JSON Lines trajectories for `laminar train`.
#include "trainer/sample_io.h"

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace laminar::trainer {

StatusOr<std::vector<std::vector<TrainSample>>> ReadSampleGroups(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open trajectories file " + path);
  std::vector<std::vector<TrainSample>> groups;
  std::map<std::string, size_t> group_index;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    try {
      auto j = nlohmann::json::parse(line);
      if (!j.is_object()) return InvalidArgumentError(where + ": not a JSON object");
      TrainSample s;
      s.prompt_ids = j.at("prompt_ids").get<std::vector<int32_t>>();
      const char* response_key = j.contains("response_ids") ? "response_ids" : "ids";
      s.response_ids = j.at(response_key).get<std::vector<int32_t>>();
      if (j.contains("logprobs")) s.behavior_logprobs = j["logprobs"].get<std::vector<float>>();
      if (j.contains("score")) s.score = j["score"].get<double>();
      std::string key = std::to_string(line_no);
      if (j.contains("group"))
        key = j["group"].is_string() ? j["group"].get<std::string>() : j["group"].dump();
      auto [it, added] = group_index.emplace(key, groups.size());
      if (added) groups.emplace_back();
      s.group_id = static_cast<int64_t>(it->second);
      groups[it->second].push_back(std::move(s));
    } catch (const nlohmann::json::exception& e) {
      return InvalidArgumentError(where + ": " + e.what());
    }
  }
  if (groups.empty()) return InvalidArgumentError(path + ": no trajectories");
  return groups;
}

}  // namespace laminar::trainer
