// How the manager reads the prompt dataset, from a recipe's data.* keys.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/config.h"
#include "core/status.h"
#include "rollout/manager/manager_server.h"
#include "rollout/manager/manager_state.h"
#include "rollout/manager/prompt_dataset.h"

namespace laminar::manager {

// How to read the prompt dataset, from the data.* keys (field names, chat format, overlong
// filter). data.chat_format "auto" takes the policy's own template, `checkpoint_chat_template`
// (model::ResolveChatFormat); std::nullopt leaves `chat` unset, for a caller that resolves it
// once the checkpoint is loaded. Errors: InvalidArgument naming data.chat_format for an unknown
// format, or for "auto" with a checkpoint without a (known) template.
StatusOr<PromptDatasetOptions> PromptDatasetOptionsOf(
    const Config& recipe, std::optional<std::string_view> checkpoint_chat_template);

// The manager's state configuration from rollout.* (samples per prompt, sampling, stops: the
// policy's `eos_token_ids` when rollout.stop_at_eos), data.* (order, epochs, seed) and how far
// generation may run ahead of training (what the rollouts hold plus two batches).
ManagerConfig ManagerConfigOf(const Config& recipe, std::span<const int64_t> eos_token_ids);

// The manager server's options from mode, actor.groups_per_step, rollout.heartbeat_timeout_s and
// repack.* (repack runs in async mode only). The endpoint is left for the caller. Errors:
// InvalidArgument naming mode.
StatusOr<ManagerServerOptions> ManagerServerOptionsOf(const Config& recipe);

// InvalidArgument naming the first row whose prompt with its response budget (its own
// max_tokens, else `default_max_tokens`) does not fit `context` positions: no rollout could run it.
Status CheckPromptsFit(const PromptDataset& dataset, int64_t context, int64_t default_max_tokens);

}  // namespace laminar::manager
