// Python reward plug-ins: a user's `compute_score` in a .py file, called in a pool of long-lived
// Python worker processes with a per-call deadline, so that a reward that hangs, raises or crashes
// costs one sample's score and never the run.
#pragma once

#include <string>

#include "reward/reward.h"
#include "reward/worker_pool.h"

namespace laminar::reward {

struct PythonRewardOptions {
  std::string path;                        // the .py file; relative: to the working directory
  std::string function = "compute_score";  // a callable the file defines at module level
  int num_workers = 2;                     // Python processes, each serving one call at a time
  double timeout_s = 10;                   // per call, from sending the request to the reply
  double startup_timeout_s = 60;           // for a worker to import the file (heavy imports)
  std::string python = "python3";          // the interpreter (looked up in PATH without a '/')
  RewardSandbox sandbox{};  // each worker's limits and network (reward/worker_pool.h)
};

// A reward that calls `function` in the Python file `path` with verl's signature
// (verl/utils/reward_score/__init__.py default_compute_score; verl docs, "Implement Reward
// Function for Dataset" / custom_reward_function):
//
//   def compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float | dict
//
// called by keyword, as verl's reward managers do. The arguments are str (invalid UTF-8 in a
// response is replaced by U+FFFD); ground_truth is the dataset's text (JSON text for structured
// answers such as countdown's: json.loads it); extra_info is the row's JSON object decoded (a
// dict), or None. The result is a number (int, float, bool, numpy scalar: anything with __float__
// but str), or a dict holding "score" and other entries: the numeric, finite ones become
// RewardResult::extra (e.g. {"score": 1.0, "acc": True} gives extra {"acc": 1}); others are
// dropped.
//
// Mechanism: `options.num_workers` processes run `python -B -c <driver> path function pid` (pid:
// the owner's); the driver imports the file with importlib.util.spec_from_file_location (the
// file's folder first on sys.path, so it may import its neighbours), then serves one request at a
// time: a JSON line on stdin in, a JSON line out on a private copy of stdout. The user's prints
// (sys.stdout, and fd 1 itself) go to the worker's stderr, which is the caller's stderr, so they
// never corrupt replies. Workers ignore SIGINT: the owner decides when they stop. A worker whose
// owner is gone (killed or crashed, or one started while it shut down) exits within about 0.2 s,
// also in the middle of a call: a thread of the driver watches its parent. That thread needs
// Python's GIL, so user code holding it in C (an extension, a backtracking regex) delays the exit
// until the call's CPU limit (sandbox.cpu_time_s) ends it.
//
// Creation starts one worker and waits for it to import the file, so a bad file fails here,
// before anything runs; the other workers start at their first call. Errors at creation:
// InvalidArgument naming `path` when the file does not exist, when importing it raises (a
// SyntaxError with Python's message, file and line; an ImportError; ...), when it has no callable
// `function` (naming the callables it has), or for options out of range (num_workers < 1,
// timeout_s <= 0); Unavailable when `options.python` cannot start; DeadlineExceeded when the
// import takes longer than startup_timeout_s.
//
// Each call takes an idle worker (waiting when all are busy), so the reward is thread-safe and at
// most num_workers calls run at once. Errors of a call, after which the pool keeps working:
//   DeadlineExceeded  no reply within timeout_s: the worker is killed (SIGKILL) and reaped, and a
//                     fresh one starts with a later call.
//   InvalidArgument   the function raised (the message holds the exception's type and text and the
//                     user's file:line where it was raised), or returned no number, a non-finite
//                     score, or a dict without "score".
//   Unavailable       the worker died during the call (os._exit, a crash; the exit code is named)
//                     or could not be restarted; the next call starts a fresh one.
// Every message starts "python reward <path>:<function>". Destroying the last copy of the RewardFn
// closes every worker's stdin, waits briefly for it to exit, kills any that does not, and reaps
// all: no process is left behind. Each worker leads a process group of its own, killed whole when
// the worker stops or its owner dies, so processes the user's code starts go with it.
//
// Sandbox (options.sandbox): each worker runs without core dumps, with its CPU time per call,
// address space and open files limited, and without network unless sandbox.network is set; memory
// past the limit raises MemoryError in the user's code.
StatusOr<RewardFn> MakePythonReward(const PythonRewardOptions& options);

}  // namespace laminar::reward
