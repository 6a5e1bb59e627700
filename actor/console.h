// What the actor shows a person on the terminal: one line per training step, and a one-line
// progress bar while the rollouts generate its batch and while it trains. Plain functions over the
// step's metrics, so the format is tested without a run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace laminar::actor {

// One training step's result: the metrics written to metrics_path (verl names plus
// staleness/*, timing_s/*, perf/throughput, trainer/idle_ratio, relay/publish_stall_s).
using StepMetrics = std::map<std::string, double>;

// The step's console line, without a newline, e.g.
//   "[actor] step 12 v12  reward 0.625  len 143.2  staleness 0.75  1834 tok/s  elapsed 0:03:07"
// from training/global_step, training/version, critic/score/mean, response_length/mean,
// staleness/mean and perf/throughput (a missing metric prints "-"); `elapsed_s` is the run's
// wall time so far, in seconds.
std::string ConsoleLine(const StepMetrics& metrics, double elapsed_s);

// Where the actor is within a step, for the progress bars: the actor's own on its terminal, and
// `laminar run`'s, which reads it from the file ActorOptions::progress_path.
struct StepProgress {
  int64_t step = 0;            // the step being assembled or trained: global_step + 1
  std::string phase;           // "generating" (waiting for its batch) or "training"
  int64_t samples = 0;         // generating: finished samples toward the batch
  int64_t samples_needed = 0;  // generating: groups_per_step * n (0 while unknown)
  double since_unix_s = 0;     // when the phase began, seconds since the Unix epoch
};

// One line, without a newline or prefix, e.g.
//   "step 13  generating [#########-----------] 19/32 samples  4.2 s"
//   "step 13  training  3.1 s"
// `now_unix_s` gives the phase's elapsed time; `width` cells of bar (samples clamped to
// [0, samples_needed]; samples_needed < 1 shows an empty bar).
std::string ProgressLine(const StepProgress& progress, double now_unix_s, int width = 24);

// The progress file's contents (one JSON object) and back. ParseProgress: nullopt for text that is
// not such an object (a reader may race a writer that replaces the file; it then tries again).
std::string ProgressJson(const StepProgress& progress);
std::optional<StepProgress> ParseProgress(std::string_view json);

// Seconds since the Unix epoch, now.
double UnixNow();

}  // namespace laminar::actor
