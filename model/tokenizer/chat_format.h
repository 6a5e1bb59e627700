// Chat formats: rendering a conversation into the prompt text a chat model was trained on.
// ChatML (Qwen2/2.5, SmolLM2), Llama-3 (3.0 and 3.1's dated system header) and Llama-2 ([INST]).
// Chosen by name in a recipe or detected from a checkpoint's Jinja chat template. The rendered
// text contains special-token text (e.g. "<|im_start|>") that the tokenizer maps to special tokens
// (parse_special), exactly as Hugging Face's apply_chat_template followed by encode does.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace laminar::model {

enum class ChatFormatKind { kChatML, kLlama3, kLlama2 };

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatFormat {
  ChatFormatKind kind = ChatFormatKind::kChatML;
  // Inserted as the first system turn when the conversation has none (SmolLM2 and Qwen2.5
  // templates do this); empty means no default.
  std::string default_system;
  // Llama-3.1 style: the system header always carries "Cutting Knowledge Date" / "Today Date".
  bool llama3_dated_system = false;
  std::string llama3_date = "26 Jul 2024";

  // "chatml", "llama3", "llama2" (the recipe's names).
  std::string Name() const;
};

// Formats by recipe name: "chatml", "qwen2" (ChatML + Qwen's default system message), "smollm2"
// (ChatML + SmolLM's default system message), "llama3", "llama3.1", "llama2". Unknown name:
// InvalidArgument listing the valid names.
StatusOr<ChatFormat> ChatFormatFromName(std::string_view name);

// The chat format a recipe key or a flag names: a name as ChatFormatFromName takes, "auto" (the
// checkpoint's own template, `checkpoint_template`, as DetectChatFormat reads it), or empty
// (std::nullopt: prompts are plain text). Errors: InvalidArgument for an unknown name;
// InvalidArgument ("auto" with an empty template) or NotFound (an unknown template) for "auto".
StatusOr<std::optional<ChatFormat>> ResolveChatFormat(std::string_view name,
                                                      std::string_view checkpoint_template);

// Detects the format of a Jinja chat template (tokenizer.chat_template from GGUF or
// tokenizer_config.json) by its markers, and extracts a default system message when the template
// inserts one. Unknown template: NotFound (callers fall back to a name from the recipe).
StatusOr<ChatFormat> DetectChatFormat(std::string_view jinja_template);

// Renders `messages` (non-empty; roles system/user/assistant; at most one system turn, first)
// and, if `add_generation_prompt`, the header of the assistant turn that the model completes.
// Errors: InvalidArgument naming the message index and what is wrong.
StatusOr<std::string> RenderChat(const ChatFormat& format, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt);

}  // namespace laminar::model
