// The roles of an RL run as processes (DESIGN.md §2; issue 8): `laminar manager`, `laminar
// rollout` and `laminar actor`, each reading the same recipe (YAML plus dotted overrides) and
// finding the others by endpoint. Each prints one JSON line on stdout once it serves or runs
// ({"role","id","endpoint","pid"}), logs to stderr, and stops cleanly on SIGTERM or SIGINT.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "actor/actor.h"
#include "actor/console.h"
#include "actor/recipe.h"
#include "cli/command.h"
#include "model/chat_format.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer_loader.h"
#include "rollout/manager/manager_server.h"
#include "rollout/manager/prompt_dataset.h"
#include "rollout/worker.h"

namespace laminar::cli {
namespace {

struct RoleArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  std::string id;
  std::string listen = "tcp://127.0.0.1:*";  // manager
  std::string manager;                       // rollout, actor
  std::vector<std::string> relays;           // rollout: local first; actor: the master
  bool resume = false;                       // actor
};

void PrintReady(const std::string& role, const std::string& id, const std::string& endpoint) {
  nlohmann::json ready = {{"role", role}, {"id", id}, {"endpoint", endpoint}, {"pid", getpid()}};
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);
}

// Blocks SIGTERM/SIGINT in every thread (call before starting any) and returns the set, for
// sigwait.
sigset_t BlockStopSignals() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGINT);
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
  return s;
}

// A thread that sets `stop` when a stop signal arrives; detached (the process ends with it).
void StopOnSignal(sigset_t signals, std::atomic<bool>* stop) {
  std::thread([signals, stop] {
    int sig = 0;
    sigwait(&signals, &sig);
    stop->store(true);
  }).detach();
}

struct Policy {
  model::Checkpoint checkpoint;
  std::unique_ptr<model::Tokenizer> tokenizer;
};

StatusOr<Policy> LoadPolicy(const Config& recipe) {
  LAMINAR_ASSIGN_OR_RETURN(std::string path,
                           model::ResolveModelPath(recipe.GetString("model.path")),
                           "recipe model.path");
  Policy p;
  LAMINAR_ASSIGN_OR_RETURN(p.checkpoint, model::LoadCheckpoint(path));
  LAMINAR_ASSIGN_OR_RETURN(p.tokenizer,
                           model::LoadTokenizerForModel(path, recipe.GetString("model.tokenizer")));
  return p;
}

int RunManager(const RoleArgs& a) {
  auto fail = [](std::string_view m) { return CommandFail("manager", m); };
  const sigset_t signals = BlockStopSignals();
  auto recipe = actor::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return fail(recipe.status().message());
  const Config& r = *recipe;
  auto policy = LoadPolicy(r);
  if (!policy.ok()) return fail(policy.status().message());
  auto d = actor::PromptDatasetOptionsOf(r, policy->checkpoint.chat_template);
  if (!d.ok()) return fail(d.status().message());
  // The rollouts score with the recipe's reward: refuse a bad one here, where the run starts.
  if (auto reward = actor::RewardOf(r); !reward.ok()) {
    return fail(std::string(reward.status().message()));
  }
  auto dataset = manager::LoadPromptDataset(r.GetString("data.path"), *policy->tokenizer, *d);
  if (!dataset.ok()) return fail("recipe data.path: " + std::string(dataset.status().message()));
  // Every prompt with its response budget must fit the policy's context, or no rollout could
  // ever run it.
  const int64_t context = policy->checkpoint.config.max_position_embeddings;
  for (const manager::PromptRow& row : dataset->rows) {
    const int64_t budget = row.max_tokens > 0 ? row.max_tokens : r.GetInt("rollout.max_tokens");
    if (static_cast<int64_t>(row.prompt_ids.size()) + budget - 1 > context) {
      return fail(row.source + ": a prompt of " + std::to_string(row.prompt_ids.size()) +
                  " tokens with max_tokens " + std::to_string(budget) +
                  " does not fit the model's context of " + std::to_string(context) +
                  " positions (lower rollout.max_tokens or set data.max_prompt_tokens)");
    }
  }
  manager::ManagerConfig mc;
  mc.num_samples = static_cast<int32_t>(r.GetInt("rollout.n"));
  mc.shuffle = r.GetBool("data.shuffle");
  mc.num_epochs = r.GetInt("data.num_epochs");
  mc.sampling.set_temperature(static_cast<float>(r.GetFloat("rollout.temperature")));
  mc.sampling.set_top_p(static_cast<float>(r.GetFloat("rollout.top_p")));
  mc.sampling.set_top_k(static_cast<int32_t>(r.GetInt("rollout.top_k")));
  mc.sampling.set_min_p(static_cast<float>(r.GetFloat("rollout.min_p")));
  mc.sampling.set_max_tokens(static_cast<int32_t>(r.GetInt("rollout.max_tokens")));
  mc.sampling.set_seed(static_cast<uint64_t>(r.GetInt("data.seed")));
  for (const std::string& s : r.GetStringList("rollout.stop")) mc.sampling.add_stop(s);
  if (r.GetBool("rollout.stop_at_eos")) {
    for (int64_t id : policy->checkpoint.config.eos_token_ids) {
      mc.sampling.add_stop_token_ids(static_cast<int32_t>(id));
    }
  }
  const int64_t b = r.GetInt("actor.groups_per_step");
  // Generation may run ahead of training by what the rollouts hold plus two batches.
  mc.max_outstanding_groups =
      r.GetInt("rollout.num_workers") * r.GetInt("rollout.max_groups") + 2 * b;
  manager::ManagerServerOptions so;
  so.endpoint = a.listen;
  auto mode = manager::ParseRunMode(r.GetString("mode"));
  if (!mode.ok()) return fail(mode.status().message());
  so.mode = *mode;
  so.groups_per_step = static_cast<int32_t>(b);
  so.heartbeat_timeout_s = r.GetFloat("rollout.heartbeat_timeout_s");
  so.repack.enabled = r.GetBool("repack.enabled") && *mode == manager::RunMode::kAsync;
  so.repack.max_batch = static_cast<int32_t>(r.GetInt("repack.max_batch"));
  so.repack_interval_s = r.GetFloat("repack.interval_s");
  auto server = manager::ManagerServer::Start(
      std::make_shared<const manager::PromptDataset>(std::move(*dataset)), mc, so);
  if (!server.ok()) return fail(server.status().message());
  PrintReady("manager", a.id.empty() ? "manager" : a.id, (*server)->endpoint());
  int sig = 0;
  sigwait(&signals, &sig);
  (*server)->Stop();
  return 0;
}

int RunRollout(const RoleArgs& a) {
  auto fail = [](std::string_view m) { return CommandFail("rollout", m); };
  const sigset_t signals = BlockStopSignals();
  auto recipe = actor::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return fail(recipe.status().message());
  auto policy = LoadPolicy(*recipe);
  if (!policy.ok()) return fail(policy.status().message());
  const model::ModelConfig& mc = policy->checkpoint.config;
  const int64_t kv_bytes =
      2 * mc.num_hidden_layers * mc.num_key_value_heads * mc.head_dim * int64_t{sizeof(float)};
  auto options = actor::RolloutWorkerOptionsOf(*recipe, kv_bytes);
  if (!options.ok()) return fail(options.status().message());
  auto reward = actor::RewardOf(*recipe);
  if (!reward.ok()) return fail(std::string(reward.status().message()));
  options->id = a.id.empty() ? "rollout/" + std::to_string(getpid()) : a.id;
  options->manager = a.manager;
  options->relays = a.relays;
  auto worker = rollout::RolloutWorker::Create(mc, policy->tokenizer.get(), std::move(*reward),
                                               std::move(*options));
  if (!worker.ok()) return fail(worker.status().message());
  std::atomic<bool> stop{false};
  StopOnSignal(signals, &stop);
  PrintReady("rollout", (*worker)->id(), a.manager);
  Status st = (*worker)->Run(stop);
  if (!st.ok()) return fail(st.message());
  return 0;
}

int RunActor(const RoleArgs& a) {
  auto fail = [](std::string_view m) { return CommandFail("actor", m); };
  const sigset_t signals = BlockStopSignals();
  auto recipe = actor::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return fail(recipe.status().message());
  auto policy = LoadPolicy(*recipe);
  if (!policy.ok()) return fail(policy.status().message());
  auto options = actor::ActorOptionsOf(*recipe);
  if (!options.ok()) return fail(options.status().message());
  if (a.relays.size() != 1) return fail("--relay: give the master relay's endpoint once");
  options->id = a.id.empty() ? "actor" : a.id;
  options->manager = a.manager;
  options->master_relay = a.relays.front();
  if (!options->export_dir.empty()) {
    // The tokenizer travels with the exported policy when it can be written as HF files.
    auto files =
        model::ExportHfTokenizerFiles(*policy->tokenizer, policy->checkpoint.chat_template);
    if (files.ok()) options->export_tokenizer_files = std::move(*files);
  }
  auto act = actor::Actor::Create(policy->checkpoint.config, policy->checkpoint.weights,
                                  std::move(*options), a.resume);
  if (!act.ok()) return fail(act.status().message());
  std::atomic<bool> stop{false};
  StopOnSignal(signals, &stop);
  PrintReady("actor", a.id.empty() ? "actor" : a.id, a.manager);
  const auto start = std::chrono::steady_clock::now();
  Status st = (*act)->Run(stop, [start](const actor::StepMetrics& m) {
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "%s\n", actor::ConsoleLine(m, elapsed_s).c_str());
  });
  if (!st.ok()) return fail(st.message());
  return 0;
}

void AddCommon(CLI::App* app, RoleArgs* a) {
  app->add_option("--recipe", a->recipe, "the run's recipe (YAML)")->required();
  app->add_option("overrides", a->overrides, "dotted overrides, e.g. actor.lr=2e-6");
  app->add_option("--id", a->id, "this process's name in logs and messages");
}

std::function<int()> SetupManager(CLI::App* app) {
  auto a = std::make_shared<RoleArgs>();
  AddCommon(app, a.get());
  app->add_option("--listen", a->listen, "control endpoint to bind (port * picks a free one)");
  return [a] { return RunManager(*a); };
}

std::function<int()> SetupRollout(CLI::App* app) {
  auto a = std::make_shared<RoleArgs>();
  AddCommon(app, a.get());
  app->add_option("--manager", a->manager, "the manager's control endpoint")->required();
  app->add_option("--relay", a->relays, "a relay's control endpoint (repeat; the local one first)")
      ->required()
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return [a] { return RunRollout(*a); };
}

std::function<int()> SetupActor(CLI::App* app) {
  auto a = std::make_shared<RoleArgs>();
  AddCommon(app, a.get());
  app->add_option("--manager", a->manager, "the manager's control endpoint")->required();
  app->add_option("--relay", a->relays, "the master relay's control endpoint")
      ->required()
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_flag("--resume", a->resume,
                "continue from the newest checkpoint in actor.checkpoint_dir");
  return [a] { return RunActor(*a); };
}

}  // namespace

LAMINAR_REGISTER_COMMAND("manager", "the rollout manager of an RL run (prompts, buffer, repack)",
                         SetupManager);
LAMINAR_REGISTER_COMMAND("rollout", "a rollout worker of an RL run", SetupRollout);
LAMINAR_REGISTER_COMMAND("actor", "the actor (trainer) of an RL run", SetupActor);

}  // namespace laminar::cli
