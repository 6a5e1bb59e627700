// Trajectories for `laminar train` as JSON Lines, one sample per line:
//   {"prompt_ids": [int], "response_ids": [int], "logprobs": [float], "score": float,
//    "group": int|string}
// `ids` is accepted for `response_ids` (what `laminar generate --json` prints); "logprobs" (the
// rollout's behaviour logprobs) may be absent; "score" defaults to 0; "group" defaults to the line
// number (each sample its own group). Lines with the same group form one GRPO group, groups in
// order of first appearance.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "trainer/trainer.h"

namespace laminar::trainer {

// Errors name the file and line: unreadable JSON, a field of the wrong type, an empty file.
StatusOr<std::vector<std::vector<TrainSample>>> ReadSampleGroups(const std::string& path);

}  // namespace laminar::trainer
