// The audit of a run's files; see run_audit.h.
#include "launch/run_audit.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "core/mapped_file.h"

namespace laminar::launch {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::vector<Json> ReadJsonLines(const fs::path& path) {
  std::vector<Json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    Json j = Json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

namespace {

// The trajectories of the kept steps: for each step up to `last_step`, the lines of the last time
// it was trained (a resumed run trains again the steps after its checkpoint).
std::vector<Json> KeptTrajectories(const fs::path& log, int64_t last_step) {
  std::map<int64_t, std::vector<Json>> by_step;
  int64_t current = -1;
  for (Json& j : ReadJsonLines(log)) {
    const int64_t step = j.value("step", int64_t{-1});
    if (step != current) {
      by_step[step].clear();  // a step trained again replaces the earlier one
      current = step;
    }
    by_step[step].push_back(std::move(j));
  }
  std::vector<Json> out;
  for (auto& [step, lines] : by_step) {
    if (step > last_step) continue;
    for (Json& j : lines) out.push_back(std::move(j));
  }
  return out;
}

}  // namespace

Json AuditExactlyOnce(const fs::path& checkpoint_dir, const fs::path& trajectory_log) {
  Json r;
  // The final checkpoint: the trained steps and the manager's ledger.
  const fs::path& ckpts = checkpoint_dir;
  std::string latest;
  if (auto text = ReadFileToString((ckpts / "latest").string()); text.ok()) latest = *text;
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  Json state;
  if (!latest.empty()) {
    if (auto text = ReadFileToString((ckpts / latest / "trainer_state.json").string()); text.ok()) {
      state = Json::parse(*text, nullptr, false);
    }
  }
  const Json snapshot = state.is_object()
                            ? state.value("user", Json::object()).value("manager_snapshot", Json())
                            : Json();
  int64_t last_step = 0;
  if (state.is_object()) last_step = state.value("global_step", int64_t{0});
  r["checkpoint"] = latest;
  r["steps"] = last_step;

  // Exactly once: each sample trained at most once; each prompt handed out trained, buffered or
  // in flight.
  const std::vector<Json> kept = KeptTrajectories(trajectory_log, last_step);
  std::map<std::pair<std::string, int64_t>, int> samples;
  std::set<std::string> trained;
  for (const Json& t : kept) {
    const std::string id = t.value("prompt_id", "");
    ++samples[{id, t.value("sample_index", int64_t{-1})}];
    trained.insert(id);
  }
  int64_t duplicated = 0;
  for (const auto& [key, n] : samples) duplicated += n - 1;
  std::set<std::string> held;
  int64_t handed_out = -1, overlaps = 0;
  if (snapshot.is_object()) {
    const int64_t rows = snapshot["dataset"].value("num_rows", int64_t{0});
    handed_out = snapshot["cursor"].value("epoch", int64_t{0}) * rows +
                 snapshot["cursor"].value("index", int64_t{0});
    for (const char* part : {"buffer", "in_flight"}) {
      for (const Json& g : snapshot.value(part, Json::array())) {
        const std::string id = g.value("prompt_id", "");
        overlaps += trained.count(id) + (held.insert(id).second ? 0 : 1);
      }
    }
  }
  const int64_t accounted = static_cast<int64_t>(trained.size() + held.size());
  r["samples_trained"] = kept.size();
  r["groups_trained"] = trained.size();
  r["groups_buffered_or_in_flight"] = held.size();
  r["groups_handed_out"] = handed_out;
  r["duplicated"] = duplicated + overlaps;
  r["lost"] = handed_out < 0 ? -1 : std::max<int64_t>(0, handed_out - accounted);
  r["unaccounted_extra"] = handed_out < 0 ? 0 : std::max<int64_t>(0, accounted - handed_out);

  return r;
}

}  // namespace laminar::launch
