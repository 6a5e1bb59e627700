// The roles of an RL run as processes (docs/architecture.md): `laminar manager`, `laminar
// rollout` and `laminar actor`, each reading the same recipe (YAML plus dotted overrides) and
// finding the others by endpoint: given explicitly (--listen, --manager, --relay), or for a
// multi-machine launch through the coordinator (--rank i --coordinator tcp://HOST:PORT; the
// manager serves it, launch/cluster.h). Each prints one JSON line on stdout once it serves or runs
// ({"role","id","endpoint","pid"}), logs to stderr, and stops cleanly on SIGTERM or SIGINT.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actor/actor.h"
#include "actor/actor_recipe.h"
#include "actor/console.h"
#include "cli/command.h"
#include "core/host.h"
#include "core/logging.h"
#include "launch/cluster.h"
#include "launch/run_keys.h"
#include "model/checkpoint.h"
#include "model/model_path.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer_loader.h"
#include "recipe/recipe.h"
#include "reward/reward_recipe.h"
#include "rollout/manager/manager_recipe.h"
#include "rollout/manager/manager_server.h"
#include "rollout/manager/prompt_dataset.h"
#include "rollout/worker/worker.h"
#include "rollout/worker/worker_recipe.h"
#include "trainer/parameters.h"

namespace laminar::cli {
namespace {

struct RoleArgs {
  std::string recipe;
  std::vector<std::string> overrides;
  std::string id;
  std::string listen;               // manager; empty: tcp://127.0.0.1:*, or see --coordinator
  std::string manager;              // rollout, actor
  std::vector<std::string> relays;  // rollout: local first; actor: the master
  bool resume = false;              // actor
  // A multi-machine launch: the role instance and the coordinator that finds its peers.
  int rank = 0;
  std::string coordinator;
  std::string host;  // manager: the address the others reach it at; rollout: where pulls arrive
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

// rollout.speculative.draft_model's checkpoint when the recipe's drafter is draft_model (nullopt
// otherwise); its vocabulary must be the policy's. The actor publishes its weights, the rollouts
// take its architecture from it.
StatusOr<std::optional<model::Checkpoint>> LoadDraftModel(const Config& recipe,
                                                          const model::ModelConfig& policy) {
  LAMINAR_ASSIGN_OR_RETURN(
      rollout::DrafterKind drafter,
      rollout::ParseDrafterKind(recipe.GetString("rollout.speculative.drafter")), "recipe");
  if (drafter != rollout::DrafterKind::kDraftModel) return std::nullopt;
  const std::string key = "rollout.speculative.draft_model";
  if (recipe.GetString(key).empty()) {
    return InvalidArgumentError("recipe rollout.speculative.drafter: draft_model needs " + key +
                                " (a checkpoint)");
  }
  // The policy as its own draft: each rollout builds it from the versions it pulls.
  if (recipe.GetString(key) == rollout::kPolicyDraftModel) return std::nullopt;
  LAMINAR_ASSIGN_OR_RETURN(std::string path, model::ResolveModelPath(recipe.GetString(key)), key);
  LAMINAR_ASSIGN_OR_RETURN(model::Checkpoint ckpt, model::LoadCheckpoint(path), key);
  if (ckpt.config.vocab_size != policy.vocab_size) {
    return InvalidArgumentError(key + ": " + path + " has a vocabulary of " +
                                std::to_string(ckpt.config.vocab_size) +
                                " tokens, the policy's has " + std::to_string(policy.vocab_size));
  }
  return std::optional<model::Checkpoint>(std::move(ckpt));
}

int RunManager(const RoleArgs& a) {
  auto fail = [](std::string_view m) { return CommandFail("manager", m); };
  const sigset_t signals = BlockStopSignals();
  auto recipe = recipe::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return fail(recipe.status().message());
  if (Status s = launch::SecureRunTransport(*recipe); !s.ok()) return fail(s.message());
  const Config& r = *recipe;
  // With --coordinator the rendezvous comes up first, so that roles started beside the manager
  // find it while the manager still loads the model and the dataset.
  std::unique_ptr<launch::CoordinatorServer> coordinator;
  std::string listen = a.listen.empty() ? "tcp://127.0.0.1:*" : a.listen;
  std::string advertise_host;
  if (!a.coordinator.empty()) {
    auto plan = launch::ClusterPlanOf(r);
    if (!plan.ok()) return fail(plan.status().message());
    if (a.rank != 0) return fail("--rank " + std::to_string(a.rank) + ": there is one manager (0)");
    auto address = launch::ParseTcpAddress(a.coordinator);
    if (!address.ok()) return fail("--coordinator: " + std::string(address.status().message()));
    auto server = launch::CoordinatorServer::Start(*address, plan->Fingerprint());
    if (!server.ok()) return fail(server.status().message());
    coordinator = std::move(*server);
    // Reachable wherever the coordinator is: the same host, another port.
    advertise_host = a.host.empty() ? address->host : a.host;
    if (a.listen.empty()) {
      listen = "tcp://" +
               (!a.host.empty()                         ? a.host
                : launch::IsLoopbackHost(address->host) ? std::string("127.0.0.1")
                                                        : std::string("0.0.0.0")) +
               ":*";
    }
  }
  auto policy = LoadPolicy(r);
  if (!policy.ok()) return fail(policy.status().message());
  auto d = manager::PromptDatasetOptionsOf(r, policy->checkpoint.chat_template);
  if (!d.ok()) return fail(d.status().message());
  // The rollouts score with the recipe's reward: refuse a bad one here, where the run starts.
  if (auto reward = reward::RewardOf(r); !reward.ok()) {
    return fail(std::string(reward.status().message()));
  }
  auto dataset = manager::LoadPromptDataset(r.GetString("data.path"), *policy->tokenizer, *d);
  if (!dataset.ok()) return fail("recipe data.path: " + std::string(dataset.status().message()));
  if (Status fits =
          manager::CheckPromptsFit(*dataset, policy->checkpoint.config.max_position_embeddings,
                                   r.GetInt("rollout.max_tokens"));
      !fits.ok()) {
    return fail(fits.message());
  }
  const manager::ManagerConfig mc =
      manager::ManagerConfigOf(r, policy->checkpoint.config.eos_token_ids);
  auto so = manager::ManagerServerOptionsOf(r);
  if (!so.ok()) return fail(so.status().message());
  so->endpoint = listen;
  auto server = manager::ManagerServer::Start(
      std::make_shared<const manager::PromptDataset>(std::move(*dataset)), mc, *so);
  if (!server.ok()) return fail(server.status().message());
  std::string endpoint = (*server)->endpoint();
  if (coordinator) {
    endpoint = launch::AdvertisedEndpoint(endpoint, advertise_host);
    coordinator->Register("manager", 0, {{"endpoint", endpoint}, {"host", Hostname()}});
  }
  PrintReady("manager", a.id.empty() ? "manager" : a.id, endpoint);
  int sig = 0;
  sigwait(&signals, &sig);
  if (coordinator) {
    auto plan = launch::ClusterPlanOf(r);
    launch::OutliveActor(coordinator->Find("actor", 0), plan.ok() ? plan->stop_grace_s : 0,
                         "manager");
  }
  (*server)->Stop();
  return 0;
}

int RunRollout(const RoleArgs& a) {
  auto fail = [](std::string_view m) { return CommandFail("rollout", m); };
  const sigset_t signals = BlockStopSignals();
  auto recipe = recipe::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return fail(recipe.status().message());
  if (Status s = launch::SecureRunTransport(*recipe); !s.ok()) return fail(s.message());
  auto policy = LoadPolicy(*recipe);
  if (!policy.ok()) return fail(policy.status().message());
  const model::ModelConfig& mc = policy->checkpoint.config;
  auto options = rollout::RolloutWorkerOptionsOf(*recipe, rollout::KvBytesPerToken(mc));
  if (!options.ok()) return fail(options.status().message());
  // The draft_model drafter's architecture; its weights come from the relay with each version.
  auto draft = LoadDraftModel(*recipe, mc);
  if (!draft.ok()) return fail(draft.status().message());
  if (draft->has_value()) options->draft_model_config = (*draft)->config;
  draft->reset();  // only its architecture is needed here
  auto reward = reward::RewardOf(*recipe);
  if (!reward.ok()) return fail(std::string(reward.status().message()));
  options->id = !a.id.empty()            ? a.id
                : !a.coordinator.empty() ? "rollout/" + std::to_string(a.rank)
                                         : "rollout/" + std::to_string(getpid());
  options->manager = a.manager;
  options->relays = a.relays;
  if (!a.host.empty()) options->host = a.host;
  if (!a.coordinator.empty()) {
    auto plan = launch::ClusterPlanOf(*recipe);
    if (!plan.ok()) return fail(plan.status().message());
    auto client = launch::JoinCluster(*plan, "rollout", a.rank, a.coordinator,
                                      launch::StopSignalPending(signals));
    if (!client.ok()) return fail(client.status().message());
    // The actor registers once it has started (with --resume: restored the manager's snapshot,
    // which the manager refuses after handing out work), so rollouts ask for work only after.
    const int local_relay =
        plan->relay_of_node[static_cast<size_t>(plan->rollout_node[static_cast<size_t>(a.rank)])];
    std::vector<int> relay_ranks = {local_relay};
    if (local_relay != 0) relay_ranks.push_back(0);
    auto actor_info = (*client)->Lookup("actor", 0);
    auto manager = actor_info.ok() ? (*client)->Lookup("manager", 0) : actor_info;
    if (!manager.ok()) return fail(manager.status().message());
    options->manager = (*manager)["endpoint"].get<std::string>();
    for (int rank : relay_ranks) {
      auto relay = (*client)->Lookup("relay", rank);
      if (!relay.ok()) return fail(relay.status().message());
      options->relays.push_back((*relay)["control"].get<std::string>());
    }
    // Pulls from the head's relay, when its own node's is down, arrive at this node's address
    // on the coordinator's route.
    auto route = launch::RouteAddress((*client)->coordinator());
    if (!route.ok()) return fail(route.status().message());
    options->host = *route;
    std::string relays;
    for (const std::string& e : options->relays) relays += " " + e;
    LAMINAR_LOG(INFO, CLI) << options->id << " via the coordinator at " << a.coordinator
                           << ": manager " << options->manager << ", relays" << relays
                           << "; pulls arrive at " << options->host;
  }
  const std::string manager_endpoint = options->manager;
  auto worker = rollout::RolloutWorker::Create(mc, policy->tokenizer.get(), std::move(*reward),
                                               std::move(*options));
  if (!worker.ok()) return fail(worker.status().message());
  std::atomic<bool> stop{false};
  StopOnSignal(signals, &stop);
  PrintReady("rollout", (*worker)->id(), manager_endpoint);
  Status st = (*worker)->Run(stop);
  if (!st.ok()) return fail(st.message());
  return 0;
}

int RunActor(const RoleArgs& a) {
  auto fail = [](std::string_view m) { return CommandFail("actor", m); };
  const sigset_t signals = BlockStopSignals();
  auto recipe = recipe::LoadRecipe(a.recipe, a.overrides);
  if (!recipe.ok()) return fail(recipe.status().message());
  // Under a coordinator, data-parallel ranks meet rank 0 on the head, at the coordinator's host
  // and the port after it, unless the recipe names actor.rendezvous.
  if (!a.coordinator.empty() && recipe->GetInt("actor.world_size") > 1 &&
      recipe->GetString("actor.rendezvous").empty()) {
    auto head = launch::ParseTcpAddress(a.coordinator);
    if (!head.ok()) return fail("--coordinator " + std::string(head.status().message()));
    if (head->port == 65535) {
      return fail("--coordinator " + a.coordinator +
                  ": the actor ranks meet at the next port, and there is none; set "
                  "actor.rendezvous");
    }
    std::vector<std::string> overrides = a.overrides;
    overrides.push_back("actor.rendezvous=tcp://" + head->host + ":" +
                        std::to_string(head->port + 1));
    recipe = recipe::LoadRecipe(a.recipe, overrides);
    if (!recipe.ok()) return fail(recipe.status().message());
  }
  if (Status s = launch::SecureRunTransport(*recipe); !s.ok()) return fail(s.message());
  auto policy = LoadPolicy(*recipe);
  if (!policy.ok()) return fail(policy.status().message());
  auto options = actor::ActorOptionsOf(*recipe);
  if (!options.ok()) return fail(options.status().message());
  options->id = a.id.empty() ? "actor" : a.id;
  auto draft = LoadDraftModel(*recipe, policy->checkpoint.config);
  if (!draft.ok()) return fail(draft.status().message());
  if (draft->has_value()) {
    // Published in f32, like the policy (a quantized checkpoint is dequantized here).
    auto params = trainer::ParameterSet::FromWeights((*draft)->config, (*draft)->weights);
    if (!params.ok()) {
      return fail("rollout.speculative.draft_model: " + params.status().ToString());
    }
    options->draft_model_weights =
        std::make_shared<const model::WeightStore>(params->ToWeightStore());
  }
  if (a.rank > 0) {
    // A data-parallel rank: it meets rank 0 at actor.rendezvous and needs no other peer.
    if (a.rank >= options->collective.world_size) {
      return fail("--rank " + std::to_string(a.rank) + ": actor.world_size is " +
                  std::to_string(options->collective.world_size) + " (ranks 0.." +
                  std::to_string(options->collective.world_size - 1) + ")");
    }
    options->collective.rank = a.rank;
    options->id += "/" + std::to_string(a.rank);
    const std::string id = options->id;
    Status st = actor::RunActorRank(
        policy->checkpoint.config, policy->checkpoint.weights, *options, a.resume,
        [&] { PrintReady("actor", id, options->collective.rendezvous_address); });
    if (!st.ok()) return fail(st.message());
    return 0;
  }
  std::unique_ptr<launch::CoordinatorClient> coordinator;
  if (!a.coordinator.empty()) {
    auto plan = launch::ClusterPlanOf(*recipe);
    if (!plan.ok()) return fail(plan.status().message());
    auto client = launch::JoinCluster(*plan, "actor", a.rank, a.coordinator,
                                      launch::StopSignalPending(signals));
    if (!client.ok()) return fail(client.status().message());
    coordinator = std::move(*client);
    auto manager = coordinator->Lookup("manager", 0);
    if (!manager.ok()) return fail(manager.status().message());
    auto relay = coordinator->Lookup("relay", 0);
    if (!relay.ok()) return fail(relay.status().message());
    options->manager = (*manager)["endpoint"].get<std::string>();
    options->master_relay = (*relay)["control"].get<std::string>();
    LAMINAR_LOG(INFO, CLI) << options->id << " via the coordinator at " << a.coordinator
                           << ": manager " << options->manager << ", master relay "
                           << options->master_relay;
  } else {
    if (a.relays.size() != 1) return fail("--relay: give the master relay's endpoint once");
    options->manager = a.manager;
    options->master_relay = a.relays.front();
  }
  const std::string manager_endpoint = options->manager;
  if (!options->export_dir.empty()) {
    // The tokenizer travels with the exported policy when it can be written as HF files.
    auto files =
        model::ExportHfTokenizerFiles(*policy->tokenizer, policy->checkpoint.chat_template);
    if (files.ok()) options->export_tokenizer_files = std::move(*files);
  }
  auto act = actor::Actor::Create(policy->checkpoint.config, policy->checkpoint.weights,
                                  std::move(*options), a.resume);
  if (!act.ok()) return fail(act.status().message());
  // Rollouts wait for this: only now may they ask the manager for work (see RunRollout).
  if (coordinator) {
    Status st = coordinator->Register("actor", 0, [&] {
      nlohmann::json info = launch::ProcessIdentity();  // for OutliveActor
      info["id"] = a.id.empty() ? "actor" : a.id;
      return info;
    }());
    if (!st.ok()) return fail(st.message());
  }
  std::atomic<bool> stop{false};
  StopOnSignal(signals, &stop);
  PrintReady("actor", a.id.empty() ? "actor" : a.id, manager_endpoint);
  const auto start = std::chrono::steady_clock::now();
  Status st = (*act)->Run(stop, [start](const actor::StepMetrics& m) {
    const double elapsed_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "%s\n", actor::ConsoleLine(m, elapsed_s).c_str());
  });
  if (!st.ok() && (*act)->lost_a_rank()) {
    return CommandFail("actor",
                       std::string(st.message()) +
                           "; a data-parallel rank is lost: start every rank again with "
                           "--resume to continue from the last checkpoint",
                       kExitLostRank);
  }
  if (!st.ok()) return fail(st.message());
  return 0;
}

void AddCommon(CLI::App* app, RoleArgs* a) {
  app->add_option("--recipe", a->recipe, "the run's recipe (YAML)")->required();
  app->add_option("overrides", a->overrides, "dotted overrides, e.g. actor.lr=2e-6");
  app->add_option("--id", a->id, "this process's name in logs and messages");
  app->add_option("--rank", a->rank,
                  "with --coordinator: which instance of the role this is (`laminar "
                  "cluster-plan` lists them); actor: its data-parallel rank (actor.world_size; "
                  "ranks above 0 meet rank 0 at actor.rendezvous and need no other peer)")
      ->check(CLI::NonNegativeNumber);
}

// --coordinator, which replaces the explicit endpoints (--manager, --relay).
CLI::Option* AddCoordinator(CLI::App* app, RoleArgs* a) {
  return app->add_option("--coordinator", a->coordinator,
                         "tcp://HEAD:PORT of a multi-machine launch: find the other roles there "
                         "(cluster.coordinator_port; the manager serves it)");
}

// A rollout or actor needs --coordinator, or its peers' endpoints.
std::function<int()> NeedsPeers(const std::string& role, std::shared_ptr<RoleArgs> a,
                                int (*run)(const RoleArgs&)) {
  return [role, a, run] {
    const bool actor_rank = role == "actor" && a->rank > 0;
    if (!actor_rank && a->coordinator.empty() && (a->manager.empty() || a->relays.empty())) {
      return CommandFail(role, "give --coordinator, or --manager and --relay", 2);
    }
    return run(*a);
  };
}

std::function<int()> SetupManager(CLI::App* app) {
  auto a = std::make_shared<RoleArgs>();
  AddCommon(app, a.get());
  app->add_option("--listen", a->listen,
                  "control endpoint to bind (port * picks a free one; default tcp://127.0.0.1:*, "
                  "with --coordinator every interface)");
  app->add_option("--coordinator", a->coordinator,
                  "tcp://HEAD:PORT of a multi-machine launch: serve the coordinator there (on "
                  "every interface, or on 127.0.0.1 for a loopback HEAD) for the other roles");
  app->add_option("--host", a->host,
                  "with --coordinator: the address the other roles reach the manager at "
                  "(default: the coordinator's HEAD)");
  return [a] { return RunManager(*a); };
}

std::function<int()> SetupRollout(CLI::App* app) {
  auto a = std::make_shared<RoleArgs>();
  AddCommon(app, a.get());
  CLI::Option* coordinator = AddCoordinator(app, a.get());
  app->add_option("--manager", a->manager, "the manager's control endpoint")->excludes(coordinator);
  app->add_option("--relay", a->relays, "a relay's control endpoint (repeat; the local one first)")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->excludes(coordinator);
  app->add_option("--host", a->host,
                  "the address of this machine that relays send pulled versions to (default "
                  "127.0.0.1; with a --relay on another machine, one it reaches)")
      ->excludes(coordinator);
  return NeedsPeers("rollout", a, RunRollout);
}

std::function<int()> SetupActor(CLI::App* app) {
  auto a = std::make_shared<RoleArgs>();
  AddCommon(app, a.get());
  CLI::Option* coordinator = AddCoordinator(app, a.get());
  app->add_option("--manager", a->manager, "the manager's control endpoint")->excludes(coordinator);
  app->add_option("--relay", a->relays, "the master relay's control endpoint")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->excludes(coordinator);
  app->add_flag("--resume", a->resume,
                "continue from the newest checkpoint in actor.checkpoint_dir");
  return NeedsPeers("actor", a, RunActor);
}

}  // namespace

LAMINAR_REGISTER_COMMAND("manager", "the rollout manager of an RL run (prompts, buffer, repack)",
                         SetupManager);
LAMINAR_REGISTER_COMMAND("rollout", "a rollout worker of an RL run", SetupRollout);
LAMINAR_REGISTER_COMMAND("actor", "the actor (trainer) of an RL run", SetupActor);

}  // namespace laminar::cli
