// What the actor shows a person on the terminal: one line per training step, and a one-line
// progress bar while it waits for the manager to buffer a batch. Plain functions over the step's
// metrics, so the format is tested without a run.
#pragma once

#include <cstdint>
#include <string>

#include "actor/actor.h"

namespace laminar::actor {

// The step's console line, without a newline, e.g.
//   "[actor] step 12 v12  reward 0.625  len 143.2  staleness 0.75  1834 tok/s  elapsed 0:03:07"
// from training/global_step, training/version, critic/score/mean, response_length/mean,
// staleness/mean and perf/throughput (a missing metric prints "-"); `elapsed_s` is the run's
// wall time so far, in seconds.
std::string ConsoleLine(const StepMetrics& metrics, double elapsed_s);

// "[actor] waiting for batch [#########-----------]  3/8 groups": `have` of `need` complete prompt
// groups, `width` cells of bar (have is clamped to [0, need]; need < 1 shows an empty bar).
std::string ProgressBar(int64_t have, int64_t need, int width = 24);

}  // namespace laminar::actor
