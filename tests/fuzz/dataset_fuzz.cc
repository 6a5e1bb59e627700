// libFuzzer target: arbitrary bytes as a JSONL prompt dataset (LoadPromptDataset, what the manager
// reads at start). The first byte picks the options (chat format or plain text, nested keys, an id
// field, per-row max_tokens, a prompt-length limit that skips or fails); the rest is the file. A
// dataset either loads with every row valid or fails naming the line.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "model/tokenizer/chat_format.h"
#include "model/tokenizer/tokenizer.h"
#include "rollout/manager/prompt_dataset.h"
#include "tests/fuzz/synthetic_tokenizer.h"

namespace {

// A file of this process's own that each input overwrites, removed at exit.
const std::string& ThePath() {
  static const std::string path = [] {
    std::atexit([] { std::remove(ThePath().c_str()); });
    return "/tmp/laminar_dataset_fuzz_" + std::to_string(getpid()) + ".jsonl";
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar;
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  {
    FILE* f = std::fopen(ThePath().c_str(), "wb");
    if (f == nullptr) __builtin_trap();
    std::fwrite(data + 1, 1, size - 1, f);
    std::fclose(f);
  }
  manager::PromptDatasetOptions o;
  if ((pick & 1) != 0) o.chat = *model::ChatFormatFromName("chatml");
  if ((pick & 2) != 0) o.ground_truth_key = "reward_model.ground_truth";
  if ((pick & 4) != 0) o.id_key = "id";
  if ((pick & 8) != 0) o.max_tokens_key = "max_tokens";
  if ((pick & 16) != 0) o.default_data_source = "openai/gsm8k";
  if ((pick & 32) != 0) o.max_prompt_tokens = 16;
  if ((pick & 64) != 0) o.overlong = manager::OverlongPrompts::kError;
  if ((pick & 128) != 0) o.system_message = "Be brief.";
  auto dataset = manager::LoadPromptDataset(ThePath(), laminar::fuzz::SyntheticTokenizer(), o);
  if (!dataset.ok()) return 0;
  const int32_t vocab = laminar::fuzz::SyntheticTokenizer().vocab_size();
  for (const manager::PromptRow& row : dataset->rows) {
    if (row.prompt_ids.empty() || row.id.empty() || row.max_tokens < 0) __builtin_trap();
    const auto length = static_cast<int64_t>(row.prompt_ids.size());
    if (o.max_prompt_tokens > 0 && length > o.max_prompt_tokens) __builtin_trap();
    for (int32_t id : row.prompt_ids) {
      if (id < 0 || id >= vocab) __builtin_trap();
    }
  }
  return 0;
}
