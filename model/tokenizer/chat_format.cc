// Chat format rendering and Jinja template detection.
#include "model/tokenizer/chat_format.h"

#include <regex>

namespace laminar::model {
namespace {

constexpr char kSmolLMSystem[] =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
constexpr char kQwenSystem[] =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// Jinja's `| trim`: strips leading and trailing whitespace.
std::string Trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

Status ValidateMessages(const ChatFormat& format, std::span<const ChatMessage> messages) {
  if (messages.empty()) return InvalidArgumentError("chat: the conversation has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return InvalidArgumentError("chat: message " + std::to_string(i) + " has role '" + role +
                                  "'; expected system, user or assistant");
    }
    if (role == "system" && i != 0 && format.kind != ChatFormatKind::kChatML) {
      return InvalidArgumentError("chat: message " + std::to_string(i) +
                                  " is a system message; the " + format.Name() +
                                  " format allows one, first");
    }
  }
  if (format.kind == ChatFormatKind::kLlama2) {
    size_t start = messages[0].role == "system" ? 1 : 0;
    for (size_t i = start; i < messages.size(); ++i) {
      const char* want = (i - start) % 2 == 0 ? "user" : "assistant";
      if (messages[i].role != want) {
        return InvalidArgumentError("chat: message " + std::to_string(i) + " has role '" +
                                    messages[i].role +
                                    "'; llama2 needs user/assistant to alternate");
      }
    }
  }
  return OkStatus();
}

std::string RenderChatML(const ChatFormat& f, std::span<const ChatMessage> messages, bool gen) {
  std::string out;
  if (messages[0].role != "system" && !f.default_system.empty()) {
    out += "<|im_start|>system\n" + f.default_system + "<|im_end|>\n";
  }
  for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// Follows Meta's Llama-3 / 3.1 templates: contents are trimmed; 3.1 always emits a system header
// with the knowledge and today dates.
std::string RenderLlama3(const ChatFormat& f, std::span<const ChatMessage> messages, bool gen) {
  auto header = [](const std::string& role) {
    return "<|start_header_id|>" + role + "<|end_header_id|>\n\n";
  };
  std::string out = "<|begin_of_text|>";
  size_t first = 0;
  std::string system = f.default_system;
  if (messages[0].role == "system") {
    system = Trim(messages[0].content);
    first = 1;
  }
  if (f.llama3_dated_system) {
    out += header("system") +
           "Cutting Knowledge Date: December 2023\nToday Date: " + f.llama3_date + "\n\n" + system +
           "<|eot_id|>";
  } else if (first == 1 || !system.empty()) {
    out += header("system") + system + "<|eot_id|>";
  }
  for (size_t i = first; i < messages.size(); ++i) {
    out += header(messages[i].role) + Trim(messages[i].content) + "<|eot_id|>";
  }
  if (gen) out += header("assistant");
  return out;
}

// Meta's Llama-2 chat layout: the system prompt folds into the first user turn.
std::string RenderLlama2(const ChatFormat& f, std::span<const ChatMessage> messages, bool gen) {
  size_t first = 0;
  std::string system = f.default_system;
  if (messages[0].role == "system") {
    system = messages[0].content;
    first = 1;
  }
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (m.role == "user") {
      std::string content = Trim(m.content);
      if (i == first && !system.empty())
        content = "<<SYS>>\n" + Trim(system) + "\n<</SYS>>\n\n" + content;
      out += "<s>[INST] " + content + " [/INST]";
    } else {
      out += " " + Trim(m.content) + " </s>";
    }
  }
  (void)gen;  // the open [INST] ... [/INST] already asks the model to answer
  return out;
}

}  // namespace

std::string ChatFormat::Name() const {
  switch (kind) {
    case ChatFormatKind::kChatML:
      return "chatml";
    case ChatFormatKind::kLlama3:
      return "llama3";
    case ChatFormatKind::kLlama2:
      return "llama2";
  }
  return "?";
}

StatusOr<std::optional<ChatFormat>> ResolveChatFormat(std::string_view name,
                                                      std::string_view checkpoint_template) {
  if (name.empty()) return std::optional<ChatFormat>();
  if (name != "auto") {
    LAMINAR_ASSIGN_OR_RETURN(ChatFormat f, ChatFormatFromName(name));
    return std::optional<ChatFormat>(std::move(f));
  }
  if (checkpoint_template.empty()) {
    return InvalidArgumentError(
        "chat format 'auto': the checkpoint has no chat template; name a format instead");
  }
  LAMINAR_ASSIGN_OR_RETURN(ChatFormat f, DetectChatFormat(checkpoint_template),
                           "chat format 'auto'");
  return std::optional<ChatFormat>(std::move(f));
}

StatusOr<ChatFormat> ChatFormatFromName(std::string_view name) {
  ChatFormat f;
  if (name == "chatml") {
    f.kind = ChatFormatKind::kChatML;
  } else if (name == "qwen2") {
    f.kind = ChatFormatKind::kChatML;
    f.default_system = kQwenSystem;
  } else if (name == "smollm2") {
    f.kind = ChatFormatKind::kChatML;
    f.default_system = kSmolLMSystem;
  } else if (name == "llama3") {
    f.kind = ChatFormatKind::kLlama3;
  } else if (name == "llama3.1") {
    f.kind = ChatFormatKind::kLlama3;
    f.llama3_dated_system = true;
  } else if (name == "llama2") {
    f.kind = ChatFormatKind::kLlama2;
  } else {
    return InvalidArgumentError(
        "unknown chat format '" + std::string(name) +
        "'; expected one of chatml, qwen2, smollm2, llama3, llama3.1, llama2");
  }
  return f;
}

StatusOr<ChatFormat> DetectChatFormat(std::string_view jinja_template) {
  std::string t(jinja_template);
  ChatFormat f;
  if (t.find("<|im_start|>") != std::string::npos) {
    f.kind = ChatFormatKind::kChatML;
    // A literal default system turn, written with a real newline or a Jinja "\n" escape.
    static const std::regex kDefault(R"(<\|im_start\|>system(?:\\n|\n)([^'"{}<\\]+)<\|im_end\|>)");
    std::smatch m;
    if (std::regex_search(t, m, kDefault)) f.default_system = m[1].str();
    return f;
  }
  if (t.find("<|start_header_id|>") != std::string::npos) {
    f.kind = ChatFormatKind::kLlama3;
    f.llama3_dated_system = t.find("Cutting Knowledge Date") != std::string::npos;
    return f;
  }
  if (t.find("[INST]") != std::string::npos) {
    f.kind = ChatFormatKind::kLlama2;
    return f;
  }
  return NotFoundError("chat template not recognised (no ChatML, Llama-3 or [INST] markers)");
}

StatusOr<std::string> RenderChat(const ChatFormat& format, std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) {
  LAMINAR_RETURN_IF_ERROR(ValidateMessages(format, messages));
  switch (format.kind) {
    case ChatFormatKind::kChatML:
      return RenderChatML(format, messages, add_generation_prompt);
    case ChatFormatKind::kLlama3:
      return RenderLlama3(format, messages, add_generation_prompt);
    case ChatFormatKind::kLlama2:
      return RenderLlama2(format, messages, add_generation_prompt);
  }
  return InternalError("unknown chat format kind");
}

}  // namespace laminar::model
