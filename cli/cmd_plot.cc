// `laminar plot RUN_DIR`: PNG charts of a run's per-step metrics (reward, response length, KL and
// rollout/trainer mismatch, staleness, throughput) against training/global_step, read from
// RUN_DIR/metrics.jsonl (or, when that is absent, the run's TensorBoard event file) and drawn by
// gnuplot (Debian gnuplot-nox) from a generated script.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "actor/tensorboard.h"
#include "cli/command.h"
#include "core/json_util.h"
#include "core/process.h"

namespace laminar::cli {
namespace {

namespace fs = std::filesystem;

struct PlotArgs {
  std::string run_dir;
  std::string out;                  // default RUN_DIR/plots
  std::string gnuplot = "gnuplot";  // program name (looked up in PATH) or path
};

// One chart: a PNG with one line per metric present in the run.
struct Chart {
  const char* file;
  const char* title;
  const char* ylabel;
  std::vector<const char*> keys;
};

const std::vector<Chart>& Charts() {
  static const std::vector<Chart> charts = {
      {"reward.png", "Reward", "mean score", {"critic/score/mean"}},
      {"response_length.png",
       "Response length",
       "tokens",
       {"response_length/mean", "response_length/max"}},
      {"mismatch.png",
       "KL and rollout/trainer mismatch",
       "value",
       {"rollout_corr/kl", "rollout_corr/abs_logprob_diff_mean", "actor/ppo_kl"}},
      {"staleness.png", "Staleness", "versions", {"staleness/mean", "staleness/max"}},
      {"throughput.png", "Throughput", "tokens/s", {"perf/throughput"}},
  };
  return charts;
}

// One step's metrics; x is training/global_step (the row's ordinal when a row lacks it).
struct Row {
  double x = 0;
  std::map<std::string, double> values;
};

// RUN_DIR/metrics.jsonl: one JSON object of numbers per line (blank lines skipped; non-numeric
// values ignored). InvalidArgument naming the file and line for a line that is not an object.
StatusOr<std::vector<Row>> ReadMetricsJsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open " + path);
  std::vector<Row> rows;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded())
      return InvalidArgumentError(path + " line " + std::to_string(n) + ": not JSON");
    if (!j.is_object()) {
      return InvalidArgumentError(path + " line " + std::to_string(n) +
                                  ": expected a JSON object of metrics, got " + JsonSnippet(j));
    }
    Row r;
    for (const auto& [k, v] : j.items()) {
      if (v.is_number()) r.values[k] = v.get<double>();
    }
    auto step = r.values.find("training/global_step");
    r.x = step != r.values.end() ? step->second : static_cast<double>(rows.size() + 1);
    rows.push_back(std::move(r));
  }
  return rows;
}

// The run's TensorBoard event file (RUN_DIR or RUN_DIR/tensorboard), newest first; "" if none.
std::string FindEventFile(const std::string& run_dir) {
  std::string best;
  for (const fs::path& dir : {fs::path(run_dir), fs::path(run_dir) / "tensorboard"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("events.out.tfevents.", 0) == 0 && e.path().string() > best) {
        best = e.path().string();
      }
    }
  }
  return best;
}

StatusOr<std::vector<Row>> ReadEventRows(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(std::vector<proto::tensorboard::Event> events,
                           actor::ReadTensorBoardEvents(path));
  std::vector<Row> rows;
  for (const auto& e : events) {
    if (!e.has_summary()) continue;
    Row r;
    r.x = static_cast<double>(e.step());
    for (const auto& v : e.summary().value()) r.values[v.tag()] = v.simple_value();
    rows.push_back(std::move(r));
  }
  return rows;
}

// `program` as an executable path: itself when it names a path, else the first match in PATH.
// NotFound (saying how to install gnuplot) when there is none.
StatusOr<std::string> FindProgram(const std::string& program) {
  auto executable = [](const fs::path& p) {
    return fs::is_regular_file(p) && access(p.c_str(), X_OK) == 0;
  };
  const std::string hint =
      "; gnuplot draws the plots: install it with `apt-get install gnuplot-nox` (scripts/setup.sh "
      "does)";
  if (program.find('/') != std::string::npos) {
    if (executable(program)) return program;
    return NotFoundError(program + " is not an executable file" + hint);
  }
  const char* path_env = std::getenv("PATH");
  std::stringstream dirs(path_env != nullptr ? path_env : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && executable(fs::path(dir) / program)) return (fs::path(dir) / program);
  }
  return NotFoundError("'" + program + "' was not found in PATH" + hint);
}

// A gnuplot string literal (single quotes; a quote is doubled).
std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

// Writes the data file of `chart` (x, then each present key; "?" where a row lacks it) and
// appends its plot commands to `script`. Returns false when no row has any of its keys.
bool AddChart(const Chart& chart, const std::vector<Row>& rows, const fs::path& work,
              const fs::path& out_dir, std::string* script) {
  std::vector<std::string> keys;
  for (const char* k : chart.keys) {
    for (const Row& r : rows) {
      if (r.values.count(k) != 0) {
        keys.emplace_back(k);
        break;
      }
    }
  }
  if (keys.empty()) return false;
  const fs::path data = work / (std::string(chart.file) + ".dat");
  std::ofstream f(data);
  f.precision(9);
  for (const Row& r : rows) {
    f << r.x;
    for (const std::string& k : keys) {
      auto it = r.values.find(k);
      if (it == r.values.end() || !std::isfinite(it->second)) {
        f << " ?";
      } else {
        f << " " << it->second;
      }
    }
    f << "\n";
  }
  *script += "set output " + Quoted((out_dir / chart.file).string()) + "\n";
  *script += "set title " + Quoted(chart.title) + "\nset ylabel " + Quoted(chart.ylabel) + "\n";
  *script += "plot ";
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) *script += ", ";
    *script += Quoted(data.string()) + " using 1:" + std::to_string(i + 2) +
               " with linespoints title " + Quoted(keys[i]);
  }
  *script += "\nunset output\n";
  return true;
}

Status Plot(const PlotArgs& a) {
  const std::string jsonl = (fs::path(a.run_dir) / "metrics.jsonl").string();
  std::vector<Row> rows;
  std::string source = jsonl;
  if (fs::exists(jsonl)) {
    LAMINAR_ASSIGN_OR_RETURN(rows, ReadMetricsJsonl(jsonl));
  } else if (std::string events = FindEventFile(a.run_dir); !events.empty()) {
    source = events;
    LAMINAR_ASSIGN_OR_RETURN(rows, ReadEventRows(events));
  } else {
    return NotFoundError(a.run_dir + " has no metrics.jsonl and no TensorBoard event file");
  }
  if (rows.empty()) return InvalidArgumentError(source + " holds no steps");
  LAMINAR_ASSIGN_OR_RETURN(std::string gnuplot, FindProgram(a.gnuplot));
  const fs::path out_dir = a.out.empty() ? fs::path(a.run_dir) / "plots" : fs::path(a.out);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return InternalError("cannot create " + out_dir.string() + ": " + ec.message());
  // Data and script go to a private folder under the output, removed afterwards.
  std::string tmpl = (out_dir / ".plot.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return ErrnoError("mkdtemp " + tmpl, errno);
  const fs::path work = tmpl;
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
    }
  } cleanup{work};
  // pngcairo draws smoother charts; the gd `png` terminal is the fallback.
  std::string script =
      "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
      "  set terminal pngcairo size 900,500 noenhanced\n"
      "} else {\n"
      "  set terminal png size 900,500 noenhanced\n"
      "}\n"
      "set grid\nset key outside bottom center horizontal\nset xlabel 'training/global_step'\n"
      "set datafile missing '?'\n";
  std::vector<std::string> written;
  for (const Chart& c : Charts()) {
    if (AddChart(c, rows, work, out_dir, &script)) {
      written.push_back((out_dir / c.file).string());
    } else {
      std::string keys;
      for (const char* k : c.keys) keys += (keys.empty() ? "" : ", ") + std::string(k);
      std::fprintf(stderr, "laminar plot: skipping %s: %s has none of %s\n", c.file, source.c_str(),
                   keys.c_str());
    }
  }
  if (written.empty()) return InvalidArgumentError(source + " holds none of the plotted metrics");
  const fs::path script_path = work / "plot.gp";
  std::ofstream(script_path) << script;
  const fs::path log = work / "gnuplot.log";
  LAMINAR_ASSIGN_OR_RETURN(Process p, Process::Spawn({gnuplot, script_path.string()}, log));
  LAMINAR_ASSIGN_OR_RETURN(int code, p.Wait(60'000), "gnuplot");
  if (code != 0) {
    std::ifstream err(log);
    std::stringstream ss;
    ss << err.rdbuf();
    return InternalError("gnuplot exited with " + std::to_string(code) + ": " + ss.str());
  }
  for (const std::string& w : written) {
    if (!fs::exists(w)) return InternalError("gnuplot did not write " + w);
    std::printf("%s\n", w.c_str());
  }
  return OkStatus();
}

std::function<int()> SetupPlot(CLI::App* app) {
  auto a = std::make_shared<PlotArgs>();
  app->add_option("run_dir", a->run_dir, "the run's folder (holding metrics.jsonl)")->required();
  app->add_option("--out", a->out, "folder for the PNGs (default: RUN_DIR/plots)");
  app->add_option("--gnuplot", a->gnuplot, "the gnuplot program to run");
  return [a] {
    Status st = Plot(*a);
    if (!st.ok()) return CommandFail("plot", st.message());
    return 0;
  };
}

}  // namespace

LAMINAR_REGISTER_COMMAND("plot",
                         "PNG charts of a run's metrics (reward, length, KL, staleness, tok/s)",
                         SetupPlot);

}  // namespace laminar::cli
