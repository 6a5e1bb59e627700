// Subcommands of the `laminar` binary register themselves here, one file per command.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace laminar::cli {

// Adds the command's options to `app` and returns the function that runs it (exit code).
using CommandSetup = std::function<std::function<int()>(CLI::App* app)>;

struct Command {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<Command>& CommandRegistry();

// Prints "laminar <command>: <message>" on stderr and returns `code` (1: the command failed,
// 2: a usage error), so each command reports errors in one form.
int CommandFail(std::string_view command, std::string_view message, int code = 1);

// `laminar actor`'s exit status when its data-parallel ranks lost one of them (a rank, its host or
// its link died): EX_TEMPFAIL, the run goes on from its last checkpoint once every rank is started
// again (scripts/launch_slurm.sh then restarts the roles, a spare node in a dead one's place, or
// has the job requeued).
inline constexpr int kExitLostRank = 75;

// For unsigned options (seeds): refuses a leading '-', which CLI11 would wrap ("-5" to 2^64 - 5).
inline const CLI::Validator kNonNegative(
    [](std::string& text) {
      return text.starts_with('-') ? std::string("must not be negative") : std::string();
    },
    "UINT", "NonNegative");

// Set by `laminar run` in its roles' environment to its own pid: a role stops (SIGTERM) when
// that process dies (cli/main.cc).
inline constexpr char kSupervisorPidEnv[] = "LAMINAR_SUPERVISOR_PID";

struct CommandRegistrar {
  CommandRegistrar(std::string name, std::string description, CommandSetup setup) {
    CommandRegistry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace laminar::cli

#define LAMINAR_CLI_CONCAT_INNER(a, b) a##b
#define LAMINAR_CLI_CONCAT(a, b) LAMINAR_CLI_CONCAT_INNER(a, b)
// LAMINAR_REGISTER_COMMAND("inspect", "print a checkpoint's ...", SetupInspect);
#define LAMINAR_REGISTER_COMMAND(name, description, setup)                                      \
  static ::laminar::cli::CommandRegistrar LAMINAR_CLI_CONCAT(laminar_cmd_registrar_, __LINE__)( \
      name, description, setup)
