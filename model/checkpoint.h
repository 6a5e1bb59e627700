// One entry point for every checkpoint format: a GGUF file, a llama2.c .bin, or a Hugging Face
// folder (config.json + safetensors). The format is detected from the content, not the name.
#pragma once

#include <string>

#include "core/status.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace laminar::model {

enum class CheckpointFormat { kGguf, kLlama2c, kHfFolder };
std::string CheckpointFormatName(CheckpointFormat format);  // "gguf", "llama2c", "hf"

// A loaded checkpoint. Movable; owns its weights (or the mappings they view).
struct Checkpoint {
  std::string path;
  CheckpointFormat format = CheckpointFormat::kGguf;
  ModelConfig config;
  WeightStore weights;
  // The Jinja chat template shipped with the checkpoint ("" when none): GGUF
  // tokenizer.chat_template or tokenizer_config.json's chat_template.
  std::string chat_template;
};

// A folder with config.json is a Hugging Face checkpoint; a file starting with "GGUF" is GGUF;
// any other file whose llama2.c header is consistent with its size is llama2.c. Errors: NotFound,
// or InvalidArgument naming the path and why no format fits.
StatusOr<CheckpointFormat> DetectCheckpointFormat(const std::string& path);

// Loads `path` (a file or folder; resolve names first with ResolveModelPath). Errors name the
// file and the field or tensor at fault.
StatusOr<Checkpoint> LoadCheckpoint(const std::string& path);

}  // namespace laminar::model
