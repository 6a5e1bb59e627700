// Sandboxed reward worker processes: the pool that Python and C ABI reward plug-ins run in, so that
// a reward that hangs, crashes, leaks or reaches for the network costs one sample's score and
// never the run.
//
// A worker is a long-lived process started as `argv... <parent pid> <cpu_time_s> <memory_mb>
// <max_open_files> <network: 0 or 1> <cgroup dir or ->`, leading a process group of its own. It
// sandboxes itself before it loads the user's code: it joins the pids cgroup the pool made for it
// (core/pids_cgroup.h: at most max_processes tasks; "-": none); no core dumps; a network namespace
// of its own unless network is 1 (where the kernel refuses one it keeps the host's network and
// says why); RLIMIT_AS and RLIMIT_NOFILE; before each call RLIMIT_CPU at what it has used plus
// cpu_time_s (past it the kernel kills it with SIGXCPU). Once its parent is gone it kills what is
// in its cgroup and its own process group. Protocol, one JSON object per line: first
// {"ready": true, "network": "isolated" | "host" | "host: <why>", "processes": "limited" |
// "unlimited" | "unlimited: <why>"} or {"error": "..."} (then it exits); then per request line
// (the reward's `encode`) one reply {"score": x, "extra": {...}} or {"error": "..."}. It exits at
// the end of stdin.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reward/reward.h"

namespace laminar::reward {

// The limits each worker sets on itself (0: no limit): CPU seconds per call (RLIMIT_CPU, set before
// each call to what the worker used plus this; past it the kernel kills it and the call is a
// timeout), address space in MiB (RLIMIT_AS: allocations past it fail in the user's code), open
// files (RLIMIT_NOFILE), processes and threads of the worker and all it starts (a pids cgroup per
// worker: forks past it fail, and the worker's stop kills every member, also those that left its
// process group; where no cgroup can be made, there is no bound and a warning says why); core dumps
// are always off. network: false runs each worker in a network namespace of its own (no network
// at all; where the kernel refuses one, the host's network is kept and a warning says why); true
// keeps the host's.
struct RewardSandbox {
  double cpu_time_s = 30;
  int64_t memory_mb = 4096;
  int64_t max_open_files = 256;
  int64_t max_processes = 128;
  bool network = false;
};

struct RewardWorkerOptions {
  // Starts every message: "python reward /abs/r.py:compute_score".
  std::string tag;
  // The worker's command (looked up in PATH without a '/'); the pool appends the sandbox's
  // arguments above.
  std::vector<std::string> argv;
  // One request line (no newline) for `in`.
  std::function<std::string(const RewardInput& in)> encode;
  // Said when a worker stops before it is ready, e.g. "is 'python3' a Python 3 interpreter?".
  std::string start_hint;
  int num_workers = 2;            // processes, each serving one call at a time
  double timeout_s = 10;          // per call, from sending the request to the reply
  double startup_timeout_s = 60;  // for a worker to load the user's code
  RewardSandbox sandbox{};
};

// A reward served by `options.num_workers` worker processes. Creation checks the options
// (InvalidArgument naming the bad one) and starts one worker, so that bad user code fails here:
// its {"error"} line is InvalidArgument "<tag>: <error>"; Unavailable when the worker cannot start
// or stops before it is ready; DeadlineExceeded past startup_timeout_s. The other workers start at
// their first call. Each call takes an idle worker (waiting when all are busy), so the reward is
// thread-safe. Errors of a call, after which the pool keeps working:
//   DeadlineExceeded  no reply within timeout_s, or more than cpu_time_s of CPU: the worker is
//                     killed with its process group and reaped; a fresh one starts with a later
//                     call.
//   InvalidArgument   the worker's {"error"} reply (the user's code failed or gave no number).
//   Unavailable       the worker died during the call (its exit code or signal is named) or could
//                     not be restarted.
//   Internal          the worker's reply is not the protocol's.
// Destroying the last copy of the RewardFn closes every worker's stdin, waits briefly for it to
// exit, kills any that does not, reaps all and kills what is left of their process groups.
StatusOr<RewardFn> MakeRewardWorkers(RewardWorkerOptions options);

}  // namespace laminar::reward
