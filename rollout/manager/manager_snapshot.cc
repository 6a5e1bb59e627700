// ManagerState::Snapshot and ::Restore: the manager's part of the actor's checkpoint
// (docs/architecture.md). Trajectories are stored in Protobuf's JSON mapping, so new proto fields
// travel without code here; every field read on restore is checked and errors name its JSON path.
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <set>
#include <utility>

#include "core/json_util.h"
#include "proto/codec.h"
#include "rollout/manager/manager_state.h"

namespace laminar::manager {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "laminar.manager_state";
constexpr int64_t kFormatVersion = 1;

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

// A JSON value with its path ("snapshot.buffer[2].row") for error messages. The value getters
// read this value; the keyed ones read a member of this object.
struct At {
  const json* v;
  std::string path;

  Status Error(const std::string& what) const { return InvalidArgumentError(path + ": " + what); }
  Status NotA(const char* what) const { return Error("is " + JsonSnippet(*v) + ", not " + what); }
  StatusOr<At> Member(const char* key) const {
    if (!v->is_object()) return NotA("an object");
    auto it = v->find(key);
    if (it == v->end()) return InvalidArgumentError(path + "." + key + ": missing");
    return At{&*it, path + "." + key};
  }
  StatusOr<int64_t> Int(int64_t lo, int64_t hi) const {
    if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > INT64_MAX)) {
      return NotA("an integer");
    }
    const auto x = v->get<int64_t>();
    if (x < lo || x > hi) {
      return Error(std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
    }
    return x;
  }
  StatusOr<std::vector<At>> Array() const {
    if (!v->is_array()) return NotA("an array");
    std::vector<At> out;
    out.reserve(v->size());
    for (size_t i = 0; i < v->size(); ++i) {
      out.push_back({&(*v)[i], path + "[" + std::to_string(i) + "]"});
    }
    return out;
  }

  StatusOr<int64_t> Int(const char* key, int64_t lo, int64_t hi) const {
    LAMINAR_ASSIGN_OR_RETURN(At m, Member(key));
    return m.Int(lo, hi);
  }
  StatusOr<uint64_t> Uint(const char* key) const {
    LAMINAR_ASSIGN_OR_RETURN(At m, Member(key));
    if (!m.v->is_number_unsigned() && !(m.v->is_number_integer() && m.v->get<int64_t>() >= 0)) {
      return m.NotA("an integer >= 0");
    }
    return m.v->get<uint64_t>();
  }
  StatusOr<std::string> Str(const char* key) const {
    LAMINAR_ASSIGN_OR_RETURN(At m, Member(key));
    if (!m.v->is_string()) return m.NotA("a string");
    return m.v->get<std::string>();
  }
  StatusOr<bool> Bool(const char* key) const {
    LAMINAR_ASSIGN_OR_RETURN(At m, Member(key));
    if (!m.v->is_boolean()) return m.NotA("a boolean");
    return m.v->get<bool>();
  }
  StatusOr<double> Number(const char* key) const {
    LAMINAR_ASSIGN_OR_RETURN(At m, Member(key));
    if (!m.v->is_number()) return m.NotA("a number");
    return m.v->get<double>();
  }
  StatusOr<std::vector<At>> Array(const char* key) const {
    LAMINAR_ASSIGN_OR_RETURN(At m, Member(key));
    return m.Array();
  }
};

json TrajectoryJson(proto::Trajectory t) {
  t.clear_prompt_ids();  // restored from the dataset
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string text;
  const auto st = google::protobuf::util::MessageToJsonString(t, &text, options);
  LAMINAR_CHECK(st.ok()) << "Trajectory to JSON: " << st.ToString();
  return json::parse(text);
}

StatusOr<proto::Trajectory> TrajectoryFromJson(const At& at) {
  if (!at.v->is_object()) return at.NotA("an object");
  proto::Trajectory t;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto st = google::protobuf::util::JsonStringToMessage(at.v->dump(), &t, options);
  if (!st.ok()) return at.Error("not a Trajectory: " + st.ToString());
  LAMINAR_RETURN_IF_ERROR(proto::Validate(t), at.path);
  return t;
}

}  // namespace

json ManagerState::Snapshot() const {
  json buffer = json::array();
  for (const CompletedGroup& g : buffer_) {
    json trajectories = json::array();
    for (const proto::Trajectory& t : g.trajectories) trajectories.push_back(TrajectoryJson(t));
    buffer.push_back({{"prompt_id", g.prompt_id},
                      {"row", g.row},
                      {"epoch", g.epoch},
                      {"version", g.version},
                      {"completed_s", g.completed_s},
                      {"trajectories", std::move(trajectories)}});
  }
  // The re-issue queue first, then the groups on rollouts in hand-out order: the order a restored
  // state hands them out again.
  std::vector<const Group*> groups;
  for (const std::string& id : reissue_queue_) groups.push_back(&in_flight_.at(id));
  std::vector<const Group*> assigned;
  for (const auto& [id, g] : in_flight_) {
    if (!g.rollout_id.empty()) assigned.push_back(&g);
  }
  std::sort(assigned.begin(), assigned.end(),
            [](const Group* a, const Group* b) { return a->handout_seq < b->handout_seq; });
  groups.insert(groups.end(), assigned.begin(), assigned.end());
  json in_flight = json::array();
  for (const Group* g : groups) {
    // "rollout" is informational (a restore re-issues every group): "" for the re-issue queue.
    in_flight.push_back({{"prompt_id", g->prompt_id},
                         {"row", g->row},
                         {"epoch", g->epoch},
                         {"rollout", g->rollout_id}});
  }
  return {{"format", kFormat},
          {"format_version", kFormatVersion},
          {"dataset",
           {{"name", dataset_->name},
            {"num_rows", dataset_->rows.size()},
            {"fingerprint", Hex(dataset_->fingerprint)}}},
          {"config",
           {{"seed", config_.sampling.seed()},
            {"shuffle", config_.shuffle},
            {"num_samples", config_.num_samples}}},
          {"cursor", {{"epoch", cursor_.epoch}, {"index", cursor_.index}}},
          {"buffer", std::move(buffer)},
          {"in_flight", std::move(in_flight)}};
}

namespace {

// The parts of a snapshot, checked, before any of it touches the state.
struct Restored {
  DataCursor cursor;
  std::deque<CompletedGroup> buffer;
  struct Key {
    std::string prompt_id;
    int64_t row = 0, epoch = 0;
  };
  std::vector<Key> in_flight;
};

// Reads {prompt_id, row, epoch} and checks they name a (row, epoch) the cursor has passed.
StatusOr<Restored::Key> ReadKey(const At& at, const PromptDataset& ds, const DataCursor& cursor,
                                const std::vector<int64_t>& position) {
  Restored::Key k;
  const auto n = static_cast<int64_t>(ds.rows.size());
  LAMINAR_ASSIGN_OR_RETURN(k.prompt_id, at.Str("prompt_id"));
  LAMINAR_ASSIGN_OR_RETURN(k.row, at.Int("row", 0, n - 1));
  LAMINAR_ASSIGN_OR_RETURN(k.epoch, at.Int("epoch", 0, cursor.epoch));
  const std::string want = MakePromptId(ds.rows[k.row].id, k.epoch);
  if (k.prompt_id != want) {
    return InvalidArgumentError(at.path + ".prompt_id: '" + k.prompt_id + "' but row " +
                                std::to_string(k.row) + " in epoch " + std::to_string(k.epoch) +
                                " is '" + want + "'");
  }
  if (k.epoch == cursor.epoch && position[k.row] >= cursor.index) {
    return InvalidArgumentError(at.path + ": '" + k.prompt_id +
                                "' lies at or after the cursor: it was never handed out");
  }
  return k;
}

}  // namespace

// Kept whole: reads the snapshot field by field in the order Snapshot writes it, each checked
// where it is read, so the two stay side by side.
Status ManagerState::Restore(const json& snapshot) {
  if (cursor_ != DataCursor{} || !in_flight_.empty() || !buffer_.empty() || !rollouts_.empty() ||
      counters_.num_taken != 0) {
    return FailedPreconditionError(
        std::string("the manager has already ") +
        (rollouts_.empty() ? "handed out work" : "heard from rollouts") +
        ", so it cannot take a checkpoint's state: a resumed run needs a new manager, and the "
        "actor (with --resume) must start before the rollouts");
  }
  const At root{&snapshot, "snapshot"};
  const PromptDataset& ds = *dataset_;
  const auto n = static_cast<int64_t>(ds.rows.size());
  try {
    LAMINAR_ASSIGN_OR_RETURN(std::string format, root.Str("format"));
    LAMINAR_ASSIGN_OR_RETURN(int64_t format_version, root.Int("format_version", 0, INT64_MAX));
    if (format != kFormat || format_version != kFormatVersion) {
      return root.Error("format '" + format + "' version " + std::to_string(format_version) +
                        "; this build reads '" + kFormat + "' version " +
                        std::to_string(kFormatVersion));
    }
    LAMINAR_ASSIGN_OR_RETURN(At dataset, root.Member("dataset"));
    LAMINAR_ASSIGN_OR_RETURN(int64_t num_rows, dataset.Int("num_rows", 0, INT64_MAX));
    LAMINAR_ASSIGN_OR_RETURN(std::string fingerprint, dataset.Str("fingerprint"));
    if (num_rows != n || fingerprint != Hex(ds.fingerprint)) {
      return FailedPreconditionError(
          "snapshot.dataset: taken with a dataset of " + std::to_string(num_rows) +
          " rows, fingerprint " + fingerprint + "; this one (" + ds.name + ") has " +
          std::to_string(n) + " rows, fingerprint " + Hex(ds.fingerprint));
    }
    LAMINAR_ASSIGN_OR_RETURN(At config, root.Member("config"));
    LAMINAR_ASSIGN_OR_RETURN(uint64_t seed, config.Uint("seed"));
    LAMINAR_ASSIGN_OR_RETURN(bool shuffle, config.Bool("shuffle"));
    LAMINAR_ASSIGN_OR_RETURN(int64_t num_samples, config.Int("num_samples", 1, 65536));
    if (seed != config_.sampling.seed() || shuffle != config_.shuffle ||
        num_samples != config_.num_samples) {
      return FailedPreconditionError(
          "snapshot.config: seed " + std::to_string(seed) + ", shuffle " + std::to_string(shuffle) +
          ", num_samples " + std::to_string(num_samples) + " but this run has seed " +
          std::to_string(config_.sampling.seed()) + ", shuffle " + std::to_string(config_.shuffle) +
          ", num_samples " + std::to_string(config_.num_samples) +
          " (the data order would differ)");
    }
    Restored r;
    LAMINAR_ASSIGN_OR_RETURN(At cursor, root.Member("cursor"));
    LAMINAR_ASSIGN_OR_RETURN(r.cursor.epoch, cursor.Int("epoch", 0, int64_t{1} << 40));
    LAMINAR_ASSIGN_OR_RETURN(r.cursor.index, cursor.Int("index", 0, n - 1));
    std::vector<int64_t> position(n);
    const std::vector<int64_t> order = EpochOrder(n, seed, r.cursor.epoch, shuffle);
    for (int64_t i = 0; i < n; ++i) position[order[i]] = i;

    std::set<std::string> seen;
    LAMINAR_ASSIGN_OR_RETURN(std::vector<At> buffer, root.Array("buffer"));
    for (const At& g_at : buffer) {
      LAMINAR_ASSIGN_OR_RETURN(Restored::Key k, ReadKey(g_at, ds, r.cursor, position));
      if (!seen.insert(k.prompt_id).second) return g_at.Error("'" + k.prompt_id + "' repeats");
      CompletedGroup g;
      g.prompt_id = k.prompt_id;
      g.row = k.row;
      g.epoch = k.epoch;
      LAMINAR_ASSIGN_OR_RETURN(g.version, g_at.Int("version", 0, INT64_MAX));
      LAMINAR_ASSIGN_OR_RETURN(g.completed_s, g_at.Number("completed_s"));
      LAMINAR_ASSIGN_OR_RETURN(At ts_at, g_at.Member("trajectories"));
      LAMINAR_ASSIGN_OR_RETURN(std::vector<At> ts, ts_at.Array());
      if (static_cast<int64_t>(ts.size()) != num_samples) {
        return ts_at.Error(std::to_string(ts.size()) + " trajectories for a group of " +
                           std::to_string(num_samples));
      }
      const std::vector<int32_t>& prompt = ds.rows[k.row].prompt_ids;
      for (size_t i = 0; i < ts.size(); ++i) {
        LAMINAR_ASSIGN_OR_RETURN(proto::Trajectory t, TrajectoryFromJson(ts[i]));
        if (t.sample_index() != static_cast<int32_t>(i) || t.prompt_id() != k.prompt_id ||
            t.version() != g.version) {
          return ts[i].Error("sample_index " + std::to_string(t.sample_index()) + ", prompt_id '" +
                             t.prompt_id() + "', version " + std::to_string(t.version()) +
                             " do not fit position " + std::to_string(i) + " of '" + k.prompt_id +
                             "' with version " + std::to_string(g.version));
        }
        t.mutable_prompt_ids()->Assign(prompt.begin(), prompt.end());
        g.trajectories.push_back(std::move(t));
      }
      r.buffer.push_back(std::move(g));
    }
    LAMINAR_ASSIGN_OR_RETURN(std::vector<At> in_flight, root.Array("in_flight"));
    for (const At& g_at : in_flight) {
      LAMINAR_ASSIGN_OR_RETURN(Restored::Key k, ReadKey(g_at, ds, r.cursor, position));
      if (!seen.insert(k.prompt_id).second) return g_at.Error("'" + k.prompt_id + "' repeats");
      r.in_flight.push_back(std::move(k));
    }

    // Everything checked: commit.
    cursor_ = r.cursor;
    SetEpochOrder(cursor_.epoch);
    buffer_ = std::move(r.buffer);
    for (Restored::Key& k : r.in_flight) {
      Group g;
      g.prompt_id = k.prompt_id;
      g.row = k.row;
      g.epoch = k.epoch;
      g.samples.resize(config_.num_samples);
      g.handout_seq = next_handout_seq_++;
      reissue_queue_.push_back(k.prompt_id);
      in_flight_.emplace(std::move(k.prompt_id), std::move(g));
    }
    counters_.num_reissued += static_cast<int64_t>(r.in_flight.size());
    return OkStatus();
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string("snapshot: ") + e.what());
  }
}

}  // namespace laminar::manager
