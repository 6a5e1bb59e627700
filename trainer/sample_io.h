// Trajectories for `laminar train` as JSON Lines, one sample per line:
//   {"prompt_ids": [int], "response_ids": [int], "logprobs": [float], "score": float,
//    "group": int|string}
// `ids` is accepted for `response_ids` (what `laminar generate --json` prints); token ids must be
// JSON integers >= 0; "logprobs" (the rollout's behaviour logprobs) may be absent; "score"
// defaults to 0; without "group" a line is a group of its own. Lines with the same group (same
// JSON value: "7" and 7 differ) form one GRPO group, groups in order of first appearance. Each
// sample's `source` is "path:line".
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "trainer/trainer.h"

namespace laminar::trainer {

// Errors name the file and line: unreadable JSON, a field of the wrong type, an empty file.
StatusOr<std::vector<std::vector<TrainSample>>> ReadSampleGroups(const std::string& path);

}  // namespace laminar::trainer
