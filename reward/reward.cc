// The reward registry, the simple built-ins, the plug-in factories, weighted combination and spec
// parsing; see reward.h.
#include "reward/reward.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "reward/builtins.h"
#include "reward/c_reward.h"
#include "reward/python_reward.h"

namespace laminar::reward {
namespace {

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// A whole string as a finite double; nullopt otherwise.
std::optional<double> ParseDouble(const std::string& text) {
  const std::string t(Trim(text));
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

StatusOr<RewardResult> ExactMatch(const RewardInput& in) {
  return RewardResult{.score = Trim(in.solution_str) == Trim(in.ground_truth) ? 1.0 : 0.0,
                      .extra = {}};
}

StatusOr<RewardResult> Contains(const RewardInput& in) {
  if (in.ground_truth.empty()) {
    return InvalidArgumentError("reward contains: the ground truth is empty");
  }
  return RewardResult{
      .score = in.solution_str.find(in.ground_truth) != std::string_view::npos ? 1.0 : 0.0,
      .extra = {}};
}

StatusOr<RewardFn> MakeAutoReward(internal::ParamReader&) {
  // Built once, shared read-only by every call (the built-ins are thread-safe).
  auto table = std::make_shared<std::map<std::string, RewardFn>>();
  for (const char* name : {"gsm8k", "math", "countdown"}) {
    LAMINAR_ASSIGN_OR_RETURN((*table)[name], BuiltinReward(name));
  }
  return RewardFn([table](const RewardInput& in) -> StatusOr<RewardResult> {
    LAMINAR_ASSIGN_OR_RETURN(std::string name, DefaultRewardForDataSource(in.data_source),
                             "reward auto");
    return table->at(name)(in);
  });
}

// The params every plug-in's worker pool reads: num_workers, timeout_s, startup_timeout_s and the
// sandbox's (cpu_time_s, memory_mb, max_open_files, max_processes, network). `kind`: "python" or
// "c".
Status ReadWorkerParams(internal::ParamReader& params, const std::string& kind, int* num_workers,
                        double* timeout_s, double* startup_timeout_s, RewardSandbox* sandbox) {
  const std::string where = "reward " + kind + ": param ";
  LAMINAR_ASSIGN_OR_RETURN(double workers, params.Number("num_workers", *num_workers));
  if (workers != std::floor(workers) || workers < 1 || workers > 1024) {
    return InvalidArgumentError(where + "num_workers: expected an integer in [1, 1024]");
  }
  *num_workers = static_cast<int>(workers);
  LAMINAR_ASSIGN_OR_RETURN(*timeout_s, params.Number("timeout_s", *timeout_s));
  LAMINAR_ASSIGN_OR_RETURN(*startup_timeout_s,
                           params.Number("startup_timeout_s", *startup_timeout_s));
  LAMINAR_ASSIGN_OR_RETURN(sandbox->cpu_time_s, params.Number("cpu_time_s", sandbox->cpu_time_s));
  for (auto [key, value] : {std::pair{"memory_mb", &sandbox->memory_mb},
                            std::pair{"max_open_files", &sandbox->max_open_files},
                            std::pair{"max_processes", &sandbox->max_processes}}) {
    LAMINAR_ASSIGN_OR_RETURN(double v, params.Number(key, static_cast<double>(*value)));
    if (v != std::floor(v) || v < 0 || v > 1e12) {
      return InvalidArgumentError(where + key + ": expected an integer >= 0 (0: no limit)");
    }
    *value = static_cast<int64_t>(v);
  }
  LAMINAR_ASSIGN_OR_RETURN(sandbox->network, params.Bool("network", sandbox->network));
  return OkStatus();
}

StatusOr<RewardFn> MakePythonPlugin(internal::ParamReader& params) {
  PythonRewardOptions o;
  LAMINAR_ASSIGN_OR_RETURN(o.path, params.Text("path", /*required=*/true));
  LAMINAR_ASSIGN_OR_RETURN(std::string function, params.Text("function", /*required=*/false));
  if (!function.empty()) o.function = function;
  LAMINAR_ASSIGN_OR_RETURN(std::string python, params.Text("python", /*required=*/false));
  if (!python.empty()) o.python = python;
  LAMINAR_RETURN_IF_ERROR(ReadWorkerParams(params, "python", &o.num_workers, &o.timeout_s,
                                           &o.startup_timeout_s, &o.sandbox));
  // Unknown params fail before a Python process starts.
  LAMINAR_RETURN_IF_ERROR(params.Finish());
  return MakePythonReward(o);
}

StatusOr<RewardFn> MakeCPlugin(internal::ParamReader& params) {
  CRewardOptions o;
  LAMINAR_ASSIGN_OR_RETURN(o.path, params.Text("path", /*required=*/true));
  LAMINAR_ASSIGN_OR_RETURN(std::string symbol, params.Text("symbol", /*required=*/false));
  if (!symbol.empty()) o.symbol = symbol;
  LAMINAR_RETURN_IF_ERROR(ReadWorkerParams(params, "c", &o.num_workers, &o.timeout_s,
                                           &o.startup_timeout_s, &o.sandbox));
  LAMINAR_RETURN_IF_ERROR(params.Finish());
  return MakeCReward(o);
}

using Factory = StatusOr<RewardFn> (*)(internal::ParamReader&);

// The plug-ins: not built-ins, since each needs a user's file.
const std::map<std::string, Factory>& Plugins() {
  static const auto* plugins = new std::map<std::string, Factory>{
      {"c", MakeCPlugin},
      {"python", MakePythonPlugin},
  };
  return *plugins;
}

const std::map<std::string, Factory>& Registry() {
  static const auto* registry = new std::map<std::string, Factory>{
      {"auto", MakeAutoReward},
      {"contains", [](internal::ParamReader&) -> StatusOr<RewardFn> { return RewardFn(Contains); }},
      {"countdown", internal::MakeCountdownReward},
      {"exact_match",
       [](internal::ParamReader&) -> StatusOr<RewardFn> { return RewardFn(ExactMatch); }},
      {"format", internal::MakeFormatReward},
      {"gsm8k", internal::MakeGsm8kReward},
      {"math", internal::MakeMathReward},
  };
  return *registry;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

namespace internal {

Status ParamReader::Error(const std::string& key, const std::string& what) const {
  return InvalidArgumentError("reward " + reward_ + ": param " + key + ": " + what);
}

StatusOr<double> ParamReader::Number(const std::string& key, double fallback) {
  known_.insert(key);
  auto it = params_.find(key);
  if (it == params_.end()) return fallback;
  std::optional<double> v = ParseDouble(it->second);
  if (!v) return Error(key, "expected a number, got '" + it->second + "'");
  return *v;
}

StatusOr<bool> ParamReader::Bool(const std::string& key, bool fallback) {
  known_.insert(key);
  auto it = params_.find(key);
  if (it == params_.end()) return fallback;
  std::string v(Trim(it->second));
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "yes" || v == "1") return true;
  if (v == "false" || v == "no" || v == "0") return false;
  return Error(key, "expected true or false, got '" + it->second + "'");
}

StatusOr<std::string> ParamReader::Text(const std::string& key, bool required) {
  known_.insert(key);
  auto it = params_.find(key);
  if (it != params_.end()) return it->second;
  if (required) return Error(key, "missing (it is required)");
  return std::string();
}

Status ParamReader::Finish() const {
  for (const auto& [key, value] : params_) {
    if (known_.count(key) != 0) continue;
    std::vector<std::string> known(known_.begin(), known_.end());
    return InvalidArgumentError("reward " + reward_ + ": unknown param '" + key + "' (params: " +
                                (known.empty() ? std::string("none") : JoinNames(known)) + ")");
  }
  return OkStatus();
}

}  // namespace internal

std::vector<std::string> BuiltinRewardNames() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : Registry()) names.push_back(name);
  return names;
}

std::vector<std::string> PluginRewardNames() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : Plugins()) names.push_back(name);
  return names;
}

StatusOr<RewardFn> MakeReward(const RewardSpec& spec) {
  Factory factory = nullptr;
  if (auto it = Registry().find(spec.name); it != Registry().end()) {
    factory = it->second;
  } else if (auto p = Plugins().find(spec.name); p != Plugins().end()) {
    factory = p->second;
  } else {
    return NotFoundError("no built-in reward named '" + spec.name +
                         "' (built-ins: " + JoinNames(BuiltinRewardNames()) +
                         "; plug-ins: " + JoinNames(PluginRewardNames()) + ")");
  }
  internal::ParamReader params(spec.name, spec.params);
  LAMINAR_ASSIGN_OR_RETURN(RewardFn fn, factory(params));
  LAMINAR_RETURN_IF_ERROR(params.Finish());
  return fn;
}

StatusOr<RewardFn> BuiltinReward(std::string_view name) {
  return MakeReward({.name = std::string(name), .weight = 1.0, .params = {}});
}

StatusOr<RewardFn> CombineRewards(const std::vector<RewardSpec>& specs) {
  if (specs.empty()) return InvalidArgumentError("no rewards to combine");
  struct Component {
    std::string key;  // "reward/<name>[_k]"
    double weight;
    RewardFn fn;
  };
  auto components = std::make_shared<std::vector<Component>>();
  std::map<std::string, int> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string where = "reward[" + std::to_string(i) + "] (" + specs[i].name + ")";
    if (!std::isfinite(specs[i].weight)) {
      return InvalidArgumentError(where + ": weight " + std::to_string(specs[i].weight) +
                                  " is not finite");
    }
    LAMINAR_ASSIGN_OR_RETURN(RewardFn fn, MakeReward(specs[i]), where);
    const int k = ++seen[specs[i].name];
    std::string key = "reward/" + specs[i].name + (k > 1 ? "_" + std::to_string(k) : "");
    components->push_back({std::move(key), specs[i].weight, std::move(fn)});
  }
  return RewardFn([components](const RewardInput& in) -> StatusOr<RewardResult> {
    RewardResult total;
    for (const Component& c : *components) {
      LAMINAR_ASSIGN_OR_RETURN(RewardResult r, c.fn(in), c.key);
      total.score += c.weight * r.score;
      total.extra[c.key] = r.score;
      for (const auto& [key, value] : r.extra) total.extra[c.key + "/" + key] = value;
    }
    return total;
  });
}

namespace {

// A plug-in's params from `{python: {path: ..., ...}}`: the map under the kind's key.
Status ParsePluginParams(const std::string& kind, const YAML::Node& value, const std::string& where,
                         RewardSpec& spec) {
  if (!value.IsMap()) return InvalidArgumentError(where + ": expected a map of params (path: ...)");
  if (!spec.name.empty() && spec.name != kind) {
    return InvalidArgumentError(where + ": a spec has one kind, but it also names '" + spec.name +
                                "'");
  }
  spec.name = kind;
  for (const auto& kv : value) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
    if (key.empty()) return InvalidArgumentError(where + ": keys must be non-empty names");
    if (!kv.second.IsScalar()) {
      return InvalidArgumentError(where + "." + key + ": expected a scalar value");
    }
    spec.params[key] = kv.second.Scalar();
  }
  return OkStatus();
}

StatusOr<RewardSpec> ParseOneSpec(const YAML::Node& node, const std::string& where,
                                  std::string_view base_dir) {
  RewardSpec spec;
  std::string check_where = where;  // where MakeReward's errors are reported
  if (node.IsScalar()) {
    spec.name = node.Scalar();
  } else if (node.IsMap()) {
    std::string plugin;  // the key of a {python: {...}} form
    for (const auto& kv : node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
      if (key.empty()) return InvalidArgumentError(where + ": keys must be non-empty names");
      const YAML::Node& value = kv.second;
      if (Plugins().count(key) != 0 && value.IsMap()) {
        if (!plugin.empty()) {
          return InvalidArgumentError(where + ": one spec holds one plug-in, but it has both " +
                                      plugin + " and " + key + " (use a list)");
        }
        plugin = key;
        check_where = where + "." + key;
        LAMINAR_RETURN_IF_ERROR(ParsePluginParams(key, value, check_where, spec));
        continue;
      }
      if (!value.IsScalar()) {
        return InvalidArgumentError(where + "." + key + ": expected a scalar value");
      }
      if (key == "name") {
        if (!plugin.empty() && value.Scalar() != plugin) {
          return InvalidArgumentError(where + ".name: '" + value.Scalar() +
                                      "', but the spec is a " + plugin + " plug-in");
        }
        spec.name = value.Scalar();
      } else if (key == "weight") {
        std::optional<double> w = ParseDouble(value.Scalar());
        if (!w) {
          return InvalidArgumentError(where + ".weight: expected a number, got '" + value.Scalar() +
                                      "'");
        }
        spec.weight = *w;
      } else {
        spec.params[key] = value.Scalar();
      }
    }
    if (spec.name.empty() && !node["name"]) {
      for (const auto& [kind, factory] : Plugins()) {
        if (node[kind]) {
          return InvalidArgumentError(where + "." + kind +
                                      ": expected a map of params (path: ...)");
        }
      }
      return InvalidArgumentError(where + ".name: missing");
    }
  } else {
    return InvalidArgumentError(where + ": expected a reward name or a map with a name");
  }
  if (spec.name.empty()) return InvalidArgumentError(where + ".name: empty");
  if (auto path = spec.params.find("path");
      Plugins().count(spec.name) != 0 && path != spec.params.end() && !base_dir.empty() &&
      !path->second.empty() && std::filesystem::path(path->second).is_relative()) {
    path->second = (std::filesystem::path(base_dir) / path->second).lexically_normal().string();
  }
  LAMINAR_RETURN_IF_ERROR(MakeReward(spec), check_where);
  return spec;
}

}  // namespace

StatusOr<std::vector<RewardSpec>> ParseRewardSpecs(const YAML::Node& node, std::string_view where,
                                                   std::string_view base_dir) {
  const std::string w(where);
  try {
    std::vector<RewardSpec> specs;
    if (!node.IsDefined() || node.IsNull()) return InvalidArgumentError(w + ": missing");
    if (node.IsSequence()) {
      if (node.size() == 0) return InvalidArgumentError(w + ": the list of rewards is empty");
      for (size_t i = 0; i < node.size(); ++i) {
        LAMINAR_ASSIGN_OR_RETURN(
            RewardSpec s, ParseOneSpec(node[i], w + "[" + std::to_string(i) + "]", base_dir));
        specs.push_back(std::move(s));
      }
      return specs;
    }
    if (!node.IsScalar() && !node.IsMap()) {
      return InvalidArgumentError(w + ": expected a name, a map or a list");
    }
    LAMINAR_ASSIGN_OR_RETURN(RewardSpec s, ParseOneSpec(node, w, base_dir));
    specs.push_back(std::move(s));
    return specs;
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(w + ": " + e.what());
  }
}

StatusOr<std::string> DefaultRewardForDataSource(std::string_view data_source) {
  static const char* const kGsm8k[] = {"openai/gsm8k", "gsm8k"};
  static const char* const kMath[] = {"lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval",
                                      "HuggingFaceH4/MATH-500", "math", "math500"};
  for (const char* n : kGsm8k) {
    if (data_source == n) return std::string("gsm8k");
  }
  for (const char* n : kMath) {
    if (data_source == n) return std::string("math");
  }
  std::string lower(data_source);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  if (lower.find("countdown") != std::string::npos) return std::string("countdown");
  std::string known;
  for (const char* n : kGsm8k) known += std::string(known.empty() ? "" : ", ") + n;
  for (const char* n : kMath) known += std::string(", ") + n;
  return NotFoundError("no default reward for data_source '" + std::string(data_source) +
                       "' (known: " + known + ", and any name containing 'countdown')");
}

StatusOr<RewardFn> RewardFromYamlText(const std::string& text, std::string_view where) {
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string(where) + ": not YAML: " + e.what());
  }
  LAMINAR_ASSIGN_OR_RETURN(std::vector<RewardSpec> specs, ParseRewardSpecs(node, where));
  if (specs.size() == 1 && specs[0].weight == 1.0) return MakeReward(specs[0]);
  return CombineRewards(specs);
}

}  // namespace laminar::reward
