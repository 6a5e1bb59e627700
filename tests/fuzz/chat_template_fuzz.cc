// libFuzzer target: arbitrary bytes as a model's Jinja chat template (DetectChatFormat, what
// data.chat_format: auto reads from a checkpoint). A template it recognises must render a
// conversation; one it does not is an error naming why.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "model/tokenizer/chat_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::model;
  const std::string_view jinja(reinterpret_cast<const char*>(data), size);
  auto format = DetectChatFormat(jinja);
  if (!format.ok()) return 0;
  const std::vector<ChatMessage> conversation = {
      {"system", "Be brief."}, {"user", "2 + 2?"}, {"assistant", "4"}, {"user", "And 3 + 3?"}};
  for (const bool generation_prompt : {false, true}) {
    RenderChat(*format, conversation, generation_prompt).status().IgnoreError();
  }
  return 0;
}
