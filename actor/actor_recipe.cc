// Recipe keys to options; see actor_recipe.h.
#include "actor/actor_recipe.h"

#include <cmath>
#include <cstdlib>

namespace laminar::actor {

StatusOr<trainer::TrainerConfig> TrainerConfigOf(const Config& r) {
  trainer::TrainerConfig t;
  // pi_old and pi_theta are of the distribution the rollouts sample from (greedy: the plain one).
  const double temperature = r.GetFloat("rollout.temperature");
  t.graph.temperature = temperature > 0 ? temperature : 1.0;
  t.optimizer.name = r.GetString("actor.optimizer");
  t.optimizer.lr = r.GetFloat("actor.lr");
  t.optimizer.weight_decay = r.GetFloat("actor.weight_decay");
  t.optimizer.grad_clip = r.GetFloat("actor.grad_clip");
  t.optimizer.lr_schedule = r.GetString("actor.lr_schedule");
  t.optimizer.warmup_steps = r.GetInt("actor.warmup_steps");
  t.loss.loss = r.GetString("actor.loss");
  t.loss.agg = r.GetString("actor.loss_agg_mode");
  t.loss.clip_ratio_low = r.GetFloat("actor.clip_ratio_low");
  t.loss.clip_ratio_high = r.GetFloat("actor.clip_ratio_high");
  t.loss.is_level = r.GetString("actor.is_level");
  t.loss.is_cap = r.GetFloat("actor.is_cap");
  t.loss.kl_coef = r.GetFloat("actor.kl_coef");
  t.loss.kl_estimator = r.GetString("actor.kl_estimator");
  t.loss.entropy_coef = r.GetFloat("actor.entropy_coef");
  t.advantage.estimator = r.GetString("actor.adv_estimator");
  t.mini_batch_size = r.GetInt("actor.mini_batch_size");
  t.micro_batch_tokens = r.GetInt("actor.micro_batch_tokens");
  t.ppo_epochs = static_cast<int>(r.GetInt("actor.ppo_epochs"));
  t.share_prompts = r.GetBool("actor.share_prompts");
  t.graph.bf16_compute = r.GetString("actor.compute") == "bf16";
  t.seed = static_cast<uint64_t>(r.GetInt("data.seed"));
  t.zero_stage = static_cast<int>(r.GetInt("actor.zero_stage"));
  LAMINAR_RETURN_IF_ERROR(trainer::ValidatePolicyLossConfig(t.loss), "recipe actor.*");
  return t;
}

StatusOr<ActorOptions> ActorOptionsOf(const Config& r) {
  ActorOptions a;
  LAMINAR_ASSIGN_OR_RETURN(a.trainer, TrainerConfigOf(r));
  a.groups_per_step = static_cast<int32_t>(r.GetInt("actor.groups_per_step"));
  a.collective.world_size = static_cast<int>(r.GetInt("actor.world_size"));
  a.collective.backend = a.collective.world_size > 1 ? "gloo" : "local";
  a.collective.rendezvous_address = r.GetString("actor.rendezvous");
  if (a.collective.world_size > 1) {
    const int n = a.collective.world_size;
    const std::string adv = r.GetString("actor.adv_estimator");
    if (adv != "grpo" && adv != "dr_grpo" && adv != "rloo") {
      return InvalidArgumentError(
          "recipe actor.world_size " + std::to_string(n) + " with actor.adv_estimator " + adv +
          ": data-parallel ranks split a step by whole groups, so only the group-local "
          "estimators (grpo, dr_grpo, rloo) train as one rank would");
    }
    if (a.groups_per_step % n != 0) {
      return InvalidArgumentError("recipe actor.groups_per_step " +
                                  std::to_string(a.groups_per_step) +
                                  " is not a multiple of actor.world_size " + std::to_string(n) +
                                  " (every rank trains the same number of groups)");
    }
    const int64_t group = r.GetInt("rollout.n");
    if (a.trainer.mini_batch_size % (n * group) != 0) {
      return InvalidArgumentError("recipe actor.mini_batch_size " +
                                  std::to_string(a.trainer.mini_batch_size) +
                                  " is not a multiple of actor.world_size " + std::to_string(n) +
                                  " x rollout.n " + std::to_string(group) +
                                  " (every mini-batch is whole groups, split evenly over the "
                                  "ranks)");
    }
    a.trainer.mini_batch_size /= n;
    if (a.collective.rendezvous_address.empty()) {
      return InvalidArgumentError(
          "recipe actor.world_size " + std::to_string(n) +
          " needs actor.rendezvous, tcp://HOST:PORT on rank 0's machine (laminar run sets it)");
    }
  }
  a.max_steps = r.GetInt("actor.max_steps");
  if (r.GetInt("actor.max_staleness") >= 0) a.max_staleness = r.GetInt("actor.max_staleness");
  a.drop_stale = r.GetBool("actor.drop_stale");
  a.checkpoint_dir = r.GetString("actor.checkpoint_dir");
  a.save_every = r.GetInt("actor.save_every");
  a.keep_last = static_cast<int>(r.GetInt("actor.keep_last"));
  a.export_dir = r.GetString("actor.export_dir");
  a.metrics_path = r.GetString("actor.metrics");
  a.faults = FaultLog(r.GetString("run.faults"));
  if (const char* start = std::getenv(kRunStartEnv)) {
    char* end = nullptr;
    const double t = std::strtod(start, &end);
    if (end != start && *end == '\0' && std::isfinite(t)) a.run_start_unix_s = t;
  }
  a.tensorboard_dir = r.GetString("actor.tensorboard_dir");
  a.progress_path = r.GetString("actor.progress_file");
  a.trajectory_log = r.GetString("actor.trajectory_log");
  return a;
}

}  // namespace laminar::actor
