// Checkpoint format detection and loading.
#include "model/checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/mapped_file.h"
#include "model/gguf.h"
#include "model/gguf_model.h"
#include "model/hf_checkpoint.h"
#include "model/llama2c.h"

namespace laminar::model {

std::string CheckpointFormatName(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kGguf:
      return "gguf";
    case CheckpointFormat::kLlama2c:
      return "llama2c";
    case CheckpointFormat::kHfFolder:
      return "hf";
  }
  return "?";
}

StatusOr<CheckpointFormat> DetectCheckpointFormat(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFoundError("no such file or folder: " + path);
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "config.json", ec)) return CheckpointFormat::kHfFolder;
    return InvalidArgumentError(path +
                                " is a folder without config.json (not a Hugging Face checkpoint)");
  }
  if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
    return InvalidArgumentError(path +
                                " is a bare safetensors file; give the Hugging Face folder "
                                "that holds it and its config.json");
  }
  LAMINAR_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  if (file->size() >= 4 &&
      std::string_view(reinterpret_cast<const char*>(file->data()), 4) == "GGUF") {
    return CheckpointFormat::kGguf;
  }
  auto header = ParseLlama2cHeader(file->bytes(), path);
  if (header.ok()) return CheckpointFormat::kLlama2c;
  return InvalidArgumentError(path +
                              ": not a GGUF file, a Hugging Face folder or a llama2.c "
                              "checkpoint (as llama2.c: " +
                              header.status().message() + ")");
}

namespace {
// tokenizer_config.json's "chat_template" when it is a string ("" otherwise; a list of named
// templates is not supported).
std::string HfChatTemplate(const std::string& dir) {
  auto text = ReadFileToString(dir + "/tokenizer_config.json");
  if (!text.ok()) return "";
  auto j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return "";
  auto it = j.find("chat_template");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}
}  // namespace

StatusOr<Checkpoint> LoadCheckpoint(const std::string& path) {
  Checkpoint ckpt;
  ckpt.path = path;
  LAMINAR_ASSIGN_OR_RETURN(ckpt.format, DetectCheckpointFormat(path));
  switch (ckpt.format) {
    case CheckpointFormat::kGguf: {
      LAMINAR_ASSIGN_OR_RETURN(GgufFile gguf, GgufFile::Open(path));
      LAMINAR_RETURN_IF_ERROR(LoadGgufModel(gguf, &ckpt.config, &ckpt.weights));
      LAMINAR_ASSIGN_OR_RETURN(ckpt.chat_template, gguf.GetStringOr("tokenizer.chat_template", ""));
      break;
    }
    case CheckpointFormat::kLlama2c:
      LAMINAR_RETURN_IF_ERROR(LoadLlama2c(path, &ckpt.config, &ckpt.weights));
      break;
    case CheckpointFormat::kHfFolder: {
      LAMINAR_ASSIGN_OR_RETURN(HfCheckpoint hf, LoadHfCheckpoint(path));
      ckpt.config = std::move(hf.config);
      ckpt.weights = std::move(hf.weights);
      ckpt.chat_template = HfChatTemplate(path);
      break;
    }
  }
  return ckpt;
}

}  // namespace laminar::model
