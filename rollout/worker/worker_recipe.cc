// Recipe keys to options; see worker_recipe.h.
#include "rollout/worker/worker_recipe.h"

namespace laminar::rollout {

StatusOr<RolloutWorkerOptions> RolloutWorkerOptionsOf(const Config& r, int64_t kv_bytes_per_token) {
  if (kv_bytes_per_token <= 0) {
    return InvalidArgumentError("recipe: kv_bytes_per_token must be > 0");
  }
  RolloutWorkerOptions w;
  w.engine.block_size = static_cast<int32_t>(r.GetInt("rollout.block_size"));
  LAMINAR_ASSIGN_OR_RETURN(
      w.engine.num_blocks,
      KvBlocksFor(r.GetInt("rollout.kv_cache_mb"), kv_bytes_per_token, w.engine.block_size),
      "recipe rollout.kv_cache_mb");
  w.engine.scheduler.max_num_seqs = r.GetInt("rollout.max_num_seqs");
  w.engine.scheduler.max_num_batched_tokens = r.GetInt("rollout.max_num_batched_tokens");
  LAMINAR_ASSIGN_OR_RETURN(w.weight_format,
                           engine::ParseWeightFormat(r.GetString("rollout.weight_dtype")));
  LAMINAR_ASSIGN_OR_RETURN(w.engine.speculative.drafter,
                           ParseDrafterKind(r.GetString("rollout.speculative.drafter")), "recipe");
  w.engine.speculative.max_draft_tokens = r.GetInt("rollout.speculative.max_draft_tokens");
  w.engine.speculative.adaptive = r.GetBool("rollout.speculative.adaptive");
  w.engine.speculative.async_draft = r.GetBool("rollout.speculative.async_draft");
  w.engine.speculative.layer_skip_keep = r.GetInt("rollout.speculative.layer_skip_keep");
  w.engine.speculative.draft_vocab = r.GetInt("rollout.speculative.draft_vocab");
  SuffixDrafterConfig& sx = w.engine.speculative.suffix;
  sx.max_match = static_cast<int32_t>(r.GetInt("rollout.speculative.suffix.max_match"));
  sx.min_match = static_cast<int32_t>(r.GetInt("rollout.speculative.suffix.min_match"));
  sx.max_continuations =
      static_cast<int32_t>(r.GetInt("rollout.speculative.suffix.max_continuations"));
  sx.recent_responses =
      static_cast<int32_t>(r.GetInt("rollout.speculative.suffix.recent_responses"));
  sx.min_share = r.GetFloat("rollout.speculative.suffix.min_share");
  w.draft_model_path = r.GetString("rollout.speculative.draft_model");
  w.engine.speculative.min_confidence = r.GetFloat("rollout.speculative.min_confidence");
  w.draft_weight_format = w.weight_format;
  if (const std::string dtype = r.GetString("rollout.speculative.draft_weight_dtype");
      dtype != "auto") {
    LAMINAR_ASSIGN_OR_RETURN(w.draft_weight_format, engine::ParseWeightFormat(dtype),
                             "recipe rollout.speculative.draft_weight_dtype");
  }
  if (w.engine.speculative.drafter == DrafterKind::kDraftModel) {
    if (w.draft_model_path.empty()) {
      return InvalidArgumentError(
          "recipe rollout.speculative.drafter: draft_model needs rollout.speculative.draft_model "
          "(a checkpoint)");
    }
  }
  LAMINAR_RETURN_IF_ERROR(w.engine.speculative.Validate(), "recipe");
  w.max_groups = static_cast<int32_t>(r.GetInt("rollout.max_groups"));
  w.partial_every_tokens = static_cast<int32_t>(r.GetInt("rollout.partial_every_tokens"));
  w.heartbeat_interval_ms = static_cast<int>(r.GetInt("rollout.heartbeat_interval_ms"));
  w.reward_failure_score = r.GetFloat("reward.failure_score");
  w.manager_timeout_s = r.GetFloat("rollout.manager_timeout_s");
  w.relay_timeout_s = r.GetFloat("rollout.relay_timeout_s");
  return w;
}

}  // namespace laminar::rollout
