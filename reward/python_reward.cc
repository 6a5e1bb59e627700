// Python reward plug-ins: a pool of Python worker processes running a small driver that imports the
// user's file and answers one JSON request line with one JSON reply line; see python_reward.h.
#include "reward/python_reward.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "reward/worker_pool.h"

namespace laminar::reward {
namespace {

// The worker's driver, run as `python -B -c kDriver <path> <function>` and the sandbox's arguments
// (-B: no __pycache__ next to the user's file); it sandboxes itself, speaks the protocol and
// watches its parent as reward/worker_pool.h says. Requests: {"data_source", "solution_str",
// "ground_truth", "extra_info": JSON text or ""}; json.dumps escapes newlines and writes ASCII.
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

def exit_with_parent(owner):
    # The owner's death re-parents the worker; an interpreter started through a wrapper that
    # forks has the wrapper as parent, so the owner is also watched directly.
    start = os.getppid()
    def owner_alive():
        try:
            os.kill(owner, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
    while os.getppid() == start and (start == owner or owner_alive()):
        time.sleep(0.2)
    kill_cgroup()  # what the user's code started, also outside the worker's process group
    os.killpg(0, signal.SIGKILL)  # the worker and whatever the user's code started

CGROUP = "-"

def kill_cgroup():
    for _ in range(1000):
        try:
            with open(os.path.join(CGROUP, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split() if int(p) != os.getpid()]
        except (OSError, ValueError):
            return
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)

def join_cgroup(cgroup):
    global CGROUP
    if cgroup == "-":
        return "unlimited"
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError as e:
        return "unlimited: joining %s: %s" % (cgroup, e.strerror)
    CGROUP = cgroup
    return "limited"

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
        limit(resource.RLIMIT_NOFILE, open_files)
    if memory_mb > 0:
        limit(resource.RLIMIT_AS, memory_mb << 20)
    return where

def limit(which, value):
    # Never above the hard limit the worker has (Slurm or ulimit may have set one).
    hard = resource.getrlimit(which)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))

def limit_cpu(seconds):
    if seconds > 0:
        used = resource.getrusage(resource.RUSAGE_SELF)
        soft = int(math.ceil(used.ru_utime + used.ru_stime + seconds))
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    path, name = sys.argv[1], sys.argv[2]
    cpu_s, memory_mb, open_files = float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    # One thread per numeric library unless the user says otherwise: calls run in parallel across
    # workers, and a thread pool per library would eat the address-space limit (OpenBLAS).
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    processes = join_cgroup(sys.argv[8])  # first: before the namespace, which may drop privileges
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
    send({"ready": True, "network": network, "processes": processes})
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

}  // namespace

StatusOr<RewardFn> MakePythonReward(const PythonRewardOptions& options) {
  const std::string tag = "python reward " + options.path + ":" + options.function;
  if (options.path.empty()) return InvalidArgumentError("python reward: no path to a .py file");
  if (options.function.empty()) return InvalidArgumentError(tag + ": empty function name");
  std::error_code ec;
  // Absolute, so that workers restarted after a chdir still find it.
  const std::filesystem::path abs = std::filesystem::absolute(options.path, ec);
  if (ec || !std::filesystem::is_regular_file(abs, ec)) {
    return InvalidArgumentError("python reward " + options.path + ": no such file" +
                                (abs.string() == options.path ? "" : " (" + abs.string() + ")"));
  }
  return MakeRewardWorkers({
      .tag = "python reward " + abs.string() + ":" + options.function,
      .argv = {options.python, "-B", "-c", kDriver, abs.string(), options.function},
      .encode =
          [](const RewardInput& in) {
            const nlohmann::json request = {
                {"data_source", std::string(in.data_source)},
                {"solution_str", std::string(in.solution_str)},
                {"ground_truth", std::string(in.ground_truth)},
                {"extra_info", std::string(in.extra_info_json)},
            };
            // replace: invalid UTF-8 in a response becomes U+FFFD (Python's str holds text).
            return request.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
          },
      .start_hint = "is '" + options.python + "' a Python 3 interpreter? ",
      .num_workers = options.num_workers,
      .timeout_s = options.timeout_s,
      .startup_timeout_s = options.startup_timeout_s,
      .sandbox = options.sandbox,
  });
}

}  // namespace laminar::reward
