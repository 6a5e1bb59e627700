// The `laminar` binary: dispatches to the registered subcommands.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "cli/command.h"
#include "core/cuda/device.h"
#include "core/logging.h"

namespace laminar::cli {

std::vector<Command>& CommandRegistry() {
  static std::vector<Command> registry;
  return registry;
}

int CommandFail(std::string_view command, std::string_view message, int code) {
  std::fprintf(stderr, "laminar %.*s: %.*s\n", static_cast<int>(command.size()), command.data(),
               static_cast<int>(message.size()), message.data());
  return code;
}

namespace {

std::function<int()> SetupVersion(CLI::App*) {
  return [] {
    std::printf("laminar %s\n", "0.1.0");
    std::printf("cuda: %s", BuiltWithCuda() ? "built" : "not built");
    int n = CudaDeviceCount();
    if (BuiltWithCuda()) std::printf(", %d device(s)", n);
    std::printf("\n");
    for (int i = 0; i < n; ++i) std::printf("  gpu %d: %s\n", i, CudaDeviceName(i).c_str());
    return 0;
  };
}
LAMINAR_REGISTER_COMMAND("version", "print the version and the GPUs this build can use",
                         SetupVersion);

// A role started by `laminar run` (kSupervisorPidEnv names the supervisor) gets SIGTERM when the
// supervisor dies, even by SIGKILL: it stops as on Ctrl-C (the actor saves a checkpoint) instead
// of running on with no one to stop it.
void StopWithSupervisor() {
  const char* pid = std::getenv(kSupervisorPidEnv);
  if (pid == nullptr) return;
  ::unsetenv(kSupervisorPidEnv);  // not for the role's own children
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  // The supervisor may have died before the prctl: then this process was already re-parented.
  if (std::to_string(::getppid()) != pid) ::raise(SIGTERM);
}

}  // namespace
}  // namespace laminar::cli

int main(int argc, char** argv) {
  using laminar::cli::CommandRegistry;
  laminar::cli::StopWithSupervisor();
  CLI::App app{"laminar: asynchronous RL post-training for LLMs"};
  app.require_subcommand(1);
  auto& commands = CommandRegistry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  // An unknown first word gets its own message (CLI11 would only say a subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string word = argv[1];
    bool known = false;
    std::string names;
    for (const auto& cmd : commands) {
      known = known || cmd.name == word;
      names += (names.empty() ? "" : ", ") + cmd.name;
    }
    if (!known) {
      std::fprintf(stderr, "laminar: unknown command '%s'; commands: %s (laminar --help)\n",
                   word.c_str(), names.c_str());
      return 2;
    }
  }
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& cmd : commands) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.description);
    runners[sub] = cmd.setup(sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints and exits 0; any other parse error is a usage error: exit code 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  laminar::SetLogRole(app.get_subcommands().front()->get_name());
  for (auto& [sub, run] : runners) {
    if (sub->parsed()) return run();
  }
  return 1;
}
