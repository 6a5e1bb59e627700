// libFuzzer target: arbitrary bytes as a GGUF file. Parsing, every accessor, and the llama model
// loader (which dequantizes) must return a Status on any input: no crash, no out-of-bounds read,
// no allocation beyond what the input's size justifies.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/gguf.h"
#include "model/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace laminar::model;
  auto file = GgufFile::ParseBuffer(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  size_t total = 0;
  for (const auto& [key, value] : file->metadata()) {
    total += value.ToString().size() + value.array_size();
    if (file->Find(key) != &value) __builtin_trap();  // the index must agree with the list
  }
  file->GetStringArray("tokenizer.ggml.tokens").status().IgnoreError();
  file->GetFloatArray("tokenizer.ggml.scores").status().IgnoreError();
  file->GetIntArray("tokenizer.ggml.token_type").status().IgnoreError();
  for (const GgufTensorInfo& t : file->tensors()) {
    auto bytes = file->TensorBytes(t);
    if (!bytes.ok()) __builtin_trap();  // bounds were checked when parsing
    if (!bytes->empty()) total += bytes->front() + bytes->back();
  }
  ModelConfig config;
  WeightStore weights;
  LoadGgufModel(*file, &config, &weights).IgnoreError();
  volatile size_t sink = total;  // keeps the reads above from being optimized away
  (void)sink;
  return 0;
}
