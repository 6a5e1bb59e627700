// Loading and saving Hugging Face checkpoint folders (config.json + safetensors shards).
#include "model/hf_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "model/hf_config.h"
#include "model/rope_permute.h"
#include "model/safetensors.h"

namespace laminar::model {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

bool IsFloat(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A plain file name inside the folder: no separators, not "." or "..".
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Adds one tensor of a parsed file to `store` (zero copy when aligned).
Status AddTensor(const SafetensorsTensor& t, const SafetensorsFile& file, const ModelConfig& config,
                 WeightStore* store) {
  if (EndsWith(t.name, ".rotary_emb.inv_freq")) return OkStatus();  // old checkpoints: derived
  if (t.name == "lm_head.weight" && config.tie_word_embeddings) return OkStatus();
  if (!IsFloat(t.dtype)) {
    return InvalidArgumentError(file.display_name() + ": tensor '" + t.name + "' has dtype " +
                                std::string(SafetensorsDTypeName(t.dtype)) +
                                ", expected F32, BF16 or F16");
  }
  if (store->Contains(t.name)) {
    return InvalidArgumentError(file.display_name() + ": tensor '" + t.name +
                                "' appears in more than one shard");
  }
  if (t.aligned()) {
    store->PutView(t.name, t.view(), file.backing());
  } else {
    store->Put(t.name, Tensor::FromView(t.view()));
  }
  return OkStatus();
}

// weight_map of a model.safetensors.index.json: shard file -> tensor names.
StatusOr<std::map<std::string, std::vector<std::string>>> ReadIndex(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
    return InvalidArgumentError(path + ": field 'weight_map' is missing or not an object");
  }
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() || !IsPlainFileName(file.get<std::string>())) {
      return InvalidArgumentError(path + ": weight_map entry '" + name +
                                  "' is not a plain file name: " + JsonSnippet(file));
    }
    by_file[file.get<std::string>()].push_back(name);
  }
  return by_file;
}

Status LoadWeights(const std::string& dir, const ModelConfig& config, WeightStore* store) {
  std::string index_path = dir + "/" + kIndexFile;
  std::string single_path = dir + "/" + kSingleFile;
  std::error_code ec;  // the error_code overloads: no exceptions
  if (fs::exists(index_path, ec)) {
    LAMINAR_ASSIGN_OR_RETURN(auto by_file, ReadIndex(index_path));
    for (const auto& [file_name, names] : by_file) {
      LAMINAR_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(dir + "/" + file_name));
      for (const std::string& name : names) {
        const SafetensorsTensor* t = file.Find(name);
        if (t == nullptr) {
          return InvalidArgumentError(index_path + ": tensor '" + name + "' is mapped to " +
                                      file_name + ", which does not contain it");
        }
        LAMINAR_RETURN_IF_ERROR(AddTensor(*t, file, config, store));
      }
    }
    return OkStatus();
  }
  if (!fs::exists(single_path, ec)) {
    return NotFoundError(dir + ": neither " + kSingleFile + " nor " + kIndexFile + " exists");
  }
  LAMINAR_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(single_path));
  for (const SafetensorsTensor& t : file.tensors()) {
    LAMINAR_RETURN_IF_ERROR(AddTensor(t, file, config, store));
  }
  return OkStatus();
}

// A float tensor converted to `to` (f32, bf16, f16); `src` must be aligned.
StatusOr<Tensor> ConvertFloat(const TensorView& src, DType to) {
  LAMINAR_ASSIGN_OR_RETURN(Tensor f32, ToF32(src));
  if (to == DType::kF32) return f32;
  Tensor out(to, src.shape());
  const float* in = f32.data_as<float>();
  auto* dst = out.data_as<uint16_t>();
  int64_t n = src.num_elements();
  for (int64_t i = 0; i < n; ++i)
    dst[i] = to == DType::kBF16 ? FloatToBF16(in[i]) : FloatToHalf(in[i]);
  return out;
}

// The write items for every tensor: RoPE permutation to rotate-half and dtype conversion happen
// one tensor at a time while streaming.
std::vector<SafetensorsWriteItem> SaveItems(const ModelConfig& config, const WeightStore& weights,
                                            const HfSaveOptions& options) {
  std::vector<SafetensorsWriteItem> items;
  for (const std::string& name : weights.Names()) {
    TensorView view = weights.Get(name).value();  // the name came from the store
    DType out_dtype = options.dtype.value_or(view.dtype());
    int64_t heads =
        config.rope_layout == RopeLayout::kInterleaved ? RopeHeadsOfTensor(name, config) : 0;
    auto produce = [view, out_dtype, heads, &config](Tensor* scratch) -> StatusOr<TensorView> {
      TensorView current = view;
      if (heads > 0) {
        LAMINAR_ASSIGN_OR_RETURN(
            *scratch, ConvertRopeRows(view, heads, config.head_dim, RopeLayout::kInterleaved,
                                      RopeLayout::kRotateHalf));
        current = scratch->view();
      }
      if (out_dtype != current.dtype()) {
        LAMINAR_ASSIGN_OR_RETURN(Tensor converted, ConvertFloat(current, out_dtype));
        *scratch = std::move(converted);
        current = scratch->view();
      }
      return current;
    };
    items.push_back({name, out_dtype, view.shape(), std::move(produce)});
  }
  return items;
}

std::string ShardName(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// Writes the weights into `dir`: one file, or shards of at most max_shard_bytes (a tensor larger
// than that gets a shard of its own) plus the index.
Status WriteWeights(const std::string& dir, std::vector<SafetensorsWriteItem> items,
                    uint64_t max_shard_bytes) {
  std::vector<std::vector<SafetensorsWriteItem>> shards(1);
  uint64_t shard_bytes = 0;
  uint64_t total_bytes = 0;
  for (SafetensorsWriteItem& item : items) {
    uint64_t bytes = static_cast<uint64_t>(item.shape.num_elements()) * DTypeSize(item.dtype);
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shard_bytes += bytes;
    total_bytes += bytes;
    shards.back().push_back(std::move(item));
  }
  if (shards.size() == 1) return WriteSafetensors(dir + "/" + kSingleFile, std::move(shards[0]));
  nlohmann::ordered_json index;
  index["metadata"]["total_size"] = total_bytes;
  nlohmann::json weight_map = nlohmann::json::object();  // sorted by tensor name
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string file = ShardName(i, shards.size());
    for (const SafetensorsWriteItem& item : shards[i]) weight_map[item.name] = file;
    LAMINAR_RETURN_IF_ERROR(WriteSafetensors(dir + "/" + file, shards[i]));
  }
  index["weight_map"] = weight_map;
  return WriteFileAtomic(dir + "/" + kIndexFile, index.dump(2) + "\n");
}

// Moves the finished `tmp` folder to `dir`, replacing an old one only after the new one is ready.
Status InstallFolder(const std::string& tmp, const std::string& dir, bool overwrite) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::rename(tmp, dir, ec);
    if (ec) return InternalError("cannot rename " + tmp + " to " + dir + ": " + ec.message());
    return OkStatus();
  }
  if (!overwrite) return AlreadyExistsError(dir + " already exists");
  std::string old = dir + ".old-" + std::to_string(::getpid());
  fs::remove_all(old, ec);
  fs::rename(dir, old, ec);
  if (ec) return InternalError("cannot move " + dir + " aside: " + ec.message());
  fs::rename(tmp, dir, ec);
  if (ec) {
    std::error_code ignored;
    fs::rename(old, dir, ignored);
    return InternalError("cannot rename " + tmp + " to " + dir + ": " + ec.message());
  }
  fs::remove_all(old, ec);
  return OkStatus();
}

// Everything that can be checked before touching the disk.
Status CheckSaveInputs(const std::string& dir, const ModelConfig& config,
                       const WeightStore& weights, const HfSaveOptions& options) {
  LAMINAR_RETURN_IF_ERROR(config.Validate(dir));
  LAMINAR_RETURN_IF_ERROR(ValidateHfWeights(config, weights, dir));
  if (options.dtype && !IsFloat(*options.dtype)) {
    return InvalidArgumentError(dir + ": save dtype " + std::string(DTypeName(*options.dtype)) +
                                " is not f32, bf16 or f16");
  }
  static const std::set<std::string> kOurs = {kSingleFile, kIndexFile, "config.json",
                                              "generation_config.json"};
  for (const auto& [name, content] : options.tokenizer_files) {
    if (!IsPlainFileName(name) || kOurs.count(name) > 0 || name.rfind("model-", 0) == 0) {
      return InvalidArgumentError(dir + ": tokenizer file name '" + name + "' is not allowed");
    }
  }
  if (options.max_shard_bytes == 0) return InvalidArgumentError(dir + ": max_shard_bytes is 0");
  std::error_code ec;
  if (fs::exists(dir, ec) && !options.overwrite) {
    return AlreadyExistsError(
        dir + " already exists; not replacing it without overwrite (laminar convert --overwrite)");
  }
  return OkStatus();
}

Status WriteFolder(const std::string& tmp, const ModelConfig& config, const WeightStore& weights,
                   const HfSaveOptions& options) {
  DType config_dtype = options.dtype.value_or(weights.Get("model.embed_tokens.weight")->dtype());
  LAMINAR_ASSIGN_OR_RETURN(std::string config_json,
                           HfConfigToJson(config, TorchDTypeName(config_dtype)));
  LAMINAR_RETURN_IF_ERROR(
      WriteWeights(tmp, SaveItems(config, weights, options), options.max_shard_bytes));
  LAMINAR_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/config.json", config_json));
  LAMINAR_RETURN_IF_ERROR(
      WriteFileAtomic(tmp + "/generation_config.json", HfGenerationConfigJson(config)));
  for (const auto& [name, content] : options.tokenizer_files) {
    LAMINAR_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/" + name, content));
  }
  return OkStatus();
}

}  // namespace

std::vector<std::pair<std::string, Shape>> ExpectedHfTensors(const ModelConfig& c) {
  const int64_t q = c.num_attention_heads * c.head_dim;
  const int64_t kv = c.num_key_value_heads * c.head_dim;
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  std::vector<std::pair<std::string, Shape>> out;
  out.emplace_back("model.embed_tokens.weight", Shape({c.vocab_size, C}));
  out.emplace_back("model.norm.weight", Shape({C}));
  if (!c.tie_word_embeddings) out.emplace_back("lm_head.weight", Shape({c.vocab_size, C}));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    out.emplace_back(p + "input_layernorm.weight", Shape({C}));
    out.emplace_back(p + "post_attention_layernorm.weight", Shape({C}));
    out.emplace_back(p + "self_attn.q_proj.weight", Shape({q, C}));
    out.emplace_back(p + "self_attn.k_proj.weight", Shape({kv, C}));
    out.emplace_back(p + "self_attn.v_proj.weight", Shape({kv, C}));
    out.emplace_back(p + "self_attn.o_proj.weight", Shape({C, q}));
    if (c.attention_bias) {
      out.emplace_back(p + "self_attn.q_proj.bias", Shape({q}));
      out.emplace_back(p + "self_attn.k_proj.bias", Shape({kv}));
      out.emplace_back(p + "self_attn.v_proj.bias", Shape({kv}));
    }
    out.emplace_back(p + "mlp.gate_proj.weight", Shape({F, C}));
    out.emplace_back(p + "mlp.up_proj.weight", Shape({F, C}));
    out.emplace_back(p + "mlp.down_proj.weight", Shape({C, F}));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

Status ValidateHfWeights(const ModelConfig& config, const WeightStore& weights,
                         const std::string& source) {
  auto expected = ExpectedHfTensors(config);
  std::set<std::string> expected_names;
  for (const auto& [name, shape] : expected) {
    expected_names.insert(name);
    auto view = weights.Get(name);
    if (!view.ok()) {
      return InvalidArgumentError(source + ": missing tensor '" + name + "' (expected shape " +
                                  shape.ToString() + ")");
    }
    if (view->shape() != shape) {
      return InvalidArgumentError(source + ": tensor '" + name + "' has shape " +
                                  view->shape().ToString() + " but the config needs " +
                                  shape.ToString());
    }
    if (!IsFloat(view->dtype())) {
      return InvalidArgumentError(source + ": tensor '" + name + "' has dtype " +
                                  std::string(DTypeName(view->dtype())) +
                                  ", expected f32/bf16/f16");
    }
  }
  for (const std::string& name : weights.Names()) {
    if (expected_names.count(name) == 0) {
      return InvalidArgumentError(source + ": unexpected tensor '" + name + "' for a " +
                                  config.architecture + " model with this config");
    }
  }
  return OkStatus();
}

StatusOr<HfCheckpoint> LoadHfCheckpoint(const std::string& dir) {
  std::string config_path = dir + "/config.json";
  LAMINAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
  LAMINAR_ASSIGN_OR_RETURN(HfConfig parsed, ParseHfConfig(text, config_path));
  HfCheckpoint ckpt;
  ckpt.config = std::move(parsed.model);
  ckpt.torch_dtype = std::move(parsed.torch_dtype);
  LAMINAR_RETURN_IF_ERROR(LoadWeights(dir, ckpt.config, &ckpt.weights));
  LAMINAR_RETURN_IF_ERROR(ValidateHfWeights(ckpt.config, ckpt.weights, dir));
  return ckpt;
}

Status SaveHfCheckpoint(const std::string& dir_in, const ModelConfig& config,
                        const WeightStore& weights, const HfSaveOptions& options) {
  fs::path dir_path = fs::path(dir_in).lexically_normal();
  if (!dir_path.has_filename()) dir_path = dir_path.parent_path();
  const std::string dir = dir_path.string();
  LAMINAR_RETURN_IF_ERROR(CheckSaveInputs(dir, config, weights, options));
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return InternalError("cannot create " + tmp + ": " + ec.message());
  Status st = WriteFolder(tmp, config, weights, options);
  if (st.ok()) st = InstallFolder(tmp, dir, options.overwrite);
  if (!st.ok()) fs::remove_all(tmp, ec);
  return st;
}

}  // namespace laminar::model
