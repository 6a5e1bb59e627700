// The rollout manager's prompt dataset (docs/architecture.md: "the prompt dataset (JSONL)"): one
// JSON object a line with the prompt, its ground truth and its data source under field names the
// recipe chooses (verl's RLHFDataset keys by default), chat-formatted and tokenized once at load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer.h"

namespace laminar::manager {

// What to do with a row whose prompt is longer than max_prompt_tokens.
enum class OverlongPrompts {
  kSkip,   // leave it out and count it (verl's data.filter_overlong_prompts)
  kError,  // fail the load, naming the row
};

// How to read a JSONL prompt dataset. A field name may be a dotted path into nested objects
// ("reward_model.ground_truth", as verl's parquet rows nest it); a key that contains the dots
// literally is looked up first.
struct PromptDatasetOptions {
  // A string, or a chat message list [{"role": ..., "content": ...}] (needs `chat`).
  std::string prompt_key = "prompt";
  // Empty: no ground truth. Otherwise the field must be present; a string is taken as is, any
  // other JSON value (a number, an object) as its JSON text.
  std::string ground_truth_key = "ground_truth";
  // The field naming the reward function's data source ("openai/gsm8k"). Rows without it take
  // default_data_source; when that is empty too the row is an error.
  std::string data_source_key = "data_source";
  std::string default_data_source;
  // Empty: a row's id is its 0-based index among the file's non-blank lines (stable when rows are
  // skipped). Otherwise the field must be a string or an integer, unique in the file.
  std::string id_key;
  // Optional: a field whose JSON text becomes PromptGroup.extra_info_json (verl's extra_info).
  std::string extra_info_key = "extra_info";
  // Optional: an integer field that overrides the recipe's max_tokens for the row (per-request
  // response budgets, e.g. a long-tail experiment); rows without it use the recipe's.
  std::string max_tokens_key;
  // Set: prompts are rendered with this chat format (a string prompt becomes one user turn) and
  // the rendered text is tokenized without adding BOS, as Hugging Face's apply_chat_template then
  // encode does. Unset: a string prompt is tokenized as is with the tokenizer's BOS/EOS rule, and
  // message-list prompts are an error.
  std::optional<model::ChatFormat> chat;
  // A system turn put first when the prompt has none (with `chat` only); empty: none.
  std::string system_message;
  // Prompts longer than this many tokens are handled by `overlong`; 0: no limit.
  int64_t max_prompt_tokens = 0;
  OverlongPrompts overlong = OverlongPrompts::kSkip;
};

// One prompt of the dataset, ready to hand out.
struct PromptRow {
  std::string id;                   // unique in the dataset
  std::vector<int32_t> prompt_ids;  // >= 1 token ids in [0, V)
  std::string ground_truth;
  std::string data_source;
  std::string extra_info_json;  // JSON text or empty
  int32_t max_tokens = 0;       // > 0: this row's max_tokens (PromptDatasetOptions::max_tokens_key)
  std::string source;           // "path:line" (or what the caller names it), for errors
};

// A loaded dataset: plain data, immutable once built (ManagerState shares it read-only).
struct PromptDataset {
  std::string name;  // the path it was read from
  std::vector<PromptRow> rows;
  int64_t num_skipped_overlong = 0;
  // The first 100 skipped rows as "path:line (N tokens)".
  std::vector<std::string> skipped_overlong;
  // XXH64 over every row's id and prompt ids in order: a snapshot taken with another dataset
  // (other rows, another order, another tokenizer or chat format) is refused on restore.
  uint64_t fingerprint = 0;
};

// Loads `path` (JSON Lines, blank lines skipped), tokenizing every prompt with `tokenizer`.
// Errors, each naming "path:line" and the field: NotFound when the file cannot be opened;
// InvalidArgument for a line that is not a JSON object, a missing or mistyped field, a message
// list without a chat format or with a bad role (RenderChat's error), text that is not UTF-8, a
// prompt that encodes to no tokens, a duplicate id, an overlong prompt under kError, and a file
// with no prompt left.
StatusOr<PromptDataset> LoadPromptDataset(const std::string& path,
                                          const model::Tokenizer& tokenizer,
                                          const PromptDatasetOptions& options);

// A dataset from rows already built (tests, or prompts from another source): checks that ids are
// unique and prompts non-empty with ids >= 0, and computes the fingerprint. Errors:
// InvalidArgument naming the row's source.
StatusOr<PromptDataset> MakePromptDataset(std::string name, std::vector<PromptRow> rows);

}  // namespace laminar::manager
