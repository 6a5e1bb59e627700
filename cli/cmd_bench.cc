// `laminar bench FAMILY [options]`: the benchmark families of cli/bench/ as subcommands, each with
// its own options (`laminar bench FAMILY --help`); `laminar bench` alone runs `hw`.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "cli/bench/bench_command.h"
#include "cli/command.h"

namespace laminar::cli {

std::vector<BenchFamily>& BenchRegistry() {
  static std::vector<BenchFamily>* registry = new std::vector<BenchFamily>();
  return *registry;
}

int BenchFail(const Status& s) { return CommandFail("bench", s.message()); }

std::string SelfPath() {
  char buf[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "laminar";
}

double LoadAverage1m() {
  double load[1] = {-1};
  return getloadavg(load, 1) == 1 ? load[0] : -1;
}

namespace {

std::function<int()> SetupBench(CLI::App* app) {
  std::vector<BenchFamily> families = BenchRegistry();
  std::ranges::sort(families, {}, &BenchFamily::name);
  auto runs = std::make_shared<std::vector<std::pair<CLI::App*, std::function<int()>>>>();
  std::function<int()> hw;
  for (const BenchFamily& f : families) {
    CLI::App* sub = app->add_subcommand(f.name, f.description);
    runs->emplace_back(sub, f.setup(sub));
    if (f.name == "hw") hw = runs->back().second;
  }
  app->require_subcommand(0, 1);
  // A word that is no family is reported here, with the families, rather than by CLI11.
  app->allow_extras();
  std::string names;
  for (const BenchFamily& f : families) names += (names.empty() ? "" : ", ") + f.name;
  return [app, runs, hw, names] {
    if (const std::vector<std::string> extra = app->remaining(); !extra.empty()) {
      return CommandFail(
          "bench", "unknown benchmark family '" + extra.front() + "' (families: " + names + ")", 2);
    }
    for (const auto& [sub, run] : *runs) {
      if (sub->parsed()) return run();
    }
    return hw ? hw() : CommandFail("bench", "no benchmark family given", 2);
  };
}

}  // namespace

LAMINAR_REGISTER_COMMAND(
    "bench",
    "benchmarks with JSON output: hw, decode, prefill, gemm, rollout, spec, train, broadcast, "
    "pull, publish, manager",
    SetupBench);

}  // namespace laminar::cli
