// The reward a recipe's reward.* keys name.
#pragma once

#include "core/config.h"
#include "core/status.h"
#include "reward/reward.h"

namespace laminar::reward {

// The recipe's reward: reward.components (a weighted sum), reward.python, reward.c, or the
// built-in reward.name with reward.params. Errors: InvalidArgument naming the key for a bad spec
// or more than one of them set; NotFound listing the built-ins for an unknown name; a plug-in's
// load error (a Python file that does not compile, a missing function or symbol).
StatusOr<RewardFn> RewardOf(const Config& recipe);

}  // namespace laminar::reward
