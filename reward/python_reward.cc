// Python reward plug-ins: a pool of Python worker processes running a small driver that imports the
// user's file and answers one JSON request line with one JSON reply line; see python_reward.h.
#include "reward/python_reward.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/host.h"
#include "core/logging.h"
#include "core/mutex.h"
#include "core/process.h"

namespace laminar::reward {
namespace {

// The worker's driver, run with `python -B -c kDriver <path> <function> <parent pid> <cpu_time_s>
// <memory_mb> <max_open_files> <network: 0 or 1>` (-B: no __pycache__ next to the user's file), as
// the leader of a process group of its own. Before it imports the user's file it sandboxes itself:
// no core dumps, a network namespace of its own unless network is 1 (no interface but a loopback
// that is down; where the kernel refuses, the host's network is kept and the ready line says why),
// and the address-space and open-file limits; before each call it sets the CPU limit to what it
// has used plus cpu_time_s (past it the kernel sends SIGXCPU, which kills it). A thread of its own
// kills the worker's group once its parent is gone (the worker was re-parented), also in the
// middle of a call: a rollout killed or crashing while a reward runs, or one that started a worker
// while shutting down, leaves nothing behind.
// Protocol, one JSON object per line (json.dumps escapes newlines, and writes ASCII): first
// {"ready": true, "network": "isolated" | "host" | "host: <why>"} or {"error": "..."} (then it
// exits); then per request line
// {"data_source", "solution_str", "ground_truth", "extra_info": JSON text or ""} one reply
// {"score": x, "extra": {...}} or {"error": "..."}. It exits at the end of stdin.
constexpr const char* kDriver = R"py(
import ctypes, importlib.util, inspect, json, math, numbers, os, resource, signal, sys, threading
import time, traceback

def describe(exc):
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    if frames and not isinstance(exc, SyntaxError):
        f = frames[-1]
        text += " (at %s:%d in %s)" % (f.filename, f.lineno, f.name)
    return text

def number(v):
    if isinstance(v, (str, bytes)) or not (isinstance(v, numbers.Real) or hasattr(v, "__float__")):
        return None
    try:
        return float(v)
    except Exception:
        return None

def to_reply(result):
    extra = {}
    score = result
    if isinstance(result, dict):
        if "score" not in result:
            return {"error": "returned a dict without a 'score' key (keys: %s)"
                             % ", ".join(map(str, result))}
        score = result["score"]
        for key, value in result.items():
            x = number(value)
            if key != "score" and x is not None and math.isfinite(x):
                extra[str(key)] = x
    x = number(score)
    if x is None:
        return {"error": "returned %s %.80r, not a number or a dict with a 'score'"
                         % (type(score).__name__, score)}
    if not math.isfinite(x):
        return {"error": "returned the score %r, which is not finite" % x}
    return {"score": x, "extra": extra}

def exit_with_parent(parent):
    while os.getppid() == parent:
        time.sleep(0.2)
    os.killpg(0, signal.SIGKILL)  # the worker and whatever the user's code started

def sandbox(memory_mb, open_files, network):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    where = "host"
    if not network:
        libc = ctypes.CDLL(None, use_errno=True)
        clone_newnet, clone_newuser = 0x40000000, 0x10000000
        if libc.unshare(clone_newnet) == 0 or libc.unshare(clone_newuser | clone_newnet) == 0:
            where = "isolated"
        else:
            where = "host: unshare: " + os.strerror(ctypes.get_errno())
    if open_files > 0:
        resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
    if memory_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    return where

def limit_cpu(seconds):
    if seconds > 0:
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(math.ceil(used.ru_utime + used.ru_stime + seconds))
        resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))

def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path, name = sys.argv[1], sys.argv[2]
    cpu_s, memory_mb, open_files = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    network = sandbox(memory_mb, open_files, sys.argv[7] == "1")  # single-threaded: before the watcher
    threading.Thread(target=exit_with_parent, args=(int(sys.argv[3]),), daemon=True).start()
    reply = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    def send(obj):
        reply.write(json.dumps(obj) + "\n")
        reply.flush()
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        spec = importlib.util.spec_from_file_location("laminar_user_reward", path)
        if spec is None or spec.loader is None:
            raise ImportError("not a Python source file (expected a .py file)")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    except BaseException as e:
        send({"error": "importing the file failed: " + describe(e)})
        return
    fn = getattr(module, name, None)
    if not callable(fn):
        have = sorted(k for k, v in vars(module).items() if inspect.isroutine(v)
                      and not k.startswith("_") and getattr(v, "__module__", None) == spec.name)
        send({"error": "the file defines no function '%s' (its functions: %s)"
                       % (name, ", ".join(have) or "none")})
        return
    send({"ready": True, "network": network})
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
            extra_info = json.loads(req["extra_info"]) if req["extra_info"] else None
            limit_cpu(cpu_s)
            result = fn(data_source=req["data_source"], solution_str=req["solution_str"],
                        ground_truth=req["ground_truth"], extra_info=extra_info)
            out = to_reply(result)
        except BaseException as e:
            out = {"error": describe(e)}
        send(out)

main()
)py";

int ToMs(double seconds) { return static_cast<int>(std::ceil(seconds * 1000)); }

// The pool behind one Python reward. Thread-safe: `mu_` guards `idle_`; a worker's Process is used
// only by the thread that took its index off `idle_`.
class PythonWorkerPool {
 public:
  explicit PythonWorkerPool(PythonRewardOptions options)
      : options_(std::move(options)),
        tag_("python reward " + options_.path + ":" + options_.function),
        workers_(static_cast<size_t>(options_.num_workers)) {
    for (int i = options_.num_workers - 1; i >= 0; --i) idle_.push_back(i);
  }
  PythonWorkerPool(const PythonWorkerPool&) = delete;
  PythonWorkerPool& operator=(const PythonWorkerPool&) = delete;

  ~PythonWorkerPool() {
    // End of stdin first for all, so that they exit together; then reap, killing stragglers.
    for (Process& w : workers_) w.CloseStdin();
    for (Process& w : workers_) Stop(w, /*grace_ms=*/2000);
  }

  // Starts worker 0 now, so that a bad file is reported at creation.
  Status Validate() { return Start(workers_[0]); }

  StatusOr<RewardResult> Call(const RewardInput& in) {
    const int index = Acquire();
    StatusOr<RewardResult> result = CallOn(workers_[static_cast<size_t>(index)], in);
    Release(index);
    return result;
  }

 private:
  int Acquire() LAMINAR_EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (idle_.empty()) idle_cv_.Wait(&mu_);
    const int index = idle_.back();
    idle_.pop_back();
    return index;
  }

  void Release(int index) LAMINAR_EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      idle_.push_back(index);
    }
    idle_cv_.NotifyOne();
  }

  // Waits up to `grace_ms` for `w` to exit, then kills it; reaps it either way. Then kills what
  // is left of its process group (what the user's code started), which outlives its leader: the
  // kernel does not reuse the group's id while a member lives, so the signal reaches only them.
  static void Stop(Process& w, int grace_ms) {
    if (w.pid() <= 0) return;
    const pid_t group = w.pid();
    if (!w.Wait(grace_ms).ok()) {
      kill(-group, SIGKILL);
      w.Wait(10000).status().IgnoreError();
    }
    kill(-group, SIGKILL);
    w = Process();
  }

  static std::string ExitText(Process& w) { return ExitText(w.Wait(1000)); }
  static std::string ExitText(const StatusOr<int>& code) {
    if (!code.ok()) return "it closed its output";
    if (*code > 128) return "it was killed by signal " + std::to_string(*code - 128);
    return "it exited with code " + std::to_string(*code);
  }

  // Spawns a worker into `w` and waits for the driver's "ready".
  Status Start(Process& w) {
    LAMINAR_ASSIGN_OR_RETURN(
        w,
        Process::Spawn(
            {options_.python, "-B", "-c", kDriver, options_.path, options_.function,
             std::to_string(getpid()), std::to_string(options_.cpu_time_s),
             std::to_string(options_.memory_mb), std::to_string(options_.max_open_files),
             options_.network ? "1" : "0"},
            Process::SpawnOptions{.stderr_path = "", .stdin_pipe = true, .new_session = true}),
        tag_);
    StatusOr<std::string> line = w.ReadLine(ToMs(options_.startup_timeout_s));
    if (!line.ok()) {
      const bool late = line.status().code() == StatusCode::kDeadlineExceeded;
      std::string what = late ? "" : ExitText(w);
      Stop(w, 0);
      if (late) {
        return DeadlineExceededError(tag_ + ": the worker did not import the file within " +
                                     std::to_string(options_.startup_timeout_s) +
                                     " s (startup_timeout_s)");
      }
      return UnavailableError(tag_ + ": the worker stopped before it was ready (" + what +
                              "; is '" + options_.python +
                              "' a Python 3 interpreter? its stderr is above)");
    }
    nlohmann::json reply = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
    if (reply.is_object() && reply.contains("ready")) {
      const std::string network = reply.value("network", "");
      if (!options_.network && network != "isolated" && !warned_network_.exchange(true)) {
        LAMINAR_LOG(WARN, REWARD) << tag_ << ": the workers keep the host's network (" << network
                                  << "); set network: true to say that is intended";
      }
      return OkStatus();
    }
    Stop(w, 2000);
    if (reply.is_object() && reply.contains("error") && reply["error"].is_string()) {
      return InvalidArgumentError(tag_ + ": " + reply["error"].get<std::string>());
    }
    return InternalError(tag_ + ": the worker's first line is not the driver's: " + *line);
  }

  StatusOr<RewardResult> CallOn(Process& w, const RewardInput& in) {
    if (w.pid() <= 0 || !w.Running()) {
      Stop(w, 0);
      LAMINAR_RETURN_IF_ERROR(Start(w), "restarting a worker");
    }
    const nlohmann::json request = {
        {"data_source", std::string(in.data_source)},
        {"solution_str", std::string(in.solution_str)},
        {"ground_truth", std::string(in.ground_truth)},
        {"extra_info", std::string(in.extra_info_json)},
    };
    const int timeout_ms = ToMs(options_.timeout_s);
    const int64_t deadline = SteadyNowMs() + timeout_ms;
    // replace: invalid UTF-8 in a response becomes U+FFFD instead of an exception.
    Status written = w.WriteStdin(
        request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n", timeout_ms);
    StatusOr<std::string> line =
        written.ok() ? w.ReadLine(static_cast<int>(std::max<int64_t>(0, deadline - SteadyNowMs())))
                     : StatusOr<std::string>(written);
    if (!line.ok()) {
      if (line.status().code() == StatusCode::kDeadlineExceeded) {
        Stop(w, 0);
        return DeadlineExceededError(tag_ + ": no score within " +
                                     std::to_string(options_.timeout_s) +
                                     " s (timeout_s); the worker was killed");
      }
      const StatusOr<int> code = w.Wait(1000);
      Stop(w, 0);
      if (code.ok() && *code == 128 + SIGXCPU) {
        return DeadlineExceededError(tag_ + ": the call used more than " +
                                     std::to_string(options_.cpu_time_s) +
                                     " s of CPU time (cpu_time_s); the worker was killed");
      }
      return UnavailableError(tag_ + ": the worker died during the call (" + ExitText(code) + ")");
    }
    nlohmann::json reply = nlohmann::json::parse(*line, nullptr, /*allow_exceptions=*/false);
    if (!reply.is_object()) {
      Stop(w, 0);  // out of step with the driver: start afresh
      return InternalError(
          tag_ + ": the worker replied with something that is not JSON: " + line->substr(0, 200));
    }
    if (auto e = reply.find("error"); e != reply.end() && e->is_string()) {
      return InvalidArgumentError(tag_ + ": " + e->get<std::string>());
    }
    auto score = reply.find("score");
    if (score == reply.end() || !score->is_number() || !std::isfinite(score->get<double>())) {
      return InternalError(tag_ +
                           ": the worker's reply holds no finite score: " + line->substr(0, 200));
    }
    RewardResult result{.score = score->get<double>(), .extra = {}};
    if (auto extra = reply.find("extra"); extra != reply.end() && extra->is_object()) {
      for (const auto& [key, value] : extra->items()) {
        if (value.is_number()) result.extra[key] = value.get<double>();
      }
    }
    return result;
  }

  const PythonRewardOptions options_;
  const std::string tag_;
  std::vector<Process> workers_;             // workers_[i] belongs to whoever took i off idle_
  std::atomic<bool> warned_network_{false};  // the host's network was kept (said once)
  Mutex mu_;
  CondVar idle_cv_;  // idle_ is not empty
  std::vector<int> idle_ LAMINAR_GUARDED_BY(mu_);
};

}  // namespace

StatusOr<RewardFn> MakePythonReward(const PythonRewardOptions& options) {
  PythonRewardOptions o = options;
  const std::string tag = "python reward " + o.path + ":" + o.function;
  if (o.path.empty()) return InvalidArgumentError("python reward: no path to a .py file");
  if (o.function.empty()) return InvalidArgumentError(tag + ": empty function name");
  if (o.num_workers < 1) {
    return InvalidArgumentError(tag + ": num_workers " + std::to_string(o.num_workers) +
                                " is not >= 1");
  }
  if (!(o.timeout_s > 0) || !(o.startup_timeout_s > 0) || !std::isfinite(o.timeout_s) ||
      !std::isfinite(o.startup_timeout_s)) {
    return InvalidArgumentError(tag + ": timeout_s and startup_timeout_s must be > 0");
  }
  if (!(o.cpu_time_s >= 0) || !std::isfinite(o.cpu_time_s) || o.memory_mb < 0 ||
      o.max_open_files < 0) {
    return InvalidArgumentError(tag + ": cpu_time_s, memory_mb and max_open_files must be >= 0 " +
                                "(0: no limit)");
  }
  std::error_code ec;
  // Absolute, so that workers restarted after a chdir still find it.
  const std::filesystem::path abs = std::filesystem::absolute(o.path, ec);
  if (ec || !std::filesystem::is_regular_file(abs, ec)) {
    return InvalidArgumentError("python reward " + o.path + ": no such file" +
                                (abs.string() == o.path ? "" : " (" + abs.string() + ")"));
  }
  o.path = abs.string();
  auto pool = std::make_shared<PythonWorkerPool>(std::move(o));
  LAMINAR_RETURN_IF_ERROR(pool->Validate());
  return RewardFn([pool](const RewardInput& in) { return pool->Call(in); });
}

}  // namespace laminar::reward
