// How the manager reads the prompt dataset, from a recipe's data.* keys.
#pragma once

#include <optional>
#include <string_view>

#include "core/config.h"
#include "core/status.h"
#include "rollout/manager/prompt_dataset.h"

namespace laminar::manager {

// How to read the prompt dataset, from the data.* keys (field names, chat format, overlong
// filter). data.chat_format "auto" takes the policy's own template, `checkpoint_chat_template`
// (model::ResolveChatFormat); std::nullopt leaves `chat` unset, for a caller that resolves it
// once the checkpoint is loaded. Errors: InvalidArgument naming data.chat_format for an unknown
// format, or for "auto" with a checkpoint without a (known) template.
StatusOr<PromptDatasetOptions> PromptDatasetOptionsOf(
    const Config& recipe, std::optional<std::string_view> checkpoint_chat_template);

}  // namespace laminar::manager
