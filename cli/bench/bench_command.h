// `laminar bench FAMILY`: each benchmark family is a subcommand in a file of its own with its own
// options, registered here. Output is JSON on stdout, human lines on stderr, each figure reported
// against a measured hardware limit or a peer measured in the same run (bench/).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/status.h"

namespace laminar::cli {

// A family of `laminar bench`: `name` (a subcommand) and its setup (adds the family's options to
// `app` and returns what runs it, as a Command's).
struct BenchFamily {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<BenchFamily>& BenchRegistry();

struct BenchRegistrar {
  BenchRegistrar(std::string name, std::string description, CommandSetup setup) {
    BenchRegistry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

// "laminar bench: <status>" on stderr; returns 1.
int BenchFail(const Status& s);
// The running laminar binary's path (for benchmarks that start laminar processes).
std::string SelfPath();
// getloadavg(3)'s one-minute average; -1 when unavailable.
double LoadAverage1m();

// The option every family that loads a checkpoint takes: --model PATH|NAME.
inline void AddModelOption(CLI::App* app, std::string* model) {
  app->add_option("--model", *model, "checkpoint path or model name");
}

}  // namespace laminar::cli

// LAMINAR_REGISTER_BENCH("gemm", "quantized matmuls vs oneDNN", SetupGemm);
#define LAMINAR_REGISTER_BENCH(name, description, setup)                                        \
  static ::laminar::cli::BenchRegistrar LAMINAR_CLI_CONCAT(laminar_bench_registrar_, __LINE__)( \
      name, description, setup)
