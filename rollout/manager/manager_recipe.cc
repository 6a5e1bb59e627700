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

}  // namespace laminar::manager
