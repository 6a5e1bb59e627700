// The actor's loop; see actor.h.
#include "actor/actor.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "actor/console.h"
#include "core/logging.h"
#include "core/mapped_file.h"
#include "proto/codec.h"
#include "relay/policy_weights.h"
#include "trainer/checkpoint.h"

namespace laminar::actor {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What rank 0 tells the other data-parallel ranks: a header of two floats holding the kind and
// the payload's bytes, then the payload in floats (Collective::Broadcast copies bits).
enum RankMessage : uint32_t {
  kTrainBatch = 1,  // payload: the step's proto::TrajectoryBatch, whole
  kSave = 2,        // save a checkpoint with rank 0 (Trainer::SaveCheckpoint's barrier)
  kStop = 3,
  kStillHere = 4,  // rank 0 waits for a batch: the ranks' wait for a message starts again
  kExport = 5,     // export the policy with rank 0 (Trainer::ExportHuggingFace's barrier)
};

// rank 0 sends one at least this often, well inside the collective timeout.
constexpr auto kStillHereEvery = std::chrono::seconds(10);

Status BroadcastMessage(trainer::Collective& c, uint32_t* kind, std::string* payload) {
  std::vector<float> header(2);
  uint32_t bytes = static_cast<uint32_t>(payload->size());
  std::memcpy(&header[0], kind, sizeof(uint32_t));
  std::memcpy(&header[1], &bytes, sizeof(uint32_t));
  LAMINAR_RETURN_IF_ERROR(c.Broadcast(std::span<float>(header), 0));
  std::memcpy(kind, &header[0], sizeof(uint32_t));
  std::memcpy(&bytes, &header[1], sizeof(uint32_t));
  if (bytes == 0) {
    payload->clear();
    return OkStatus();
  }
  std::vector<float> body((bytes + sizeof(float) - 1) / sizeof(float));
  if (c.rank() == 0) std::memcpy(body.data(), payload->data(), bytes);
  LAMINAR_RETURN_IF_ERROR(c.Broadcast(std::span<float>(body), 0));
  payload->assign(reinterpret_cast<const char*>(body.data()), bytes);
  return OkStatus();
}

// p-th quantile (nearest rank) of sorted values.
double Quantile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size()))) - 1;
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

Status ActorOptions::Validate() const {
  if (manager.empty()) return InvalidArgumentError("actor: manager endpoint is empty");
  if (master_relay.empty()) return InvalidArgumentError("actor: master relay endpoint is empty");
  if (groups_per_step < 1) {
    return InvalidArgumentError("actor: groups_per_step must be >= 1, got " +
                                std::to_string(groups_per_step));
  }
  if (max_steps < 0) return InvalidArgumentError("actor: max_steps must be >= 0");
  if (max_staleness && *max_staleness < 0) {
    return InvalidArgumentError("actor: max_staleness must be >= 0, got " +
                                std::to_string(*max_staleness));
  }
  if (save_every < 0) return InvalidArgumentError("actor: save_every must be >= 0");
  if (keep_last < 1) return InvalidArgumentError("actor: keep_last must be >= 1");
  if (poll_ms < 1 || request_timeout_ms < 1 || request_attempts < 1) {
    return InvalidArgumentError(
        "actor: poll_ms, request_timeout_ms and request_attempts must be >= 1");
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Actor>> Actor::Create(const model::ModelConfig& config,
                                               const model::WeightStore& weights,
                                               ActorOptions options, bool resume) {
  LAMINAR_RETURN_IF_ERROR(options.Validate());
  if (resume && options.checkpoint_dir.empty()) {
    return InvalidArgumentError("actor: resume needs a checkpoint_dir");
  }
  if (options.collective.rank != 0) {
    return InvalidArgumentError("actor: the Actor is rank 0; rank " +
                                std::to_string(options.collective.rank) + " runs RunActorRank");
  }
  std::unique_ptr<Actor> a(new Actor(std::move(options)));
  std::unique_ptr<trainer::Collective> collective;
  if (a->options_.collective.world_size > 1) {
    LAMINAR_ASSIGN_OR_RETURN(collective, trainer::CreateCollective(a->options_.collective),
                             "actor rank 0");
  }
  LAMINAR_ASSIGN_OR_RETURN(
      a->trainer_,
      trainer::Trainer::Create(config, weights, a->options_.trainer, std::move(collective)),
      "actor");
  a->manager_ = std::make_unique<ZmqRequestClient>(a->options_.manager);
  if (resume) {
    LAMINAR_ASSIGN_OR_RETURN(nlohmann::json user,
                             a->trainer_->LoadCheckpoint(a->options_.checkpoint_dir), "actor");
    a->last_saved_step_ = a->trainer_->global_step();
    a->resumed_ = true;
    if (!user.contains("manager_snapshot") || !user["manager_snapshot"].is_object()) {
      return InvalidArgumentError("actor: the checkpoint in " + a->options_.checkpoint_dir +
                                  " has no manager_snapshot");
    }
    // perf/ettr spans the whole run, resumes included: when it began and the time of the steps
    // kept up to the checkpoint (the steps after it are trained again, their time lost).
    if (user.contains("ettr") && user["ettr"].is_object()) {
      const nlohmann::json& e = user["ettr"];
      if (e.value("run_start_unix_s", nlohmann::json()).is_number() &&
          e.value("kept_s", nlohmann::json()).is_number()) {
        a->options_.run_start_unix_s = e["run_start_unix_s"].get<double>();
        a->kept_s_ = e["kept_s"].get<double>();
      }
    }
    proto::ManagerRequest req;
    req.mutable_restore()->set_snapshot_json(user["manager_snapshot"].dump());
    LAMINAR_RETURN_IF_ERROR(a->Call(std::move(req)).status(), "actor: restoring the manager");
  }
  // Every rank, resumed or not, checks that all of them start at the same step (one started
  // with --resume and another without would otherwise wait on different collectives).
  LAMINAR_RETURN_IF_ERROR(a->trainer_->CheckRanksAgree(), "actor");
  relay::PublisherOptions po;
  po.id = a->options_.id;
  po.master_endpoint = a->options_.master_relay;
  LAMINAR_ASSIGN_OR_RETURN(a->publisher_, relay::Publisher::Create(std::move(po)), "actor");
  return a;
}

StatusOr<proto::ManagerReply> Actor::Call(proto::ManagerRequest request) {
  request.mutable_header()->set_sender(options_.id);
  request.mutable_header()->set_seq(++seq_);
  LAMINAR_ASSIGN_OR_RETURN(std::string bytes,
                           manager_->Call(proto::Encode(request), options_.request_timeout_ms,
                                          options_.request_attempts));
  LAMINAR_ASSIGN_OR_RETURN(proto::ManagerReply reply,
                           proto::Decode<proto::ManagerReply>(bytes, "manager"));
  if (!reply.error().empty()) {
    return FailedPreconditionError("the manager refused the request: " + reply.error());
  }
  return reply;
}

Status Actor::Publish(StepMetrics* metrics) {
  const int64_t version = trainer_->policy_version();
  const model::WeightStore store = trainer_->params().ToWeightStore();
  LAMINAR_ASSIGN_OR_RETURN(std::vector<relay::TensorBytes> tensors, relay::TensorsOf(store));
  if (options_.draft_model_weights != nullptr) {
    LAMINAR_ASSIGN_OR_RETURN(
        std::vector<relay::TensorBytes> draft,
        relay::TensorsOf(*options_.draft_model_weights, relay::kDraftModelPrefix),
        "actor: the draft model");
    tensors.insert(tensors.end(), draft.begin(), draft.end());
  }
  LAMINAR_ASSIGN_OR_RETURN(double stall, publisher_->Publish(version, tensors),
                           "actor: publishing version " + std::to_string(version));
  proto::ManagerRequest req;
  req.mutable_version()->set_version(version);
  LAMINAR_RETURN_IF_ERROR(Call(std::move(req)).status(), "actor: announcing the version");
  if (metrics != nullptr) {
    (*metrics)["relay/publish_stall_s"] = stall;
    (*metrics)["relay/bytes"] = static_cast<double>(publisher_->stats().bytes);
    (*metrics)["timing_s/update_weights"] = stall;
  }
  return OkStatus();
}

StatusOr<std::optional<std::vector<proto::Trajectory>>> Actor::TakeBatch(
    const std::atomic<bool>& stop, StepMetrics* metrics) {
  const int64_t version = trainer_->policy_version();
  std::vector<proto::Trajectory> kept;
  int32_t groups = 0;
  int64_t stale = 0;
  StepProgress progress{.step = trainer_->global_step() + 1,
                        .phase = "generating",
                        .samples_needed = 0,
                        .since_unix_s = UnixNow()};
  ShowProgress(progress);
  struct BarEraser {  // the step line that follows starts on a clean line
    Actor* actor;
    ~BarEraser() { actor->ClearProgressBar(); }
  } eraser{this};
  int64_t samples_taken = 0;
  while (groups < options_.groups_per_step) {
    if (stop.load()) return std::optional<std::vector<proto::Trajectory>>();
    proto::ManagerRequest req;
    req.mutable_take_batch()->set_num_groups(options_.groups_per_step - groups);
    LAMINAR_ASSIGN_OR_RETURN(proto::ManagerReply reply, Call(std::move(req)), "actor");
    if (reply.batch().trajectories_size() == 0) {
      if (reply.exhausted()) return std::optional<std::vector<proto::Trajectory>>();
      progress.samples = samples_taken + reply.samples_ready();
      progress.samples_needed = int64_t{options_.groups_per_step} * reply.group_size();
      ShowProgress(progress);
      if (trainer_->world_size() > 1 && Clock::now() - told_ranks_ > kStillHereEvery) {
        LAMINAR_RETURN_IF_ERROR(TellRanks(kStillHere), "actor");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_ms));
      continue;
    }
    for (const auto& [k, v] : reply.metrics()) (*metrics)[k] = v;
    // Whole groups, in order: a group's samples are consecutive and share prompt_id and version.
    const auto& ts = reply.batch().trajectories();
    for (int i = 0; i < ts.size();) {
      int j = i;
      while (j < ts.size() && ts[j].prompt_id() == ts[i].prompt_id()) ++j;
      const bool too_old =
          options_.max_staleness && version - ts[i].version() > *options_.max_staleness;
      if (too_old) ++stale;
      if (!too_old || !options_.drop_stale) {
        for (int k = i; k < j; ++k) kept.push_back(ts[k]);
        ++groups;
        samples_taken += j - i;
      }
      i = j;
    }
  }
  stale_groups_ += stale;
  (*metrics)["staleness/stale_groups"] = static_cast<double>(stale);
  return std::optional<std::vector<proto::Trajectory>>(std::move(kept));
}

void Actor::ShowProgress(const StepProgress& progress) {
  // Rewritten only when something but the phase's start time changed (the actor polls often).
  const auto& last = progress_written_;
  const bool changed = !last || last->step != progress.step || last->phase != progress.phase ||
                       last->samples != progress.samples ||
                       last->samples_needed != progress.samples_needed;
  if (!options_.progress_path.empty() && changed) {
    if (Status st = WriteFileAtomic(options_.progress_path, ProgressJson(progress),
                                    /*durable=*/false);
        !st.ok()) {
      LAMINAR_LOG(WARN, ACTOR) << "progress: " << st.message();
    }
    progress_written_ = progress;
  }
  if (progress.phase == "generating" && options_.progress_bar && isatty(STDERR_FILENO) == 1) {
    std::fprintf(stderr, "\r\033[K[actor] %s", ProgressLine(progress, UnixNow()).c_str());
    std::fflush(stderr);
    bar_on_screen_ = true;
  }
}

void Actor::ClearProgressBar() {
  if (!bar_on_screen_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  bar_on_screen_ = false;
}

Status Actor::TellRanks(uint32_t kind, const std::string& payload) {
  if (trainer_->world_size() == 1) return OkStatus();
  std::string p = payload;
  told_ranks_ = Clock::now();
  return BroadcastMessage(trainer_->collective(), &kind, &p);
}

Status Actor::SaveCheckpoint() {
  if (options_.checkpoint_dir.empty() || last_saved_step_ == trainer_->global_step()) {
    return OkStatus();
  }
  proto::ManagerRequest req;
  req.mutable_snapshot();
  LAMINAR_ASSIGN_OR_RETURN(proto::ManagerReply reply, Call(std::move(req)),
                           "actor: manager snapshot");
  nlohmann::json snapshot = nlohmann::json::parse(reply.snapshot_json(), nullptr, false);
  if (snapshot.is_discarded()) {
    return DataLossError("actor: the manager's snapshot is not JSON");
  }
  nlohmann::json user = {{"manager_snapshot", std::move(snapshot)}};
  if (std::isfinite(options_.run_start_unix_s)) {
    user["ettr"] = {{"run_start_unix_s", options_.run_start_unix_s}, {"kept_s", kept_s_}};
  }
  LAMINAR_RETURN_IF_ERROR(TellRanks(kSave), "actor: telling the other ranks to save");
  LAMINAR_ASSIGN_OR_RETURN(
      std::string dir, trainer_->SaveCheckpoint(options_.checkpoint_dir, user, options_.keep_last),
      "actor");
  LAMINAR_LOG(INFO, ACTOR) << "checkpoint " << dir;
  if (!options_.export_dir.empty()) {
    LAMINAR_RETURN_IF_ERROR(TellRanks(kExport), "actor: telling the other ranks to export");
    LAMINAR_RETURN_IF_ERROR(
        trainer_->ExportHuggingFace(options_.export_dir, options_.export_tokenizer_files,
                                    DType::kF32, /*overwrite=*/true),
        "actor: export to " + options_.export_dir);
  }
  last_saved_step_ = trainer_->global_step();
  return OkStatus();
}

namespace {

// A trained batch as the trainer's samples, and what the step's metrics report of it.
struct BatchSummary {
  std::vector<trainer::TrainSample> samples;
  std::vector<double> staleness;  // per sample, sorted: the actor's version less the sample's
  int64_t tokens = 0;             // prompt and response tokens
  int64_t clipped = 0;            // responses ended by max_tokens
  int64_t non_finite = 0;         // responses ended by non-finite policy logits
  double len_max = 0, len_min = 1e300, reward_s = 0;
  // The reward's sub-scores, summed with their counts: reward/<name>.
  std::map<std::string, std::pair<double, int64_t>> extra;
};

BatchSummary Summarize(const std::vector<proto::Trajectory>& batch, int64_t version) {
  BatchSummary b;
  std::map<std::string, int64_t> group_of;
  for (const proto::Trajectory& t : batch) {
    for (const auto& [name, value] : t.reward_extra()) {
      auto& [sum, count] = b.extra[name.starts_with("reward/") ? name : "reward/" + name];
      sum += value;
      ++count;
    }
    trainer::TrainSample s;
    s.prompt_ids.assign(t.prompt_ids().begin(), t.prompt_ids().end());
    s.response_ids.assign(t.response_ids().begin(), t.response_ids().end());
    s.behavior_logprobs.assign(t.logprobs().begin(), t.logprobs().end());
    s.score = t.reward();
    s.group_id =
        group_of.emplace(t.prompt_id(), static_cast<int64_t>(group_of.size())).first->second;
    s.source = t.prompt_id() + "/" + std::to_string(t.sample_index()) + " from " + t.rollout_id();
    b.staleness.push_back(static_cast<double>(version - t.version()));
    b.tokens += t.prompt_ids_size() + t.response_ids_size();
    const double len = t.response_ids_size();
    b.len_max = std::max(b.len_max, len);
    b.len_min = std::min(b.len_min, len);
    b.clipped += t.finish_reason() == proto::FINISH_REASON_LENGTH;
    b.non_finite += t.finish_reason() == proto::FINISH_REASON_NON_FINITE_LOGITS;
    b.reward_s += t.timings().reward_s();
    b.samples.push_back(std::move(s));
  }
  std::sort(b.staleness.begin(), b.staleness.end());
  return b;
}

// One line per trajectory of the batch trained at `step` (actor.trajectory_log).
void LogTrajectories(const std::vector<proto::Trajectory>& batch, int64_t step, int64_t version,
                     std::ofstream& out) {
  for (const proto::Trajectory& t : batch) {
    nlohmann::json line = {{"step", step},
                           {"actor_version", version},
                           {"prompt_id", t.prompt_id()},
                           {"sample_index", t.sample_index()},
                           {"version", t.version()},
                           {"rollout_id", t.rollout_id()},
                           {"reward", t.reward()},
                           {"response_length", t.response_ids_size()},
                           {"finish_reason", proto::FinishReason_Name(t.finish_reason())}};
    out << line.dump() << "\n";
  }
  out << std::flush;
}

// The batch's staleness, response lengths and reward sub-scores into `m`.
void AddBatchMetrics(const BatchSummary& b, StepMetrics& m) {
  double sum = 0;
  for (double s : b.staleness) sum += s;
  const double n = static_cast<double>(b.staleness.size());
  m["staleness/mean"] = sum / n;
  m["staleness/p50"] = Quantile(b.staleness, 0.5);
  m["staleness/p99"] = Quantile(b.staleness, 0.99);
  m["staleness/max"] = b.staleness.back();
  m["response_length/max"] = b.len_max;
  m["response_length/min"] = b.len_min;
  m["response_length/clip_ratio"] = static_cast<double>(b.clipped) / n;
  m["rollout/non_finite_finishes"] = static_cast<double>(b.non_finite);
  for (const auto& [name, sum_count] : b.extra) {
    m[name] = sum_count.first / static_cast<double>(sum_count.second);
  }
}

}  // namespace

Status DropStepsAfter(const std::string& path, const std::string& key, int64_t step) {
  std::ifstream in(path);
  if (!in) return OkStatus();
  std::string kept;
  int64_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains(key) && j[key].is_number() &&
        j[key].get<double>() > static_cast<double>(step)) {
      ++dropped;
      continue;
    }
    if (!line.empty()) kept += line + "\n";  // a torn last line goes too
  }
  in.close();
  if (dropped == 0) return OkStatus();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out.flush()) return InternalError("actor: cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return InternalError("actor: cannot replace " + path + ": " + ec.message());
  LAMINAR_LOG(INFO, ACTOR) << path << ": dropped " << dropped << " lines of steps after " << step
                           << ", which this run trains again";
  return OkStatus();
}

Status Actor::OpenRunOutputs() {
  // What an interrupted run wrote past its newest checkpoint is trained again: no step appears
  // twice in the outputs.
  if (!options_.metrics_path.empty()) {
    LAMINAR_RETURN_IF_ERROR(
        DropStepsAfter(options_.metrics_path, "training/global_step", trainer_->global_step()));
  }
  if (!options_.trajectory_log.empty()) {
    LAMINAR_RETURN_IF_ERROR(
        DropStepsAfter(options_.trajectory_log, "step", trainer_->global_step()));
  }
  if (!options_.metrics_path.empty()) {
    metrics_file_.open(options_.metrics_path, std::ios::app);
    if (!metrics_file_) return InvalidArgumentError("actor: cannot open " + options_.metrics_path);
  }
  if (!options_.trajectory_log.empty()) {
    trajectory_file_.open(options_.trajectory_log, std::ios::app);
    if (!trajectory_file_) {
      return InvalidArgumentError("actor: cannot open " + options_.trajectory_log);
    }
  }
  if (!options_.tensorboard_dir.empty()) {
    LAMINAR_ASSIGN_OR_RETURN(tensorboard_, TensorBoardWriter::Create(options_.tensorboard_dir),
                             "actor");
  }
  return OkStatus();
}

Status Actor::WriteStepMetrics(const StepMetrics& m) {
  if (metrics_file_) {
    nlohmann::json line(m);
    metrics_file_ << line.dump() << "\n" << std::flush;
  }
  if (tensorboard_) {
    LAMINAR_RETURN_IF_ERROR(tensorboard_->WriteScalars(trainer_->global_step(), m), "actor");
  }
  return OkStatus();
}

void Actor::AccountStep(double step_s, double train_s, double since_trained_s, bool skipped,
                        StepMetrics& m) {
  const double now = FaultClockNow();
  const std::string step = std::to_string(trainer_->global_step());
  auto record = [&](Fault f) {
    f.role = options_.id;
    f.rank = 0;
    f.seen_by = options_.id;
    if (Status st = options_.faults.Record(std::move(f)); !st.ok()) {
      LAMINAR_LOG(WARN, ACTOR) << st;
    }
  };
  if (skipped) {
    record({.kind = FaultKind::kNonFinite,
            .detail = "step " + step + ": non-finite loss or gradient; the update was skipped",
            .detected_unix_s = now,
            .recovered_unix_s = now});
  } else {
    kept_s_ += step_s;
  }
  // A step whose training took over 3x the median of the (up to 50) steps before it (5 at least)
  // straggled: it is recorded as detected when it passed that mark and recovered when it ended...
  // Only training counts: waiting for a batch is the rollouts' time and publishing the relay's, and
  // their faults are theirs.
  constexpr size_t kMinHistory = 5;
  constexpr double kOutlier = 3;
  if (step_times_.size() >= kMinHistory) {
    std::vector<double> sorted = step_times_;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const double median = sorted[sorted.size() / 2];
    // ... and by a second at least: a step of milliseconds that takes a few more is noise.
    constexpr double kMinExcessS = 1;
    if (median > 0 && train_s > kOutlier * median && train_s - median >= kMinExcessS) {
      record({.kind = FaultKind::kStraggler,
              .detail = "step " + step + " trained for " + std::to_string(train_s) + " s, " +
                        std::to_string(train_s / median) + "x the median " +
                        std::to_string(median) + " s of the steps before",
              .detected_unix_s = now - since_trained_s - train_s + kOutlier * median,
              .recovered_unix_s = now - since_trained_s});
    }
  }
  step_times_.push_back(train_s);
  constexpr size_t kHistory = 50;  // the median of the recent steps: a run's pace drifts
  if (step_times_.size() > kHistory) step_times_.erase(step_times_.begin());
  const double wall = now - options_.run_start_unix_s;
  m["perf/ettr"] = wall > 0 ? std::min(1.0, kept_s_ / wall) : 1.0;
}

void Actor::RecordDiskRecovered() {
  if (disk_full_since_unix_s_ == 0) return;
  if (Status rec = options_.faults.Record({.kind = FaultKind::kDiskFull,
                                           .role = options_.id,
                                           .rank = 0,
                                           .detail = "checkpoints failed for want of space",
                                           .seen_by = options_.id,
                                           .detected_unix_s = disk_full_since_unix_s_,
                                           .recovered_unix_s = FaultClockNow()});
      !rec.ok()) {
    LAMINAR_LOG(WARN, ACTOR) << rec;
  }
  disk_full_since_unix_s_ = 0;
}

Status Actor::SavePeriodicCheckpoint() {
  Status st = SaveCheckpoint();
  if (st.ok()) {
    RecordDiskRecovered();
    return st;
  }
  // A full disk is survivable: the earlier checkpoints are intact and the next step retries.
  std::error_code ec;
  const auto space = std::filesystem::space(options_.checkpoint_dir, ec);
  constexpr uintmax_t kLowSpace = 64u << 20;
  const bool full = st.message().find("No space left") != std::string_view::npos ||
                    (!ec && space.available < kLowSpace);
  if (!full) return st;
  LAMINAR_LOG(WARN, ACTOR) << "checkpoint at step " << trainer_->global_step()
                           << " failed, the disk is full; training goes on and the next step "
                           << "tries again: " << st.message();
  if (disk_full_since_unix_s_ == 0) disk_full_since_unix_s_ = FaultClockNow();
  return OkStatus();
}

void Actor::RecordLostRank() {
  const double now = FaultClockNow();
  // Which rank was lost is not known here (the collective's error names its address): -1.
  if (Status st = options_.faults.Record(
          {.kind = FaultKind::kLostLink,
           .role = options_.id,
           .rank = -1,
           .detail = "lost a data-parallel rank: " + trainer_->collective().error().message(),
           .seen_by = options_.id,
           .detected_unix_s = now});
      !st.ok()) {
    LAMINAR_LOG(WARN, ACTOR) << st;
  }
}

void Actor::RecordLostRanksRecovered() {
  if (!options_.faults.enabled()) return;
  const double now = FaultClockNow();
  for (const nlohmann::json& f : ReadFaults(options_.faults.path())) {
    if (f.value("kind", "") != FaultKindName(FaultKind::kLostLink) ||
        f.value("seen_by", "") != options_.id ||
        !f.value("recovered_unix_s", nlohmann::json()).is_null() ||
        !f.value("detail", "").starts_with("lost a data-parallel rank")) {
      continue;
    }
    Status st = options_.faults.Record({.kind = FaultKind::kLostLink,
                                        .role = f.value("role", ""),
                                        .host = f.value("host", ""),
                                        .rank = f.value("rank", -1),
                                        .detail = f.value("detail", ""),
                                        .seen_by = options_.id,
                                        .detected_unix_s = f.value("detected_unix_s", 0.0),
                                        .recovered_unix_s = now});
    if (!st.ok()) LAMINAR_LOG(WARN, ACTOR) << st;
  }
}

Status Actor::Run(const std::atomic<bool>& stop,
                  const std::function<void(const StepMetrics&)>& on_step) {
  Status st = RunSteps(stop, on_step);
  if (!st.ok() && lost_a_rank()) RecordLostRank();
  return st;
}

Status Actor::RunSteps(const std::atomic<bool>& stop,
                       const std::function<void(const StepMetrics&)>& on_step) {
  if (!std::isfinite(options_.run_start_unix_s)) options_.run_start_unix_s = FaultClockNow();
  // However Run ends, the other ranks are told to stop (after a collective's error, the message
  // fails too and they find out by their own collective's error).
  struct StopRanks {
    Actor* actor;
    ~StopRanks() {
      if (Status st = actor->TellRanks(kStop); !st.ok()) {
        LAMINAR_LOG(WARN, ACTOR) << "telling the other ranks to stop: " << st;
      }
    }
  } stop_ranks{this};
  told_ranks_ = Clock::now();
  LAMINAR_RETURN_IF_ERROR(OpenRunOutputs());
  LAMINAR_RETURN_IF_ERROR(Publish(nullptr));
  auto last_update = Clock::now();
  while (!stop.load() &&
         (options_.max_steps == 0 || trainer_->global_step() < options_.max_steps)) {
    StepMetrics m;
    const auto wait_start = Clock::now();
    LAMINAR_ASSIGN_OR_RETURN(auto batch, TakeBatch(stop, &m));
    if (!batch) break;
    const auto train_start = Clock::now();
    ShowProgress(StepProgress{
        .step = trainer_->global_step() + 1, .phase = "training", .since_unix_s = UnixNow()});
    const int64_t version = trainer_->policy_version();
    const BatchSummary summary = Summarize(*batch, version);
    if (trajectory_file_) {
      LogTrajectories(*batch, trainer_->global_step() + 1, version, trajectory_file_);
    }
    const int64_t skipped_steps_before = trainer_->skipped_steps();
    const std::string step_name = "actor step " + std::to_string(trainer_->global_step() + 1);
    std::vector<trainer::TrainSample> share = summary.samples;
    if (trainer_->world_size() > 1) {
      // Checked whole here, so that no rank finds a bad sample in its share alone.
      LAMINAR_RETURN_IF_ERROR(trainer_->ValidateSamples(summary.samples), step_name);
      proto::TrajectoryBatch whole;
      for (const proto::Trajectory& t : *batch) *whole.add_trajectories() = t;
      LAMINAR_RETURN_IF_ERROR(TellRanks(kTrainBatch, whole.SerializeAsString()), step_name);
      LAMINAR_ASSIGN_OR_RETURN(
          share,
          ShareOfBatch(summary.samples, 0, trainer_->world_size(),
                       options_.trainer.mini_batch_size * trainer_->world_size()),
          step_name);
    }
    LAMINAR_ASSIGN_OR_RETURN(StepMetrics trained, trainer_->Step(share), step_name);
    const auto train_end = Clock::now();
    const double train_s = Seconds(train_end - train_start);
    m.insert(trained.begin(), trained.end());
    LAMINAR_RETURN_IF_ERROR(Publish(&m));
    const auto now = Clock::now();
    AddBatchMetrics(summary, m);
    const double step_s = Seconds(now - last_update);
    // gen: how long the trainer waited for the batch (rollouts generate while it trains);
    // reward: the rollouts' time scoring the batch's samples, summed.
    m["timing_s/gen"] = Seconds(train_start - wait_start);
    m["timing_s/reward"] = summary.reward_s;
    m["perf/total_num_tokens"] = static_cast<double>(summary.tokens);
    m["timing_s/step"] = step_s;
    m["trainer/idle_ratio"] = step_s > 0 ? Seconds(train_start - wait_start) / step_s : 0;
    // Laminar's headline metric: tokens in the trained batch per second between actor updates.
    m["perf/throughput"] = step_s > 0 ? static_cast<double>(summary.tokens) / step_s : 0;
    m["training/global_step"] = static_cast<double>(trainer_->global_step());
    m["training/version"] = static_cast<double>(trainer_->policy_version());
    last_update = now;
    AccountStep(step_s, train_s, Seconds(now - train_end),
                trainer_->skipped_steps() > skipped_steps_before, m);
    LAMINAR_RETURN_IF_ERROR(WriteStepMetrics(m));
    if (on_step) on_step(m);
    if (std::exchange(resumed_, false)) RecordLostRanksRecovered();
    // After a save that failed for want of space, every step tries again: a disk freed soon
    // costs one step of progress at risk, not save_every.
    if (options_.save_every > 0 &&
        (trainer_->global_step() % options_.save_every == 0 || disk_full_since_unix_s_ != 0)) {
      LAMINAR_RETURN_IF_ERROR(SavePeriodicCheckpoint());
    }
  }
  LAMINAR_RETURN_IF_ERROR(SaveCheckpoint());
  RecordDiskRecovered();  // the final save ends a full disk too
  return OkStatus();
}

namespace {

// One mini-batch's share (ShareOfBatch): `samples` whole groups.
StatusOr<std::vector<trainer::TrainSample>> ShareOfGroups(
    std::span<const trainer::TrainSample> samples, int rank, int world_size) {
  struct Group {
    size_t begin = 0, end = 0;
    int64_t tokens = 0;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < samples.size(); ++i) {
    if (groups.empty() || samples[i].group_id != samples[groups.back().begin].group_id) {
      groups.push_back({i, i, 0});
    }
    groups.back().end = i + 1;
    groups.back().tokens +=
        static_cast<int64_t>(samples[i].prompt_ids.size() + samples[i].response_ids.size());
  }
  if (groups.size() % static_cast<size_t>(world_size) != 0) {
    return InvalidArgumentError(std::to_string(groups.size()) +
                                " groups do not split evenly over " + std::to_string(world_size) +
                                " ranks");
  }
  const size_t per_rank = groups.size() / static_cast<size_t>(world_size);
  std::vector<size_t> order(groups.size());
  for (size_t g = 0; g < order.size(); ++g) order[g] = g;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return groups[x].tokens > groups[y].tokens; });
  std::vector<int64_t> tokens(static_cast<size_t>(world_size), 0);
  std::vector<size_t> count(static_cast<size_t>(world_size), 0);
  std::vector<int> owner(groups.size(), 0);
  for (size_t g : order) {
    int best = -1;
    for (int r = 0; r < world_size; ++r) {
      const auto ur = static_cast<size_t>(r);
      if (count[ur] < per_rank && (best < 0 || tokens[ur] < tokens[static_cast<size_t>(best)])) {
        best = r;
      }
    }
    owner[g] = best;
    tokens[static_cast<size_t>(best)] += groups[g].tokens;
    ++count[static_cast<size_t>(best)];
  }
  std::vector<trainer::TrainSample> share;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (owner[g] != rank) continue;
    share.insert(share.end(), samples.begin() + static_cast<std::ptrdiff_t>(groups[g].begin),
                 samples.begin() + static_cast<std::ptrdiff_t>(groups[g].end));
  }
  return share;
}

}  // namespace

StatusOr<std::vector<trainer::TrainSample>> ShareOfBatch(
    const std::vector<trainer::TrainSample>& samples, int rank, int world_size,
    int64_t mini_batch_samples) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return InvalidArgumentError("rank " + std::to_string(rank) + " is not in [0, " +
                                std::to_string(world_size) + ")");
  }
  const size_t mb = mini_batch_samples > 0 ? static_cast<size_t>(mini_batch_samples)
                                           : std::max<size_t>(samples.size(), 1);
  std::vector<trainer::TrainSample> share;
  for (size_t begin = 0; begin < samples.size(); begin += mb) {
    const size_t end = std::min(samples.size(), begin + mb);
    if (end < samples.size() && samples[end].group_id == samples[end - 1].group_id) {
      return InvalidArgumentError("mini-batch of samples " + std::to_string(begin) + ".." +
                                  std::to_string(end - 1) + " ends inside a group");
    }
    LAMINAR_ASSIGN_OR_RETURN(
        std::vector<trainer::TrainSample> part,
        ShareOfGroups(std::span<const trainer::TrainSample>(samples).subspan(begin, end - begin),
                      rank, world_size),
        "mini-batch of samples " + std::to_string(begin) + ".." + std::to_string(end - 1));
    share.insert(share.end(), std::make_move_iterator(part.begin()),
                 std::make_move_iterator(part.end()));
  }
  return share;
}

Status RunActorRank(const model::ModelConfig& config, const model::WeightStore& weights,
                    const ActorOptions& options, bool resume,
                    const std::function<void()>& on_joined) {
  const int rank = options.collective.rank;
  const std::string me = "actor rank " + std::to_string(rank);
  if (rank < 1 || rank >= options.collective.world_size) {
    return InvalidArgumentError(me + ": ranks other than 0 are 1.." +
                                std::to_string(options.collective.world_size - 1));
  }
  if (resume && options.checkpoint_dir.empty()) {
    return InvalidArgumentError(me + ": resume needs a checkpoint_dir");
  }
  LAMINAR_ASSIGN_OR_RETURN(auto collective, trainer::CreateCollective(options.collective), me);
  LAMINAR_ASSIGN_OR_RETURN(
      auto trainer,
      trainer::Trainer::Create(config, weights, options.trainer, std::move(collective)), me);
  if (resume) {
    LAMINAR_RETURN_IF_ERROR(trainer->LoadCheckpoint(options.checkpoint_dir).status(), me);
  }
  LAMINAR_RETURN_IF_ERROR(trainer->CheckRanksAgree(), me);
  LAMINAR_LOG(INFO, ACTOR) << me << " of " << options.collective.world_size << " joined at step "
                           << trainer->global_step();
  if (on_joined) on_joined();
  while (true) {
    uint32_t kind = 0;
    std::string payload;
    LAMINAR_RETURN_IF_ERROR(BroadcastMessage(trainer->collective(), &kind, &payload),
                            me + ": waiting for rank 0");
    if (kind == kStop) break;
    if (kind == kStillHere) continue;
    if (kind == kSave) {
      LAMINAR_RETURN_IF_ERROR(
          trainer
              ->SaveCheckpoint(options.checkpoint_dir, nlohmann::json::object(), options.keep_last)
              .status(),
          me);
      continue;
    }
    if (kind == kExport) {
      LAMINAR_RETURN_IF_ERROR(trainer->ExportHuggingFace(options.export_dir, {}, DType::kF32,
                                                         /*overwrite=*/true),
                              me);
      continue;
    }
    if (kind != kTrainBatch) {
      return DataLossError(me + ": rank 0 sent message kind " + std::to_string(kind));
    }
    proto::TrajectoryBatch batch;
    if (!batch.ParseFromString(payload)) {
      return DataLossError(me + ": rank 0's batch does not parse");
    }
    const std::vector<proto::Trajectory> trajectories(batch.trajectories().begin(),
                                                      batch.trajectories().end());
    const BatchSummary summary = Summarize(trajectories, trainer->policy_version());
    const std::string step = me + " step " + std::to_string(trainer->global_step() + 1);
    LAMINAR_ASSIGN_OR_RETURN(
        auto share,
        ShareOfBatch(summary.samples, rank, options.collective.world_size,
                     options.trainer.mini_batch_size * options.collective.world_size),
        step);
    LAMINAR_RETURN_IF_ERROR(trainer->Step(share).status(), step);
    LAMINAR_LOG(INFO, ACTOR) << step << ": trained " << share.size() << " of "
                             << summary.samples.size() << " samples";
  }
  LAMINAR_LOG(INFO, ACTOR) << me << ": rank 0 ended the run at step " << trainer->global_step();
  return OkStatus();
}

}  // namespace laminar::actor
