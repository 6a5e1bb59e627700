// `laminar audit RUN_DIR`: whether a run (finished, interrupted or resumed) trained every sample
// at most once and lost no prompt, from its newest checkpoint (the trained steps and the
// manager's ledger) and its trajectory log (launch/run_audit.h). Prints the counts, or one JSON
// object with --json; exits 0 when nothing was lost, duplicated or accounted for beyond what was
// handed out, 1 when something was, 2 when the folder holds no checkpoint or no trajectory log to
// audit.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "cli/command.h"
#include "launch/run_audit.h"

namespace laminar::cli {
namespace {

namespace fs = std::filesystem;

struct AuditArgs {
  std::string run_dir;
  std::string checkpoints;   // empty: RUN_DIR/checkpoints
  std::string trajectories;  // empty: RUN_DIR/trajectories.jsonl
  bool json = false;
};

int Run(const AuditArgs& a) {
  auto fail = [](std::string_view m) { return CommandFail("audit", m, 2); };
  const fs::path dir = a.run_dir;
  const fs::path checkpoints =
      a.checkpoints.empty() ? dir / "checkpoints" : fs::path(a.checkpoints);
  const fs::path log =
      a.trajectories.empty() ? dir / "trajectories.jsonl" : fs::path(a.trajectories);
  std::error_code ec;
  if (!fs::exists(checkpoints / "latest", ec)) {
    return fail(checkpoints.string() + " holds no checkpoint (no 'latest'): nothing to audit");
  }
  if (!fs::is_regular_file(log, ec)) {
    return fail(log.string() +
                " is not a file: the run kept no trajectory log (actor.trajectory_log; laminar run "
                "and scripts/launch_slurm.sh keep RUN_DIR/trajectories.jsonl)");
  }
  const nlohmann::json r = launch::AuditExactlyOnce(checkpoints, log);
  if (r.value("groups_handed_out", int64_t{-1}) < 0) {
    return fail("the checkpoint " + r.value("checkpoint", std::string()) + " in " +
                checkpoints.string() +
                " holds no manager ledger (manager_snapshot): nothing to audit");
  }
  // Groups accounted for beyond those handed out are as wrong as lost ones (chaos fails on both).
  const bool clean = r.value("lost", int64_t{-1}) == 0 && r.value("duplicated", int64_t{-1}) == 0 &&
                     r.value("unaccounted_extra", int64_t{-1}) == 0;
  if (a.json) {
    nlohmann::json out = r;
    out["clean"] = clean;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf(
        "%s: checkpoint %s, %lld steps; %lld samples of %lld groups trained, %lld groups buffered "
        "or in flight, %lld handed out; lost %lld, duplicated %lld, accounted beyond those handed "
        "out %lld\n",
        clean ? "clean" : "NOT CLEAN", r.value("checkpoint", std::string()).c_str(),
        static_cast<long long>(r.value("steps", int64_t{0})),
        static_cast<long long>(r.value("samples_trained", int64_t{0})),
        static_cast<long long>(r.value("groups_trained", int64_t{0})),
        static_cast<long long>(r.value("groups_buffered_or_in_flight", int64_t{0})),
        static_cast<long long>(r.value("groups_handed_out", int64_t{0})),
        static_cast<long long>(r.value("lost", int64_t{0})),
        static_cast<long long>(r.value("duplicated", int64_t{0})),
        static_cast<long long>(r.value("unaccounted_extra", int64_t{0})));
  }
  return clean ? 0 : 1;
}

std::function<int()> SetupAudit(CLI::App* app) {
  auto a = std::make_shared<AuditArgs>();
  app->add_option("run_dir", a->run_dir, "the run's folder")->required();
  app->add_option("--checkpoints", a->checkpoints,
                  "the checkpoint folder (default RUN_DIR/checkpoints)");
  app->add_option("--trajectories", a->trajectories,
                  "the trajectory log (default RUN_DIR/trajectories.jsonl)");
  app->add_flag("--json", a->json, "print one JSON object");
  return [a] { return Run(*a); };
}

}  // namespace

LAMINAR_REGISTER_COMMAND("audit",
                         "check that a run trained every sample at most once and lost no prompt "
                         "(its checkpoint's ledger against its trajectory log)",
                         SetupAudit);

}  // namespace laminar::cli
