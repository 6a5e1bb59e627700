// LoadTokenizer: format detection, and the loaders for llama2.c tokenizer.bin and OpenAI-style
// encoder.json + vocab.bpe. GGUF and Hugging Face tokenizer.json live in their own files.
#include "model/tokenizer/tokenizer_loader.h"

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "model/checkpoint.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/spm_tokenizer.h"

namespace laminar::model {

namespace fs = std::filesystem;

namespace {

TokenType Llama2cTokenType(int32_t id, std::string* piece) {
  // llama2.c stores BOS/EOS as "\n<s>\n" / "\n</s>\n"; we keep the SentencePiece names.
  if (id <= 2) {
    if (*piece == "<unk>") return TokenType::kUnknown;
    if (*piece == "\n<s>\n" || *piece == "<s>") {
      *piece = "<s>";
      return TokenType::kControl;
    }
    if (*piece == "\n</s>\n" || *piece == "</s>") {
      *piece = "</s>";
      return TokenType::kControl;
    }
  }
  if (piece->size() == 6 && piece->compare(0, 3, "<0x") == 0 && (*piece)[5] == '>') {
    return TokenType::kByte;
  }
  return TokenType::kNormal;
}

// Llama 3's 256 special tokens after its 128000-token base vocabulary (Llama 3.1/3.2 names).
std::string Llama3SpecialName(int32_t index) {
  switch (index) {
    case 0:
      return "<|begin_of_text|>";
    case 1:
      return "<|end_of_text|>";
    case 4:
      return "<|finetune_right_pad_id|>";
    case 6:
      return "<|start_header_id|>";
    case 7:
      return "<|end_header_id|>";
    case 8:
      return "<|eom_id|>";
    case 9:
      return "<|eot_id|>";
    case 10:
      return "<|python_tag|>";
    default:
      break;
  }
  int reserved = index < 4 ? index - 2 : index == 5 ? 2 : index - 8;
  return "<|reserved_special_token_" + std::to_string(reserved) + "|>";
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  return ParseLlama2cTokenizer(std::span<const uint8_t>(file->data(), file->size()), path);
}

StatusOr<std::unique_ptr<Tokenizer>> ParseLlama2cTokenizer(std::span<const uint8_t> bytes,
                                                           const std::string& path) {
  const uint8_t* p = bytes.data();
  const size_t size = bytes.size();
  if (size < 4) return InvalidArgumentError(path + ": too short for a llama2.c tokenizer.bin");
  uint32_t max_len = 0;
  std::memcpy(&max_len, p, 4);
  Vocab vocab;
  size_t pos = 4;
  while (pos < size) {
    const auto id = static_cast<int32_t>(vocab.pieces.size());
    if (size - pos < 8) {
      return DataLossError(path + ": token " + std::to_string(id) + " header at offset " +
                           std::to_string(pos) + " runs past end of file (" + std::to_string(size) +
                           " bytes)");
    }
    float score = 0;
    int32_t len = 0;
    std::memcpy(&score, p + pos, 4);
    std::memcpy(&len, p + pos + 4, 4);
    pos += 8;
    if (len < 0 || static_cast<size_t>(len) > size - pos || static_cast<uint32_t>(len) > max_len) {
      return DataLossError(path + ": token " + std::to_string(id) + " length " +
                           std::to_string(len) + " at offset " + std::to_string(pos - 4) +
                           " is negative, above max_token_length " + std::to_string(max_len) +
                           " or runs past end of file (" + std::to_string(size) + " bytes)");
    }
    std::string piece(reinterpret_cast<const char*>(p + pos), static_cast<size_t>(len));
    pos += static_cast<size_t>(len);
    TokenType type = Llama2cTokenType(id, &piece);
    if (type == TokenType::kNormal) {  // llama2.c's export wrote SentencePiece's "▁" as ' '
      for (size_t k = piece.find(' '); k != std::string::npos; k = piece.find(' ', k + 3)) {
        piece.replace(k, 1, kSpmSpace);
      }
    }
    vocab.types.push_back(type);
    vocab.pieces.push_back(std::move(piece));
    vocab.scores.push_back(score);
  }
  if (vocab.pieces.size() < 3) return InvalidArgumentError(path + ": fewer than 3 tokens");
  vocab.unk_id = vocab.types[0] == TokenType::kUnknown ? 0 : -1;
  vocab.bos_id = vocab.pieces[1] == "<s>" ? 1 : -1;
  vocab.eos_id = vocab.pieces[2] == "</s>" ? 2 : -1;
  vocab.add_bos = true;  // llama2.c and Llama 2 prepend BOS
  LAMINAR_ASSIGN_OR_RETURN(
      auto tok, SentencePieceBpeTokenizer::FromScores(std::move(vocab),
                                                      SentencePieceBpeTokenizer::Options{}, path));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

StatusOr<std::unique_ptr<Tokenizer>> LoadEncoderJsonTokenizer(
    const std::string& encoder_json_path) {
  const std::string bpe_path = (fs::path(encoder_json_path).parent_path() / "vocab.bpe").string();
  LAMINAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(encoder_json_path));
  LAMINAR_ASSIGN_OR_RETURN(std::string bpe_text, ReadFileToString(bpe_path));
  return ParseEncoderJsonTokenizer(text, bpe_text, encoder_json_path, bpe_path);
}

StatusOr<std::unique_ptr<Tokenizer>> ParseEncoderJsonTokenizer(const std::string& text,
                                                               const std::string& bpe_text,
                                                               const std::string& encoder_json_path,
                                                               const std::string& bpe_path) {
  auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return InvalidArgumentError(encoder_json_path + ": not a JSON object of piece → id");
  }
  Vocab vocab;
  const size_t n = json.size();
  vocab.pieces.resize(n);
  std::vector<bool> seen(n, false);
  for (const auto& [piece, id_json] : json.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() >= static_cast<int64_t>(n) || seen[id_json.get<size_t>()]) {
      return InvalidArgumentError(encoder_json_path + ": piece '" + piece +
                                  "' has an id that is not unique in [0, " + std::to_string(n) +
                                  ")");
    }
    seen[id_json.get<size_t>()] = true;
    vocab.pieces[id_json.get<size_t>()] = piece;
  }
  vocab.scores.assign(n, 0.0f);
  vocab.types.assign(n, TokenType::kNormal);
  ByteLevelBpeTokenizer::Options options;
  if (n > 0 && vocab.pieces[n - 1] == "<|endoftext|>") {  // GPT-2
    vocab.types[n - 1] = TokenType::kControl;
    vocab.bos_id = vocab.eos_id = static_cast<int32_t>(n - 1);
    options.pre_tokenizer_name = "gpt2";
  } else if (n == 128000) {  // the Llama 3 base vocabulary (tiktoken cl100k-style)
    for (int32_t i = 0; i < 256; ++i) {
      vocab.pieces.push_back(Llama3SpecialName(i));
      vocab.scores.push_back(0.0f);
      vocab.types.push_back(TokenType::kControl);
    }
    vocab.bos_id = 128000;
    vocab.eos_id = 128001;
    vocab.add_bos = true;
    options.pre_tokenizer_name = "llama-bpe";
    options.ignore_merges = true;
  } else {
    return UnimplementedError(encoder_json_path + ": neither GPT-2's nor Llama 3's encoder.json (" +
                              std::to_string(n) + " pieces); load a tokenizer.json instead");
  }
  LAMINAR_ASSIGN_OR_RETURN(options.pre_tokenizer_regexes,
                           PreTokenizerRegexes(options.pre_tokenizer_name));
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_start = 0;
  while (line_start < bpe_text.size()) {
    size_t line_end = bpe_text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = bpe_text.size();
    std::string_view line(bpe_text.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.substr(0, 9) == "#version:") continue;
    size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size()) {
      return InvalidArgumentError(bpe_path + ": merge line " + std::to_string(merges.size() + 1) +
                                  " is not two pieces separated by a space");
    }
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  LAMINAR_ASSIGN_OR_RETURN(auto tok, ByteLevelBpeTokenizer::Create(std::move(vocab), merges,
                                                                   options, encoder_json_path));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

namespace {

StatusOr<std::unique_ptr<Tokenizer>> LoadHfFile(const std::string& tokenizer_json_path) {
  LAMINAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(tokenizer_json_path));
  std::string config;
  auto config_path = fs::path(tokenizer_json_path).parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    LAMINAR_ASSIGN_OR_RETURN(config, ReadFileToString(config_path.string()));
  }
  return ParseHfTokenizer(text, config, tokenizer_json_path);
}

StatusOr<std::unique_ptr<Tokenizer>> LoadFromFolder(const std::string& path) {
  for (const char* name : {"tokenizer.json", "tokenizer.bin", "encoder.json"}) {
    auto candidate = fs::path(path) / name;
    if (fs::exists(candidate)) return LoadTokenizer(candidate.string());
  }
  return NotFoundError(path + ": folder holds no tokenizer.json, tokenizer.bin or encoder.json");
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFoundError(path + ": no such file or folder");
  if (fs::is_directory(path, ec)) return LoadFromFolder(path);
  LAMINAR_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  if (file->size() >= 4 && std::memcmp(file->data(), "GGUF", 4) == 0) {
    return LoadGgufTokenizer(path);
  }
  if (file->size() > 0 && file->data()[0] == '{') {
    auto name = fs::path(path).filename().string();
    if (name == "encoder.json") return LoadEncoderJsonTokenizer(path);
    if (name == "tokenizer_config.json") {
      return LoadHfFile((fs::path(path).parent_path() / "tokenizer.json").string());
    }
    return LoadHfFile(path);
  }
  if (EndsWith(path, ".bin")) {
    auto tok = LoadLlama2cTokenizer(path);
    if (tok.ok()) return tok;
    return InvalidArgumentError(path + ": not a llama2.c tokenizer.bin (" + tok.status().message() +
                                "); for a llama2.c model pass its tokenizer (e.g. tok512.bin)");
  }
  return InvalidArgumentError(path +
                              ": not a tokenizer: expected a GGUF file, tokenizer.json, "
                              "encoder.json (+vocab.bpe), a llama2.c tokenizer.bin or a folder "
                              "holding one");
}

StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& model_path,
                                                           const std::string& tokenizer_path) {
  if (!tokenizer_path.empty()) return LoadTokenizer(tokenizer_path);
  auto direct = LoadTokenizer(model_path);
  if (direct.ok() || !EndsWith(model_path, ".bin") || fs::is_directory(model_path)) return direct;
  // A llama2.c checkpoint: look for its tokenizer beside it.
  std::vector<fs::path> candidates;
  std::error_code ec;
  fs::path model(model_path);
  for (const auto& entry :
       fs::directory_iterator(model.parent_path().empty() ? "." : model.parent_path(), ec)) {
    std::string name = entry.path().filename().string();
    if (entry.path() == model || !EndsWith(name, ".bin")) continue;
    if (name == "tokenizer.bin" || name.rfind("tok", 0) == 0) candidates.push_back(entry.path());
  }
  if (candidates.size() == 1) return LoadTokenizer(candidates[0].string());
  // Not a llama2.c model either: the file's own error says more than "no tokenizer beside it".
  if (!DetectCheckpointFormat(model_path).ok()) return direct;
  return InvalidArgumentError(model_path + ": holds no tokenizer and " +
                              (candidates.empty()
                                   ? std::string("no tokenizer.bin/tok*.bin is beside it")
                                   : std::string("several tok*.bin are beside it")) +
                              "; pass the tokenizer explicitly (--tokenizer PATH)");
}

}  // namespace laminar::model
