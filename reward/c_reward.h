// C ABI reward plug-ins: a shared library implementing reward/laminar_reward_plugin.h, loaded with
// dlopen and called in the caller's thread.
#pragma once

#include <string>

#include "reward/reward.h"

namespace laminar::reward {

struct CRewardOptions {
  std::string path;                              // the .so; relative: to the working directory
  std::string symbol = "laminar_compute_score";  // a laminar_compute_score_fn it exports
};

// A reward that calls `symbol` in the shared library `path` (the ABI and its rules are in
// reward/laminar_reward_plugin.h). The library is loaded with dlopen(RTLD_NOW | RTLD_LOCAL) and
// unloaded when the last copy of the RewardFn is destroyed. Thread-safe as far as the plug-in is
// reentrant, as the ABI requires; a plug-in has no deadline and shares the process (use a Python
// reward for code that may hang or crash).
// Errors at creation: InvalidArgument naming `path` when the file does not exist or dlopen fails
// (with dlerror()'s text), when it does not export laminar_reward_abi_version or `symbol`, or when
// its ABI version is not LAMINAR_REWARD_ABI_VERSION (both versions are named).
// Errors of a call: InvalidArgument "c reward <path>:<symbol>: returned <rc>: <its message>" when
// the plug-in returns nonzero, or when its score is not finite.
StatusOr<RewardFn> MakeCReward(const CRewardOptions& options);

}  // namespace laminar::reward
