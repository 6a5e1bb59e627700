// The actor (docs/architecture.md): takes B complete prompt groups from the manager's
// experience buffer (oldest first), trains on them with the Trainer (advantages, pi_old
// recomputation, mini-batch updates), bumps the policy version, publishes it to the master relay
// and tells the manager, logs verl-named metrics and checkpoints every K steps together with the
// manager's snapshot, so a resumed run skips and repeats no prompt (docs/architecture.md).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actor/console.h"
#include "actor/tensorboard.h"
#include "core/fault_log.h"
#include "core/status.h"
#include "core/zmq_transport.h"
#include "model/model_config.h"
#include "model/weight_store.h"
#include "proto/control.pb.h"
#include "relay/publisher.h"
#include "trainer/collective.h"
#include "trainer/trainer.h"

namespace laminar::actor {

struct ActorOptions {
  std::string id = "actor";
  std::string manager;          // the manager's control endpoint
  std::string master_relay;     // the master relay's control endpoint
  int32_t groups_per_step = 4;  // B: prompt groups per training step (>= 1)
  int64_t max_steps = 0;        // stop after this global step (0: when the data runs out)
  // Groups older than this many versions when taken are dropped (drop_stale) or kept and
  // counted; nullopt: no bound (Laminar's default, docs/architecture.md).
  std::optional<int64_t> max_staleness;
  bool drop_stale = true;
  trainer::TrainerConfig trainer;  // mini_batch_size per rank
  // Data-parallel ranks (actor.world_size, actor.rendezvous): rank 0 is the Actor, which takes
  // each batch and tells the other ranks (RunActorRank) over the collective; every rank trains on
  // its share (ShareOfBatch) and the gradients are all-reduced. world_size 1: no collective.
  trainer::CollectiveOptions collective;
  // rollout.speculative.drafter draft_model: the draft model's weights (plain dtypes), published
  // with every version under relay::kDraftModelPrefix so that rollouts, however late they start,
  // pull them from their relay like the policy's. Null: none.
  std::shared_ptr<const model::WeightStore> draft_model_weights;
  std::string checkpoint_dir;  // "" = no checkpoints
  int64_t save_every = 0;      // steps between checkpoints (0: only at the end)
  int keep_last = 2;
  // With each checkpoint, the policy as a Hugging Face folder here (replaced each time; "" =
  // none), with these tokenizer files (model::ExportHfTokenizerFiles), so `laminar generate` and
  // transformers load it.
  std::string export_dir;
  std::map<std::string, std::string> export_tokenizer_files;
  std::string metrics_path;  // JSONL, one line per step ("" = none)
  // TensorBoard event files (actor/tensorboard.h) in this folder, one event per step with the
  // metrics_path line's metrics ("" = none).
  std::string tensorboard_dir;
  // While waiting for a batch, a one-line bar of the samples finished toward it, redrawn with '\r'
  // on stderr, only when stderr is a terminal.
  bool progress_bar = true;
  // Where the actor is within its step (console.h StepProgress as JSON), replaced whenever it
  // changes ("" = none): what `laminar run` draws its progress bar from.
  std::string progress_path;
  // JSONL, one line per trained sample ("" = none): step, actor version, prompt_id,
  // sample_index, version, rollout_id, reward, response_length, finish_reason.
  std::string trajectory_log;
  // faults.jsonl (core/fault_log.h): skipped non-finite updates, steps far slower than the median
  // of the ones before (stragglers), checkpoints that failed for want of disk space (training
  // goes on; the next step tries again).
  FaultLog faults;
  // When the run began (seconds since the epoch; NaN: when Run starts): perf/ettr, the effective
  // training time ratio, is the time of the kept steps over the wall time since then. A resumed
  // actor takes both from its checkpoint instead, so the ratio spans every invocation.
  double run_start_unix_s = NAN;
  int poll_ms = 20;  // between TakeBatch calls while the buffer is short
  int request_timeout_ms = 5000;
  int request_attempts = 3;
  // Status InvalidArgument naming the field.
  Status Validate() const;
};

// The environment variable by which `laminar run` tells its roles when the run began (seconds
// since the epoch), for ActorOptions::run_start_unix_s.
inline constexpr char kRunStartEnv[] = "LAMINAR_RUN_START_UNIX";

// Drops the lines of the JSONL file `path` whose number `key` is above `step`: the steps a run
// trained after its newest checkpoint, which its resumption trains again, so that no step appears
// twice in metrics.jsonl or the trajectory log. Atomic (a temporary file renamed over it); a
// missing file is fine. Errors name the file.
Status DropStepsAfter(const std::string& path, const std::string& key, int64_t step);

// The samples rank `rank` of `world_size` trains on: whole groups (runs of one group_id), as
// many on every rank, balanced by tokens (the longest group first, each to the rank with the
// fewest tokens among those still short of their count), in the batch's order. With
// `mini_batch_samples` > 0, each run of that many samples (one rank's mini-batch, over all ranks)
// is split so, and the rank's shares follow one another: its m-th mini-batch is its part of the
// m-th one. Every rank computes the same split. Errors: InvalidArgument for a rank outside
// [0, world_size), a mini-batch that ends inside a group or whose groups do not split evenly.
StatusOr<std::vector<trainer::TrainSample>> ShareOfBatch(
    const std::vector<trainer::TrainSample>& samples, int rank, int world_size,
    int64_t mini_batch_samples = 0);

// Rank options.collective.rank >= 1 of the actor: joins the ranks (blocking until rank 0 and the
// others come, within the rendezvous timeout), loads the newest checkpoint when `resume`, then
// trains on its share of each batch that rank 0 sends and saves with it, until rank 0 says stop.
// Stop signals do not end it: rank 0 does, or a collective's error (rank 0 gone, no word from it
// within the collective timeout). Errors: the collective's and the trainer's, naming the rank.
// `on_joined` (optional) runs once the ranks have met and the checkpoint is loaded.
Status RunActorRank(const model::ModelConfig& config, const model::WeightStore& weights,
                    const ActorOptions& options, bool resume,
                    const std::function<void()>& on_joined = nullptr);

// StepMetrics (one training step's result) and StepProgress are in actor/console.h.

// Not thread-safe: one thread calls Run.
class Actor {
 public:
  // Creates the trainer from `weights` (version 0), or from the newest checkpoint in
  // options.checkpoint_dir when `resume` (restoring the manager's snapshot too), and connects the
  // publisher to the master relay. Errors: invalid options or trainer config (naming the field);
  // Unavailable when the master relay or the manager does not answer; a checkpoint's load error;
  // FailedPrecondition when the manager refuses the snapshot (it already handed out work).
  static StatusOr<std::unique_ptr<Actor>> Create(const model::ModelConfig& config,
                                                 const model::WeightStore& weights,
                                                 ActorOptions options, bool resume);

  // Publishes the current version, then trains until max_steps, the data runs out (the manager
  // reports it exhausted and the buffer empty), or `stop` is set; saves a checkpoint at the end
  // when checkpoint_dir is set. `on_step` (optional) sees each step's metrics.
  Status Run(const std::atomic<bool>& stop,
             const std::function<void(const StepMetrics&)>& on_step = nullptr);

  int64_t global_step() const { return trainer_->global_step(); }
  int64_t policy_version() const { return trainer_->policy_version(); }
  // Whether the data-parallel ranks' collective failed (a rank died, or its host or link did):
  // the ranks cannot go on together, and the run continues only by starting every rank again
  // from its last checkpoint.
  bool lost_a_rank() const { return !trainer_->collective().error().ok(); }

 private:
  explicit Actor(ActorOptions options) : options_(std::move(options)) {}
  StatusOr<proto::ManagerReply> Call(proto::ManagerRequest request);
  Status Publish(StepMetrics* metrics);
  // Waits for B groups; nullopt when stopped or the data ran out.
  StatusOr<std::optional<std::vector<proto::Trajectory>>> TakeBatch(const std::atomic<bool>& stop,
                                                                    StepMetrics* metrics);
  // To the other data-parallel ranks (none: nothing): a message RunActorRank acts on.
  Status TellRanks(uint32_t kind, const std::string& payload = "");
  Status SaveCheckpoint();
  // A periodic checkpoint: SaveCheckpoint, where a full disk is recorded as a fault and training
  // goes on (nothing saved earlier is touched; every step tries again until a save succeeds).
  Status SavePeriodicCheckpoint();
  // After a save succeeded: a full disk seen before is recorded in faults.jsonl, recovered now.
  void RecordDiskRecovered();
  // Run's steps; Run records a lost rank when they end so.
  Status RunSteps(const std::atomic<bool>& stop,
                  const std::function<void(const StepMetrics&)>& on_step);
  // A lost rank (lost_a_rank) in faults.jsonl, detected now, with the collective's error.
  void RecordLostRank();
  // A resumed actor's first step: the lost-rank faults that an earlier invocation recorded and
  // nothing recovered yet, recorded as recovered now (the run trains again).
  void RecordLostRanksRecovered();
  // The fault records and perf/ettr of one step that took `step_s` (of which `train_s` training,
  // which ended `since_trained_s` ago; the rest waiting for the batch and publishing) and skipped
  // its update or not.
  void AccountStep(double step_s, double train_s, double since_trained_s, bool skipped,
                   StepMetrics& m);
  // Records `progress` in progress_path when it changed, and draws the generating phase's bar on
  // a terminal.
  void ShowProgress(const StepProgress& progress);
  // Erases the bar from the terminal, if it is there.
  void ClearProgressBar();
  // Opens the metrics, trajectory and TensorBoard outputs the options name (Run). Errors name the
  // file.
  Status OpenRunOutputs();
  // One step's metrics to metrics_path and TensorBoard.
  Status WriteStepMetrics(const StepMetrics& m);

  ActorOptions options_;
  std::unique_ptr<trainer::Trainer> trainer_;
  std::unique_ptr<relay::Publisher> publisher_;
  std::unique_ptr<ZmqRequestClient> manager_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // set by Run when tensorboard_dir is
  std::ofstream metrics_file_;                      // metrics_path, open during Run
  std::ofstream trajectory_file_;                   // trajectory_log, open during Run
  uint64_t seq_ = 0;
  int64_t stale_groups_ = 0;  // dropped or kept-and-counted, since start
  int64_t last_saved_step_ = -1;
  double kept_s_ = 0;                  // time of the steps whose update was kept
  std::vector<double> step_times_;     // of this process's last steps, for straggler detection
  double disk_full_since_unix_s_ = 0;  // a periodic checkpoint failed for space (0: none)
  bool resumed_ = false;               // Create loaded a checkpoint
  std::optional<StepProgress> progress_written_;  // what progress_path holds
  bool bar_on_screen_ = false;
  std::chrono::steady_clock::time_point told_ranks_;  // the last message to the other ranks
};

}  // namespace laminar::actor
