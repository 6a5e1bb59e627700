// ExportHfTokenizerFiles: tokenizer.json, tokenizer_config.json and special_tokens_map.json for a
// tokenizer, in the shapes Hugging Face uses for Llama 2 (SentencePiece BPE with byte_fallback)
// and for GPT-2 / Llama 3 (byte-level BPE).
#include <nlohmann/json.hpp>

#include "model/tokenizer/bpe_tokenizer.h"
#include "model/tokenizer/spm_tokenizer.h"
#include "model/tokenizer/tokenizer_loader.h"

namespace laminar::model {

namespace {

using Json = nlohmann::json;  // sorted keys: ordered_json looks keys up linearly

Json AddedTokens(const Tokenizer& tok) {
  Json out = Json::array();
  for (int32_t id : tok.SpecialTokens()) {
    out.push_back({{"id", id},
                   {"content", tok.TokenToPiece(id)},
                   {"single_word", false},
                   {"lstrip", false},
                   {"rstrip", false},
                   {"normalized", false},
                   {"special", tok.vocab().types[id] != TokenType::kUserDefined}});
  }
  return out;
}

Json PostProcessor(const Vocab& v) {
  Json single = Json::array(), pair = Json::array(), specials = Json::object();
  auto add_special = [&](int32_t id, Json* seq, int type_id) {
    seq->push_back({{"SpecialToken", {{"id", v.pieces[id]}, {"type_id", type_id}}}});
    specials[v.pieces[id]] = {{"id", v.pieces[id]}, {"ids", {id}}, {"tokens", {v.pieces[id]}}};
  };
  bool bos = v.add_bos && v.bos_id >= 0, eos = v.add_eos && v.eos_id >= 0;
  for (int type_id = 0; type_id < 2; ++type_id) {
    Json* seq = type_id == 0 ? &single : &pair;
    for (int part = 0; part <= type_id; ++part) {
      if (bos) add_special(v.bos_id, seq, part);
      seq->push_back({{"Sequence", {{"id", part == 0 ? "A" : "B"}, {"type_id", part}}}});
      if (eos) add_special(v.eos_id, seq, part);
    }
  }
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", pair},
          {"special_tokens", specials}};
}

Json BpeModel(const Tokenizer& tok, const std::vector<std::pair<int32_t, int32_t>>& merges,
              bool spm, bool ignore_merges) {
  const Vocab& v = tok.vocab();
  Json vocab = Json::object();
  for (int32_t id = 0; id < v.size(); ++id) {
    if (!vocab.contains(v.pieces[id])) vocab[v.pieces[id]] = id;
  }
  bool has_space = false;
  for (const auto& [l, r] : merges) {
    has_space = has_space || v.pieces[l].find(' ') != std::string::npos ||
                v.pieces[r].find(' ') != std::string::npos;
  }
  Json merge_list = Json::array();
  for (const auto& [l, r] : merges) {
    if (has_space) {
      merge_list.push_back({v.pieces[l], v.pieces[r]});
    } else {
      merge_list.push_back(v.pieces[l] + " " + v.pieces[r]);
    }
  }
  Json unk = v.unk_id >= 0 ? Json(v.pieces[v.unk_id]) : Json();
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", unk},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", spm},
          {"byte_fallback", spm},
          {"ignore_merges", ignore_merges},
          {"vocab", vocab},
          {"merges", merge_list}};
}

Json SpmTokenizerJson(const SentencePieceBpeTokenizer& tok) {
  const bool prefix = tok.options().add_space_prefix;
  const std::string space(kSpmSpace);
  Json normalizers = Json::array();
  if (prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", space}});
  normalizers.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", space}});
  Json decoders =
      Json::array({{{"type", "Replace"}, {"pattern", {{"String", space}}}, {"content", " "}},
                   {{"type", "ByteFallback"}},
                   {{"type", "Fuse"}}});
  if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", AddedTokens(tok)},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", normalizers}}},
          {"pre_tokenizer", nullptr},
          {"post_processor", PostProcessor(tok.vocab())},
          {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
          {"model", BpeModel(tok, tok.RankedMerges(), /*spm=*/true, /*ignore_merges=*/false)}};
}

Json ByteLevelTokenizerJson(const ByteLevelBpeTokenizer& tok) {
  Json steps = Json::array();
  for (const std::string& re : tok.options().pre_tokenizer_regexes) {
    steps.push_back({{"type", "Split"},
                     {"pattern", {{"Regex", re}}},
                     {"behavior", "Isolated"},
                     {"invert", false}});
  }
  steps.push_back({{"type", "ByteLevel"},
                   {"add_prefix_space", tok.options().add_prefix_space},
                   {"trim_offsets", true},
                   {"use_regex", false}});
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", AddedTokens(tok)},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", steps}}},
          {"post_processor", PostProcessor(tok.vocab())},
          {"decoder",
           {{"type", "ByteLevel"},
            {"add_prefix_space", true},
            {"trim_offsets", true},
            {"use_regex", true}}},
          {"model", BpeModel(tok, tok.merges(), /*spm=*/false, tok.options().ignore_merges)}};
}

Json TokenEntry(const Vocab& v, int32_t id) {
  return {{"content", v.pieces[id]},
          {"lstrip", false},
          {"normalized", false},
          {"rstrip", false},
          {"single_word", false}};
}

}  // namespace

StatusOr<std::map<std::string, std::string>> ExportHfTokenizerFiles(
    const Tokenizer& tokenizer, const std::string& chat_template) {
  Json tokenizer_json;
  if (const auto* spm = dynamic_cast<const SentencePieceBpeTokenizer*>(&tokenizer)) {
    tokenizer_json = SpmTokenizerJson(*spm);
  } else if (const auto* bpe = dynamic_cast<const ByteLevelBpeTokenizer*>(&tokenizer)) {
    tokenizer_json = ByteLevelTokenizerJson(*bpe);
  } else {
    return UnimplementedError("this tokenizer kind has no Hugging Face tokenizer.json form");
  }
  const Vocab& v = tokenizer.vocab();
  Json config = {{"add_bos_token", v.add_bos},
                 {"add_eos_token", v.add_eos},
                 {"clean_up_tokenization_spaces", false},
                 {"tokenizer_class", "PreTrainedTokenizerFast"}};
  Json special_map = Json::object();
  for (auto [key, id] : {std::pair{"bos_token", v.bos_id}, std::pair{"eos_token", v.eos_id},
                         std::pair{"unk_token", v.unk_id}, std::pair{"pad_token", v.pad_id}}) {
    if (id < 0) continue;
    config[key] = v.pieces[id];
    special_map[key] = TokenEntry(v, id);
  }
  Json decoder = Json::object();
  for (int32_t id : tokenizer.SpecialTokens()) {
    Json entry = TokenEntry(v, id);
    entry["special"] = v.types[id] != TokenType::kUserDefined;
    decoder[std::to_string(id)] = entry;
  }
  config["added_tokens_decoder"] = decoder;
  const std::string& tmpl = chat_template.empty() ? v.chat_template : chat_template;
  if (!tmpl.empty()) config["chat_template"] = tmpl;
  try {
    return std::map<std::string, std::string>{{"tokenizer.json", tokenizer_json.dump(2)},
                                              {"tokenizer_config.json", config.dump(2)},
                                              {"special_tokens_map.json", special_map.dump(2)}};
  } catch (const nlohmann::json::exception& e) {  // pieces that are not valid UTF-8
    return InvalidArgumentError(std::string("cannot write tokenizer.json: ") + e.what());
  }
}

}  // namespace laminar::model
