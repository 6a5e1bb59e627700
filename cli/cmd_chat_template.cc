// `laminar chat-template`: renders a conversation with a model's chat format (detected from its
// checkpoint, or named), so a user sees exactly the prompt text the rollout will tokenize.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"
#include "model/checkpoint.h"
#include "model/gguf.h"
#include "model/model_path.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::cli {
namespace {

struct ChatArgs {
  std::string model;
  std::string format;
  std::string system;
  std::vector<std::string> user;
  std::vector<std::string> assistant;
  bool no_generation_prompt = false;
};

int Fail(const std::string& message, int code = 1) {
  return CommandFail("chat-template", message, code);
}

// The chat template text of a checkpoint without loading its weights.
StatusOr<std::string> ChatTemplateOf(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(model::CheckpointFormat format, model::DetectCheckpointFormat(path));
  if (format == model::CheckpointFormat::kGguf) {
    LAMINAR_ASSIGN_OR_RETURN(model::GgufFile gguf, model::GgufFile::Open(path));
    return gguf.GetStringOr("tokenizer.chat_template", "");
  }
  auto tok = model::LoadTokenizerForModel(path, "");
  if (!tok.ok()) return std::string();
  return (*tok)->vocab().chat_template;
}

int Run(const ChatArgs& a) {
  model::ChatFormat format;
  if (!a.format.empty()) {
    auto f = model::ChatFormatFromName(a.format);
    if (!f.ok()) return Fail(f.status().message(), 2);
    format = *f;
  } else {
    if (a.model.empty()) return Fail("give --model (to detect the format) or --format NAME", 2);
    auto path = model::ResolveModelPath(a.model);
    if (!path.ok()) return Fail(path.status().message());
    auto tmpl = ChatTemplateOf(*path);
    if (!tmpl.ok()) return Fail(tmpl.status().message());
    if (tmpl->empty()) return Fail(*path + " has no chat template; choose one with --format");
    auto f = model::DetectChatFormat(*tmpl);
    if (!f.ok()) return Fail(*path + ": " + f.status().message() + "; choose one with --format");
    format = *f;
  }
  std::vector<model::ChatMessage> messages;
  if (!a.system.empty()) messages.push_back({"system", a.system});
  // Turns alternate: user[0], assistant[0], user[1], ...
  if (a.assistant.size() > a.user.size()) {
    return Fail("more --assistant turns than --user turns; turns alternate user, assistant, ...",
                2);
  }
  for (size_t i = 0; i < a.user.size(); ++i) {
    messages.push_back({"user", a.user[i]});
    if (i < a.assistant.size()) messages.push_back({"assistant", a.assistant[i]});
  }
  auto text = model::RenderChat(format, messages, !a.no_generation_prompt);
  if (!text.ok()) return Fail(text.status().message());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

std::function<int()> SetupChatTemplate(CLI::App* app) {
  auto a = std::make_shared<ChatArgs>();
  app->add_option("--model", a->model, "checkpoint or model name whose chat template to use");
  app->add_option("--format", a->format,
                  "chatml, qwen2, smollm2, llama3, llama3.1 or llama2 (overrides the model's)");
  app->add_option("--system", a->system, "system message");
  app->add_option("--user", a->user, "user message (repeat for several turns)")->required();
  app->add_option("--assistant", a->assistant,
                  "assistant reply (repeatable); turns alternate user, assistant, user, ...");
  app->add_flag("--no-generation-prompt", a->no_generation_prompt, "omit the assistant header");
  return [a] { return Run(*a); };
}
LAMINAR_REGISTER_COMMAND("chat-template", "render a chat prompt with a model's chat format",
                         SetupChatTemplate);

}  // namespace
}  // namespace laminar::cli
