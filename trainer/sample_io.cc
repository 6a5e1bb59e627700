// JSON Lines trajectories for `laminar train`.
#include "trainer/sample_io.h"

#include <climits>
#include <cstdint>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace laminar::trainer {

namespace {

// A JSON array of token ids: integers in [0, 2^31); anything else (floats, booleans, strings,
// numbers out of range) is an error naming the field.
StatusOr<std::vector<int32_t>> TokenIds(const nlohmann::json& j, const char* field) {
  if (!j.is_array()) return InvalidArgumentError(std::string(field) + " is not an array");
  std::vector<int32_t> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& v = j[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX ||
        (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX)) {
      return InvalidArgumentError(std::string(field) + "[" + std::to_string(i) + "] = " + v.dump() +
                                  " is not a token id (an integer >= 0)");
    }
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return out;
}

}  // namespace

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
      s.source = where;
      if (!j.contains("prompt_ids")) return InvalidArgumentError(where + ": no prompt_ids");
      LAMINAR_ASSIGN_OR_RETURN(s.prompt_ids, TokenIds(j["prompt_ids"], "prompt_ids"), where);
      const char* response_key = j.contains("response_ids") ? "response_ids" : "ids";
      if (!j.contains(response_key)) {
        return InvalidArgumentError(where + ": no response_ids (or ids)");
      }
      LAMINAR_ASSIGN_OR_RETURN(s.response_ids, TokenIds(j[response_key], response_key), where);
      if (j.contains("logprobs")) s.behavior_logprobs = j["logprobs"].get<std::vector<float>>();
      if (j.contains("score")) s.score = j["score"].get<double>();
      // Explicit groups by their JSON text ("7" and 7 differ); a line without one is its own group.
      const std::string key =
          j.contains("group") ? "group " + j["group"].dump() : "line " + std::to_string(line_no);
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
