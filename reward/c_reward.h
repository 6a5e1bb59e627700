// C ABI reward plug-ins: a shared library implementing reward/laminar_reward_plugin.h, run in
// sandboxed worker processes (reward/worker_pool.h) by laminar-reward-host.
#pragma once

#include <string>

#include "reward/reward.h"
#include "reward/worker_pool.h"

namespace laminar::reward {

struct CRewardOptions {
  std::string path;                              // the .so; relative: to the working directory
  std::string symbol = "laminar_compute_score";  // a laminar_compute_score_fn it exports
  int num_workers = 2;                           // worker processes, each one call at a time
  double timeout_s = 10;                         // per call, from sending it to the reply
  double startup_timeout_s = 60;                 // for a worker to load the library
  RewardSandbox sandbox{};                       // each worker's limits and network
};

// A reward that calls `symbol` in the shared library `path` (the ABI and its rules are in
// reward/laminar_reward_plugin.h) inside `num_workers` worker processes: each runs
// laminar-reward-host, which sandboxes itself, loads the library with dlopen(RTLD_NOW |
// RTLD_LOCAL) and calls the plug-in with the input's bytes as they are (NUL-terminated copies with
// their lengths). A plug-in that hangs, crashes, runs out of memory or CPU costs that sample only
// (worker_pool.h's errors). The host is $LAMINAR_REWARD_HOST, else laminar-reward-host beside the
// running executable, else the one in the build tree.
// Errors at creation: InvalidArgument naming `path` when the file does not exist or dlopen fails
// (with dlerror()'s text), when it does not export laminar_reward_abi_version or `symbol`, or when
// its ABI version is not LAMINAR_REWARD_ABI_VERSION (both versions are named); the options'.
// Errors of a call: InvalidArgument "c reward <path>:<symbol>: returned <rc>: <its message>" when
// the plug-in returns nonzero, or when its score is not finite; the pool's (timeouts, crashes).
StatusOr<RewardFn> MakeCReward(const CRewardOptions& options);

}  // namespace laminar::reward
