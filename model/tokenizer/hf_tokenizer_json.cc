// ParseHfTokenizer: a Hugging Face tokenizer.json (model.type BPE) plus tokenizer_config.json,
// as SentencePiece-style BPE (byte_fallback / "▁" normalizer) or byte-level BPE (ByteLevel).
// Format: huggingface/tokenizers' serialization (tokenizers/src/.../serialization.rs).
#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/spm_tokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::model {

namespace {

using Json = nlohmann::json;

// "type" of a JSON object, or "" for null / non-objects.
std::string TypeOf(const Json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string();
}

// Calls `f` on `j` and, for Sequence types, on each member of `list_key`.
template <typename F>
void ForEachStep(const Json& j, const char* list_key, F f) {
  if (TypeOf(j) == "Sequence" && j.contains(list_key) && j[list_key].is_array()) {
    for (const Json& step : j[list_key]) f(step);
  } else if (j.is_object()) {
    f(j);
  }
}

// The content of a tokenizer_config token entry: a string or {"content": ...}.
std::string TokenContent(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) {
    return j["content"].get<std::string>();
  }
  return "";
}

Status ReadVocab(const Json& root, const std::string& source, Vocab* vocab) {
  const Json& model = root.at("model");
  const Json& vocab_json = model.at("vocab");
  size_t n = 0;
  for (const auto& [piece, id] : vocab_json.items()) n = std::max(n, id.get<size_t>() + 1);
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const Json& t : root["added_tokens"]) n = std::max(n, t.at("id").get<size_t>() + 1);
  }
  // Bound the size by the file: each entry takes at least a few bytes of JSON.
  if (n > vocab_json.size() + root.value("added_tokens", Json::array()).size()) {
    return InvalidArgumentError(source + ": token ids are not contiguous (largest id " +
                                std::to_string(n - 1) + ")");
  }
  vocab->pieces.assign(n, std::string());
  vocab->scores.assign(n, 0.0f);
  vocab->types.assign(n, TokenType::kUnused);
  std::vector<bool> seen(n, false);
  bool byte_fallback = model.value("byte_fallback", false);
  for (const auto& [piece, id_json] : vocab_json.items()) {
    auto id = id_json.get<size_t>();
    vocab->pieces[id] = piece;
    bool is_byte =
        byte_fallback && piece.size() == 6 && piece.rfind("<0x", 0) == 0 && piece[5] == '>';
    vocab->types[id] = is_byte ? TokenType::kByte : TokenType::kNormal;
    seen[id] = true;
  }
  std::string unk = model.contains("unk_token") && model["unk_token"].is_string()
                        ? model["unk_token"].get<std::string>()
                        : "";
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const Json& t : root["added_tokens"]) {
      auto id = t.at("id").get<size_t>();
      vocab->pieces[id] = t.at("content").get<std::string>();
      bool special = t.value("special", false);
      vocab->types[id] = !special                   ? TokenType::kUserDefined
                         : vocab->pieces[id] == unk ? TokenType::kUnknown
                                                    : TokenType::kControl;
      seen[id] = true;
    }
  }
  for (size_t id = 0; id < n; ++id) {
    if (!seen[id]) return InvalidArgumentError(source + ": no token has id " + std::to_string(id));
  }
  return OkStatus();
}

std::vector<std::pair<std::string, std::string>> ReadMerges(const Json& model) {
  std::vector<std::pair<std::string, std::string>> merges;
  if (!model.contains("merges")) return merges;
  for (const Json& m : model["merges"]) {
    if (m.is_array() && m.size() == 2) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      auto line = m.get<std::string>();
      size_t space = line.find(' ', line.empty() ? 0 : 1);
      if (space == std::string::npos) space = line.size();
      merges.emplace_back(line.substr(0, space), space < line.size() ? line.substr(space + 1) : "");
    }
  }
  return merges;
}

// Regex list and add_prefix_space of a byte-level pre_tokenizer.
Status ReadByteLevelPreTokenizer(const Json& pre, const std::string& source,
                                 ByteLevelBpeTokenizer::Options* options) {
  Status status;
  ForEachStep(pre, "pretokenizers", [&](const Json& step) {
    std::string type = TypeOf(step);
    if (type == "Split") {
      const Json& pattern = step.at("pattern");
      std::string behavior = step.value("behavior", "Isolated");
      if (behavior != "Isolated" || step.value("invert", false)) {
        status = UnimplementedError(source + ": Split pre-tokenizer with behavior " + behavior +
                                    " (only Isolated, invert false)");
      } else if (pattern.contains("Regex")) {
        options->pre_tokenizer_regexes.push_back(pattern["Regex"].get<std::string>());
      } else {
        options->pre_tokenizer_regexes.push_back("\\Q" + pattern.at("String").get<std::string>() +
                                                 "\\E");
      }
    } else if (type == "ByteLevel") {
      if (step.value("use_regex", true)) options->pre_tokenizer_regexes.emplace_back(kGpt2Regex);
      options->add_prefix_space = step.value("add_prefix_space", false);
    } else if (type == "Digits") {
      options->pre_tokenizer_regexes.emplace_back(
          step.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
    } else {
      status = UnimplementedError(source + ": pre_tokenizer type '" + type + "' is not supported");
    }
  });
  return status;
}

// Whether the tokenizer is SentencePiece-style and, if so, whether it adds the dummy prefix.
bool IsSentencePiece(const Json& root, bool* add_space_prefix) {
  *add_space_prefix = false;
  bool spm = root["model"].value("byte_fallback", false);
  ForEachStep(root.value("normalizer", Json()), "normalizers", [&](const Json& step) {
    if (TypeOf(step) == "Prepend") {
      spm = true;
      *add_space_prefix = true;
    }
    if (TypeOf(step) == "Replace" && step.value("content", "") == std::string(kSpmSpace))
      spm = true;
  });
  ForEachStep(root.value("pre_tokenizer", Json()), "pretokenizers", [&](const Json& step) {
    if (TypeOf(step) == "Metaspace") {
      spm = true;
      *add_space_prefix =
          step.value("prepend_scheme", "always") != "never" && step.value("add_prefix_space", true);
    }
  });
  return spm;
}

// BOS/EOS from a TemplateProcessing post_processor's "single" template.
void ReadPostProcessor(const Json& root, const std::unordered_map<std::string, int32_t>& ids,
                       Vocab* vocab) {
  ForEachStep(root.value("post_processor", Json()), "processors", [&](const Json& step) {
    if (TypeOf(step) != "TemplateProcessing" || !step.contains("single")) return;
    bool after_sequence = false;
    for (const Json& item : step["single"]) {
      if (item.contains("Sequence")) after_sequence = true;
      if (!item.contains("SpecialToken")) continue;
      auto it = ids.find(item["SpecialToken"].value("id", ""));
      if (it == ids.end()) continue;
      (after_sequence ? vocab->eos_id : vocab->bos_id) = it->second;
      (after_sequence ? vocab->add_eos : vocab->add_bos) = true;
    }
  });
}

void ReadConfig(const Json& config, const std::unordered_map<std::string, int32_t>& ids,
                Vocab* vocab) {
  auto find = [&](const char* key, int32_t* out) {
    if (!config.contains(key)) return;
    auto it = ids.find(TokenContent(config[key]));
    if (it != ids.end()) *out = it->second;
  };
  find("bos_token", &vocab->bos_id);
  find("eos_token", &vocab->eos_id);
  find("unk_token", &vocab->unk_id);
  find("pad_token", &vocab->pad_id);
  if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean()) {
    vocab->add_bos = config["add_bos_token"].get<bool>();
  }
  if (config.contains("add_eos_token") && config["add_eos_token"].is_boolean()) {
    vocab->add_eos = config["add_eos_token"].get<bool>();
  }
  if (config.contains("chat_template")) {
    const Json& t = config["chat_template"];
    if (t.is_string()) vocab->chat_template = t.get<std::string>();
    if (t.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const Json& named : t) {
        if (named.value("name", "") == "default")
          vocab->chat_template = named.value("template", "");
      }
    }
  }
}

StatusOr<std::unique_ptr<Tokenizer>> Build(const Json& root, const Json& config,
                                           const std::string& source) {
  const Json& model = root.at("model");
  if (TypeOf(model) != "BPE" &&
      !(model.is_object() && !model.contains("type") && model.contains("merges"))) {
    return UnimplementedError(source + ": model type '" + TypeOf(model) + "' (only BPE)");
  }
  Vocab vocab;
  LAMINAR_RETURN_IF_ERROR(ReadVocab(root, source, &vocab));
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t id = vocab.size() - 1; id >= 0; --id) ids[vocab.pieces[id]] = id;
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto it = ids.find(model["unk_token"].get<std::string>());
    if (it != ids.end()) vocab.unk_id = it->second;
  }
  ReadPostProcessor(root, ids, &vocab);
  if (config.is_object()) ReadConfig(config, ids, &vocab);
  auto merges = ReadMerges(model);
  bool add_space_prefix = false;
  if (IsSentencePiece(root, &add_space_prefix)) {
    std::vector<std::pair<int32_t, int32_t>> merge_ids;
    merge_ids.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      auto l = ids.find(merges[i].first), r = ids.find(merges[i].second);
      if (l == ids.end() || r == ids.end()) {
        return InvalidArgumentError(source + ": merge " + std::to_string(i) + " '" +
                                    merges[i].first + " " + merges[i].second +
                                    "' uses a piece not in the vocabulary");
      }
      merge_ids.push_back({l->second, r->second});
    }
    LAMINAR_ASSIGN_OR_RETURN(auto tok,
                             SentencePieceBpeTokenizer::FromMerges(std::move(vocab), merge_ids,
                                                                   {add_space_prefix}, source));
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }
  ByteLevelBpeTokenizer::Options options;
  options.ignore_merges = model.value("ignore_merges", false);
  LAMINAR_RETURN_IF_ERROR(
      ReadByteLevelPreTokenizer(root.value("pre_tokenizer", Json()), source, &options));
  std::string normalizer = TypeOf(root.value("normalizer", Json()));
  if (!normalizer.empty()) {
    LAMINAR_LOG(WARN, MODEL) << source << ": normalizer " << normalizer
                             << " is not applied (input is assumed already normalized)";
  }
  LAMINAR_ASSIGN_OR_RETURN(
      auto tok, ByteLevelBpeTokenizer::Create(std::move(vocab), merges, options, source));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> ParseHfTokenizer(const std::string& tokenizer_json,
                                                      const std::string& config_json,
                                                      const std::string& source) {
  Json root;
  try {
    root = Json::parse(tokenizer_json);
  } catch (const Json::exception& e) {
    // parse_error, and out_of_range for a number past 64 bits (found by tests/fuzz).
    return InvalidArgumentError(source + ": invalid JSON (truncated or corrupted?): " + e.what());
  }
  if (!root.is_object() || !root.contains("model")) {
    return InvalidArgumentError(source + ": not a Hugging Face tokenizer.json (no \"model\")");
  }
  Json config;
  if (!config_json.empty()) {
    config = Json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) {
      return InvalidArgumentError(source + ": tokenizer_config.json beside it is not valid JSON");
    }
  }
  try {
    return Build(root, config, source);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(source + ": malformed tokenizer.json: " + e.what());
  }
}

}  // namespace laminar::model
