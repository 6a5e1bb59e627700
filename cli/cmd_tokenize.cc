// `laminar tokenize`: UTF-8 text on stdin → token ids on stdout (or ids → text with --decode),
// with the tokenizer of a checkpoint file/folder or a tokenizer file.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>

#include "cli/command.h"
#include "model/model_path.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::string tokenizer;
  bool add_special = false;
  bool no_parse_special = false;
  bool decode = false;
  bool skip_special = false;
};

int Fail(const std::string& message, int code = 1) {
  return CommandFail("tokenize", message, code);
}

int RunEncode(const model::Tokenizer& tok, const TokenizeArgs& args, const std::string& input) {
  auto ids =
      tok.Encode(input, {.add_special = args.add_special, .parse_special = !args.no_parse_special});
  if (!ids.ok()) return Fail("stdin: " + ids.status().message());
  std::string line;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string((*ids)[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

int RunDecode(const model::Tokenizer& tok, const TokenizeArgs& args, const std::string& input) {
  std::istringstream in(input);
  std::vector<int32_t> ids;
  std::string word;
  while (in >> word) {
    size_t used = 0;
    long long id = 0;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || id < 0 || id >= tok.vocab_size()) {
      return Fail("stdin: '" + word + "' is not a token id in [0, " +
                  std::to_string(tok.vocab_size()) + ")");
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  auto text = tok.Decode(ids, args.skip_special);
  if (!text.ok()) return Fail(text.status().message());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

std::function<int()> SetupTokenize(CLI::App* app) {
  auto args = std::make_shared<TokenizeArgs>();
  app->add_option("--model", args->model,
                  "model name (smollm2-135m-instruct), checkpoint file or folder (GGUF, Hugging "
                  "Face folder, llama2.c .bin) or a "
                  "tokenizer file (tokenizer.json, encoder.json, tokenizer.bin)");
  app->add_option("--tokenizer", args->tokenizer,
                  "tokenizer file overriding the model's (e.g. tok512.bin for a llama2.c model; "
                  "by default the one tokenizer.bin/tok*.bin beside a llama2.c model is used)");
  app->add_flag("--add-special", args->add_special, "add BOS/EOS as the tokenizer's config says");
  app->add_flag("--no-parse-special", args->no_parse_special,
                "tokenize special-token text (e.g. <|im_start|>) as plain text");
  app->add_flag("--decode", args->decode,
                "read whitespace-separated ids on stdin and print the text");
  app->add_flag("--skip-special", args->skip_special, "with --decode: drop special tokens");
  app->footer(
      "Reads all of stdin as UTF-8 and prints the ids space-separated on one line. The input is "
      "encoded exactly, a trailing newline included (use printf, not echo, to avoid one).\n"
      "Exit codes: 0 ok, 1 error (message on stderr), 2 usage.");
  return [args]() -> int {
    if (args->model.empty() && args->tokenizer.empty()) {
      return Fail("--model PATH is required (or --tokenizer PATH)", 2);
    }
    std::string model_path = args->model;
    if (!model_path.empty()) {
      auto resolved = model::ResolveModelPath(model_path);
      if (!resolved.ok()) return Fail(resolved.status().message());
      model_path = *resolved;
    }
    auto tok = model::LoadTokenizerForModel(model_path.empty() ? args->tokenizer : model_path,
                                            args->tokenizer);
    if (!tok.ok()) return Fail(tok.status().message());
    std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    return args->decode ? RunDecode(**tok, *args, input) : RunEncode(**tok, *args, input);
  };
}

LAMINAR_REGISTER_COMMAND("tokenize", "text on stdin → token ids (or ids → text with --decode)",
                         SetupTokenize);

}  // namespace
}  // namespace laminar::cli
