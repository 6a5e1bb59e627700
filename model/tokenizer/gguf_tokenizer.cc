// GgufTokenizer: a tokenizer from GGUF tokenizer.ggml.* metadata (llama.cpp's conventions):
// model "llama" → SentencePiece-style BPE, model "gpt2" → byte-level BPE with tokenizer.ggml.pre.
#include "model/gguf.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/spm_tokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::model {

namespace {

StatusOr<Vocab> ReadGgufVocab(const GgufFile& gguf, bool spm) {
  const std::string& name = gguf.name();
  Vocab vocab;
  LAMINAR_ASSIGN_OR_RETURN(vocab.pieces, gguf.GetStringArray("tokenizer.ggml.tokens"));
  const size_t n = vocab.pieces.size();
  if (gguf.Has("tokenizer.ggml.scores")) {
    LAMINAR_ASSIGN_OR_RETURN(vocab.scores, gguf.GetFloatArray("tokenizer.ggml.scores"));
  } else {
    vocab.scores.assign(n, 0.0f);
  }
  vocab.types.assign(n, TokenType::kNormal);
  if (gguf.Has("tokenizer.ggml.token_type")) {
    LAMINAR_ASSIGN_OR_RETURN(auto types, gguf.GetIntArray("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return InvalidArgumentError(name + ": tokenizer.ggml.token_type has " +
                                  std::to_string(types.size()) + " entries for " +
                                  std::to_string(n) + " tokens");
    }
    for (size_t i = 0; i < n; ++i) {
      if (types[i] < 1 || types[i] > 6) {
        return InvalidArgumentError(name + ": tokenizer.ggml.token_type[" + std::to_string(i) +
                                    "] = " + std::to_string(types[i]) + " is not in 1..6");
      }
      vocab.types[i] = static_cast<TokenType>(types[i]);
    }
  }
  auto id = [&](const char* key) -> StatusOr<int32_t> {
    LAMINAR_ASSIGN_OR_RETURN(int64_t v, gguf.GetIntOr(key, -1));
    if (v == 0xFFFFFFFFll) v = -1;  // u32 -1: converters write it for "no such token"
    if (v < -1 || v >= static_cast<int64_t>(n)) {
      return InvalidArgumentError(name + ": " + key + " = " + std::to_string(v) +
                                  " outside the vocabulary of " + std::to_string(n));
    }
    return static_cast<int32_t>(v);
  };
  LAMINAR_ASSIGN_OR_RETURN(vocab.bos_id, id("tokenizer.ggml.bos_token_id"));
  LAMINAR_ASSIGN_OR_RETURN(vocab.eos_id, id("tokenizer.ggml.eos_token_id"));
  LAMINAR_ASSIGN_OR_RETURN(vocab.unk_id, id("tokenizer.ggml.unknown_token_id"));
  LAMINAR_ASSIGN_OR_RETURN(vocab.pad_id, id("tokenizer.ggml.padding_token_id"));
  // Without the key, llama.cpp adds BOS for SentencePiece vocabularies and for Llama 3's
  // (pre-tokenizer llama-bpe), whose vocabulary-only files omit it.
  LAMINAR_ASSIGN_OR_RETURN(std::string pre, gguf.GetStringOr("tokenizer.ggml.pre", ""));
  LAMINAR_ASSIGN_OR_RETURN(
      vocab.add_bos, gguf.GetBoolOr("tokenizer.ggml.add_bos_token", spm || pre == "llama-bpe"));
  LAMINAR_ASSIGN_OR_RETURN(vocab.add_eos, gguf.GetBoolOr("tokenizer.ggml.add_eos_token", false));
  LAMINAR_ASSIGN_OR_RETURN(vocab.chat_template, gguf.GetStringOr("tokenizer.chat_template", ""));
  LAMINAR_RETURN_IF_ERROR(vocab.Validate(name));
  return vocab;
}

StatusOr<std::unique_ptr<Tokenizer>> ByteLevelFromGguf(const GgufFile& gguf, Vocab vocab) {
  const std::string& name = gguf.name();
  LAMINAR_ASSIGN_OR_RETURN(auto merge_lines, gguf.GetStringArray("tokenizer.ggml.merges"));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merge_lines.size());
  for (size_t i = 0; i < merge_lines.size(); ++i) {
    const std::string& line = merge_lines[i];
    size_t space = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 >= line.size()) {
      return InvalidArgumentError(name + ": tokenizer.ggml.merges[" + std::to_string(i) + "] '" +
                                  line + "' is not two pieces separated by a space");
    }
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  ByteLevelBpeTokenizer::Options options;
  LAMINAR_ASSIGN_OR_RETURN(options.pre_tokenizer_name,
                           gguf.GetStringOr("tokenizer.ggml.pre", "gpt2"));
  if (options.pre_tokenizer_name == "default") options.pre_tokenizer_name = "gpt2";
  auto regexes = PreTokenizerRegexes(options.pre_tokenizer_name);
  LAMINAR_RETURN_IF_ERROR(regexes.status(), name);
  options.pre_tokenizer_regexes = std::move(*regexes);
  // llama.cpp (and Hugging Face's Llama 3 tokenizer.json) use ignore_merges for Llama 3 only.
  options.ignore_merges = options.pre_tokenizer_name == "llama-bpe";
  LAMINAR_ASSIGN_OR_RETURN(auto tok,
                           ByteLevelBpeTokenizer::Create(std::move(vocab), merges, options, name));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Open(path));
  return GgufTokenizer(gguf);
}

StatusOr<std::unique_ptr<Tokenizer>> GgufTokenizer(const GgufFile& gguf) {
  const std::string& path = gguf.name();
  LAMINAR_ASSIGN_OR_RETURN(std::string model, gguf.GetString("tokenizer.ggml.model"));
  if (model == "llama") {
    LAMINAR_ASSIGN_OR_RETURN(Vocab vocab, ReadGgufVocab(gguf, /*spm=*/true));
    SentencePieceBpeTokenizer::Options options;
    LAMINAR_ASSIGN_OR_RETURN(options.add_space_prefix,
                             gguf.GetBoolOr("tokenizer.ggml.add_space_prefix", true));
    LAMINAR_ASSIGN_OR_RETURN(
        auto tok, SentencePieceBpeTokenizer::FromScores(std::move(vocab), options, path));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }
  if (model == "gpt2") {
    LAMINAR_ASSIGN_OR_RETURN(Vocab vocab, ReadGgufVocab(gguf, /*spm=*/false));
    return ByteLevelFromGguf(gguf, std::move(vocab));
  }
  return UnimplementedError(path + ": tokenizer.ggml.model '" + model +
                            "' is not supported (supported: llama, gpt2)");
}

}  // namespace laminar::model
