// JSONL prompt datasets: field lookup, chat formatting, tokenization, overlong filtering.
#include "rollout/manager/prompt_dataset.h"

#include <xxhash.h>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <utility>

#include "core/json_util.h"

namespace laminar::manager {
namespace {

using nlohmann::json;

// The value at `key` (a literal key first, then a dotted path); null values count as absent.
const json* Lookup(const json& row, const std::string& key) {
  if (auto it = row.find(key); it != row.end()) return it->is_null() ? nullptr : &*it;
  const json* cur = &row;
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key.substr(start, dot == std::string::npos ? dot : dot - start));
    if (it == cur->end()) return nullptr;
    cur = &*it;
    if (dot == std::string::npos) return cur->is_null() ? nullptr : cur;
    start = dot + 1;
  }
}

std::string Field(const std::string& key) { return "field '" + key + "'"; }

// A string as is; any other value as its JSON text.
std::string AsText(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// The prompt's chat messages: a string becomes one user turn; a list must hold {role, content}
// objects with string values. The optional system message goes first when there is none.
StatusOr<std::vector<model::ChatMessage>> Messages(const json& prompt, const std::string& key,
                                                   const std::string& system_message) {
  std::vector<model::ChatMessage> messages;
  if (prompt.is_string()) {
    messages.push_back({"user", prompt.get<std::string>()});
  } else {
    for (size_t i = 0; i < prompt.size(); ++i) {
      const json& m = prompt[i];
      const std::string at = Field(key) + "[" + std::to_string(i) + "]";
      if (!m.is_object())
        return InvalidArgumentError(at + " is " + JsonSnippet(m) + ", not an object");
      for (const char* part : {"role", "content"}) {
        auto it = m.find(part);
        if (it == m.end() || !it->is_string()) {
          return InvalidArgumentError(at + "." + part + " is missing or not a string");
        }
      }
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
  }
  if (!system_message.empty() && (messages.empty() || messages[0].role != "system")) {
    messages.insert(messages.begin(), {"system", system_message});
  }
  return messages;
}

StatusOr<std::vector<int32_t>> EncodePrompt(const json& prompt, const model::Tokenizer& tokenizer,
                                            const PromptDatasetOptions& options) {
  const std::string& key = options.prompt_key;
  if (!prompt.is_string() && !prompt.is_array()) {
    return InvalidArgumentError(Field(key) + " is " + JsonSnippet(prompt) +
                                ", not a string or a list of {role, content} messages");
  }
  if (!options.chat) {
    if (prompt.is_array()) {
      return InvalidArgumentError(Field(key) +
                                  " is a message list but no chat format is set to render it");
    }
    LAMINAR_ASSIGN_OR_RETURN(
        auto ids,
        tokenizer.Encode(prompt.get<std::string>(), {.add_special = true, .parse_special = true}),
        Field(key));
    return ids;
  }
  LAMINAR_ASSIGN_OR_RETURN(auto messages, Messages(prompt, key, options.system_message));
  LAMINAR_ASSIGN_OR_RETURN(std::string text, model::RenderChat(*options.chat, messages, true),
                           Field(key));
  // The rendered text carries any BOS itself, as Hugging Face's apply_chat_template does.
  LAMINAR_ASSIGN_OR_RETURN(
      auto ids, tokenizer.Encode(text, {.add_special = false, .parse_special = true}), Field(key));
  return ids;
}

// One row's fields (all but the length check and the id's uniqueness).
StatusOr<PromptRow> ParseRow(const json& j, int64_t row_index, const model::Tokenizer& tokenizer,
                             const PromptDatasetOptions& options) {
  if (!j.is_object())
    return InvalidArgumentError("the line is " + JsonSnippet(j) + ", not an object");
  PromptRow row;
  if (options.id_key.empty()) {
    row.id = std::to_string(row_index);
  } else {
    const json* id = Lookup(j, options.id_key);
    if (id == nullptr) return InvalidArgumentError(Field(options.id_key) + " is missing");
    if (!id->is_string() && !id->is_number_integer()) {
      return InvalidArgumentError(Field(options.id_key) + " is " + JsonSnippet(*id) +
                                  ", not a string or an integer");
    }
    row.id = AsText(*id);
  }
  const json* prompt = Lookup(j, options.prompt_key);
  if (prompt == nullptr) return InvalidArgumentError(Field(options.prompt_key) + " is missing");
  LAMINAR_ASSIGN_OR_RETURN(row.prompt_ids, EncodePrompt(*prompt, tokenizer, options));
  if (row.prompt_ids.empty()) {
    return InvalidArgumentError(Field(options.prompt_key) + " encodes to no tokens");
  }
  if (!options.ground_truth_key.empty()) {
    const json* gt = Lookup(j, options.ground_truth_key);
    if (gt == nullptr) return InvalidArgumentError(Field(options.ground_truth_key) + " is missing");
    row.ground_truth = AsText(*gt);
  }
  const json* source =
      options.data_source_key.empty() ? nullptr : Lookup(j, options.data_source_key);
  if (source != nullptr) {
    row.data_source = AsText(*source);
  } else if (!options.default_data_source.empty()) {
    row.data_source = options.default_data_source;
  } else {
    return InvalidArgumentError(Field(options.data_source_key) +
                                " is missing and no default data source is set");
  }
  if (!options.extra_info_key.empty()) {
    if (const json* extra = Lookup(j, options.extra_info_key)) row.extra_info_json = extra->dump();
  }
  if (!options.max_tokens_key.empty()) {
    if (const json* mt = Lookup(j, options.max_tokens_key)) {
      if (!mt->is_number_integer() || mt->get<int64_t>() < 1 || mt->get<int64_t>() > (1 << 30)) {
        return InvalidArgumentError(Field(options.max_tokens_key) + " is " + JsonSnippet(*mt) +
                                    ", not an integer in [1, 2^30]");
      }
      row.max_tokens = static_cast<int32_t>(mt->get<int64_t>());
    }
  }
  return row;
}

void HashBytes(XXH64_state_t* state, const void* data, size_t size) {
  XXH64_update(state, data, size);
}

uint64_t Fingerprint(const std::vector<PromptRow>& rows) {
  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> state(XXH64_createState(),
                                                                   &XXH64_freeState);
  LAMINAR_CHECK(state != nullptr) << "XXH64_createState failed";
  XXH64_reset(state.get(), 0);
  for (const PromptRow& r : rows) {
    const uint64_t id_size = r.id.size(), num_ids = r.prompt_ids.size();
    HashBytes(state.get(), &id_size, sizeof(id_size));
    HashBytes(state.get(), r.id.data(), r.id.size());
    HashBytes(state.get(), &num_ids, sizeof(num_ids));
    HashBytes(state.get(), r.prompt_ids.data(), r.prompt_ids.size() * sizeof(int32_t));
  }
  return XXH64_digest(state.get());
}

}  // namespace

StatusOr<PromptDataset> MakePromptDataset(std::string name, std::vector<PromptRow> rows) {
  if (rows.empty()) return InvalidArgumentError(name + ": no prompts");
  std::unordered_map<std::string, size_t> first_with_id;
  for (size_t i = 0; i < rows.size(); ++i) {
    const PromptRow& r = rows[i];
    if (r.prompt_ids.empty()) return InvalidArgumentError(r.source + ": the prompt has no tokens");
    for (int32_t id : r.prompt_ids) {
      if (id < 0)
        return InvalidArgumentError(r.source + ": negative token id " + std::to_string(id));
    }
    auto [it, added] = first_with_id.emplace(r.id, i);
    if (!added) {
      return InvalidArgumentError(r.source + ": id '" + r.id + "' is also the id of " +
                                  rows[it->second].source);
    }
  }
  PromptDataset ds;
  ds.name = std::move(name);
  ds.fingerprint = Fingerprint(rows);
  ds.rows = std::move(rows);
  return ds;
}

StatusOr<PromptDataset> LoadPromptDataset(const std::string& path,
                                          const model::Tokenizer& tokenizer,
                                          const PromptDatasetOptions& options) {
  if (options.max_prompt_tokens < 0) {
    return InvalidArgumentError("max_prompt_tokens = " + std::to_string(options.max_prompt_tokens) +
                                " is negative");
  }
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open prompt dataset " + path);
  std::vector<PromptRow> rows;
  int64_t num_skipped = 0, row_index = 0, line_no = 0;
  std::vector<std::string> skipped;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    StatusOr<PromptRow> row = InvalidArgumentError("unparsed");
    try {
      row = ParseRow(json::parse(line), row_index++, tokenizer, options);
    } catch (const json::exception& e) {
      return InvalidArgumentError(where + ": " + e.what());
    }
    LAMINAR_RETURN_IF_ERROR(row.status(), where);
    row->source = where;
    const auto num_tokens = static_cast<int64_t>(row->prompt_ids.size());
    if (options.max_prompt_tokens > 0 && num_tokens > options.max_prompt_tokens) {
      const std::string what = where + " (" + std::to_string(num_tokens) + " tokens)";
      if (options.overlong == OverlongPrompts::kError) {
        return InvalidArgumentError(
            what + ": " + Field(options.prompt_key) +
            " is longer than max_prompt_tokens = " + std::to_string(options.max_prompt_tokens));
      }
      ++num_skipped;
      if (skipped.size() < 100) skipped.push_back(what);
      continue;
    }
    rows.push_back(*std::move(row));
  }
  if (rows.empty()) {
    return InvalidArgumentError(path + ": no prompts (" + std::to_string(num_skipped) +
                                " skipped as longer than max_prompt_tokens)");
  }
  LAMINAR_ASSIGN_OR_RETURN(PromptDataset ds, MakePromptDataset(path, std::move(rows)));
  ds.num_skipped_overlong = num_skipped;
  ds.skipped_overlong = std::move(skipped);
  return ds;
}

}  // namespace laminar::manager
