// Recipe keys to options; see manager_recipe.h.
#include "rollout/manager/manager_recipe.h"

#include "model/tokenizer/chat_format.h"

namespace laminar::manager {

StatusOr<PromptDatasetOptions> PromptDatasetOptionsOf(
    const Config& r, std::optional<std::string_view> checkpoint_chat_template) {
  PromptDatasetOptions d;
  d.prompt_key = r.GetString("data.prompt_key");
  d.ground_truth_key = r.GetString("data.ground_truth_key");
  d.data_source_key = r.GetString("data.data_source_key");
  d.default_data_source = r.GetString("data.default_data_source");
  d.id_key = r.GetString("data.id_key");
  d.max_tokens_key = r.GetString("data.max_tokens_key");
  if (checkpoint_chat_template) {
    LAMINAR_ASSIGN_OR_RETURN(
        d.chat,
        model::ResolveChatFormat(r.GetString("data.chat_format"), *checkpoint_chat_template),
        "recipe data.chat_format");
  }
  d.system_message = r.GetString("data.system_message");
  d.max_prompt_tokens = r.GetInt("data.max_prompt_tokens");
  return d;
}

ManagerConfig ManagerConfigOf(const Config& r, std::span<const int64_t> eos_token_ids) {
  ManagerConfig mc;
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
    for (int64_t id : eos_token_ids) mc.sampling.add_stop_token_ids(static_cast<int32_t>(id));
  }
  // Generation may run ahead of training by what the rollouts hold plus two batches.
  mc.max_outstanding_groups = r.GetInt("rollout.num_workers") * r.GetInt("rollout.max_groups") +
                              2 * r.GetInt("actor.groups_per_step");
  return mc;
}

StatusOr<ManagerServerOptions> ManagerServerOptionsOf(const Config& r) {
  ManagerServerOptions so;
  LAMINAR_ASSIGN_OR_RETURN(so.mode, ParseRunMode(r.GetString("mode")), "recipe mode");
  so.groups_per_step = static_cast<int32_t>(r.GetInt("actor.groups_per_step"));
  so.heartbeat_timeout_s = r.GetFloat("rollout.heartbeat_timeout_s");
  so.repack.enabled = r.GetBool("repack.enabled") && so.mode == RunMode::kAsync;
  so.repack.max_batch = static_cast<int32_t>(r.GetInt("repack.max_batch"));
  so.repack_interval_s = r.GetFloat("repack.interval_s");
  so.faults = FaultLog(r.GetString("run.faults"));
  return so;
}

Status CheckPromptsFit(const PromptDataset& dataset, int64_t context, int64_t default_max_tokens) {
  for (const PromptRow& row : dataset.rows) {
    const int64_t budget = row.max_tokens > 0 ? row.max_tokens : default_max_tokens;
    if (static_cast<int64_t>(row.prompt_ids.size()) + budget - 1 > context) {
      return InvalidArgumentError(
          row.source + ": a prompt of " + std::to_string(row.prompt_ids.size()) +
          " tokens with max_tokens " + std::to_string(budget) +
          " does not fit the model's context of " + std::to_string(context) +
          " positions (lower rollout.max_tokens or set data.max_prompt_tokens)");
    }
  }
  return OkStatus();
}

}  // namespace laminar::manager
