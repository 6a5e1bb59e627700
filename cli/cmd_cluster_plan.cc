// `laminar cluster-plan --recipe R [key=value ...]`: where each role instance of a multi-machine
// launch goes (the recipe's cluster: section, launch/cluster.h), for launchers such as
// scripts/launch_slurm.sh, so that no script parses YAML. --format json prints one object;
// --format lines prints "nodes N", "coordinator_port P", "connect_timeout_s T", "keys_needed 0|1"
// (1: a multi-machine recipe without run.keys or run.insecure), "run_dir DIR" (the run's folder:
// --run-dir, else run.dir, else runs/<recipe name>), one "override KEY=VALUE" line per run file
// the recipe leaves unset (placed in that folder, as `laminar run` places them), "checkpoint 0|1"
// (1: the run's checkpoint folder holds a checkpoint to resume), then one
// "role ROLE RANK NODE" line per instance, in launch order, for `while read` in a shell.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"
#include "launch/cluster.h"
#include "launch/run_folder.h"
#include "recipe/recipe.h"

namespace laminar::cli {
namespace {

namespace fs = std::filesystem;

struct PlanArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  std::string format = "json";
  std::string run_dir;
};

int Run(const PlanArgs& a) {
  auto fail = [](std::string_view m) { return CommandFail("cluster-plan", m); };
  auto recipe = recipe::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return fail(recipe.status().message());
  auto plan = launch::ClusterPlanOf(*recipe);
  if (!plan.ok()) return fail(plan.status().message());
  if (a.format == "json") {
    std::printf("%s\n", plan->ToJson().dump(2).c_str());
    return 0;
  }
  // A multi-machine run authenticates its roles (launch/run_keys.h): the launcher makes keys when
  // the recipe names none and does not say run.insecure.
  const bool keys_needed = plan->num_nodes > 1 && recipe->GetString("run.keys").empty() &&
                           !recipe->GetBool("run.insecure");
  std::printf("nodes %d\ncoordinator_port %d\nconnect_timeout_s %g\nkeys_needed %d\n",
              plan->num_nodes, plan->coordinator_port, plan->connect_timeout_s,
              keys_needed ? 1 : 0);
  const fs::path dir = fs::absolute(launch::RunFolderOf(a.run_dir, *recipe, a.recipe));
  std::printf("run_dir %s\n", dir.c_str());
  std::vector<std::string> overrides = a.overrides;
  for (std::string& o : launch::RunFolderOverrides(*recipe, dir)) {
    std::printf("override %s\n", o.c_str());
    overrides.push_back(std::move(o));
  }
  auto effective = recipe::LoadRecipe(a.recipe, overrides);
  if (!effective.ok()) return fail(effective.status().message());
  const std::string checkpoints = effective->GetString("actor.checkpoint_dir");
  std::error_code ec;
  std::printf("checkpoint %d\n",
              !checkpoints.empty() && fs::exists(fs::path(checkpoints) / "latest", ec) ? 1 : 0);
  for (const launch::ClusterRole& r : plan->roles) {
    std::printf("role %s %d %d\n", r.role.c_str(), r.rank, r.node);
  }
  return 0;
}

std::function<int()> SetupPlan(CLI::App* app) {
  auto a = std::make_shared<PlanArgs>();
  app->add_option("--recipe", a->recipe, "the run's recipe (YAML)")->required();
  app->add_option("overrides", a->overrides, "dotted overrides, e.g. cluster.nodes=4");
  app->add_option("--format", a->format, "json, or lines for shell scripts")
      ->check(CLI::IsMember({"json", "lines"}));
  app->add_option(
      "--run-dir", a->run_dir,
      "the run's folder for --format lines (default: run.dir, else runs/<recipe name>)");
  return [a] { return Run(*a); };
}

}  // namespace

LAMINAR_REGISTER_COMMAND("cluster-plan",
                         "print which role instance runs on which node of a multi-machine launch "
                         "(the recipe's cluster: section)",
                         SetupPlan);

}  // namespace laminar::cli
