// Training checkpoints: atomic save (temporary folder, fsync, rename, then `latest`), verified
// all-or-nothing load, pruning of old checkpoints, and the Hugging Face export.
#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE
#include <unistd.h>

#define XXH_INLINE_ALL  // header-only: the trainer needs no libxxhash link
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/logging.h"
#include "core/mapped_file.h"
#include "model/hf_checkpoint.h"
#include "model/safetensors.h"

namespace laminar::trainer {
namespace {

namespace fs = std::filesystem;

constexpr char kModelFile[] = "model.safetensors";
constexpr char kOptimizerFile[] = "optimizer.safetensors";
constexpr char kStateFile[] = "trainer_state.json";
constexpr char kLatestFile[] = "latest";
constexpr char kFormatName[] = "laminar.training_checkpoint";
constexpr std::string_view kStepPrefix = "step_";
constexpr std::string_view kTempPrefix = ".tmp-step_";

std::string StepName(int64_t step) { return std::string(kStepPrefix) + std::to_string(step); }

// N of "step_<N>" (decimal digits only), or nullopt.
std::optional<int64_t> ParseStepName(std::string_view name) {
  if (name.substr(0, kStepPrefix.size()) != kStepPrefix) return std::nullopt;
  std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  int64_t n = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return n;
}

// fsync of a file or folder, so a rename or a new entry in it is durable.
Status FsyncPath(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open " + path + " to fsync it", errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError("cannot fsync " + path, err);
  return OkStatus();
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::optional<std::string> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

std::string Hash64Hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Save.

// One tensor per parameter of `data` (a flat buffer laid out as `params`), named prefix + name;
// the views point into `data` (no copy).
void AddItems(const ParameterSet& params, const float* data, const std::string& prefix,
              std::vector<model::SafetensorsWriteItem>* items) {
  for (const ParamInfo& p : params.params()) {
    TensorView view(static_cast<const void*>(data + p.offset), DType::kF32, p.shape);
    items->push_back({prefix + p.name, DType::kF32, p.shape,
                      [view](Tensor*) -> StatusOr<TensorView> { return view; }});
  }
}

// Size and XXH64 of a written file, read back through the page cache.
StatusOr<nlohmann::json> FileDigest(const std::string& path) {
  LAMINAR_ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  return nlohmann::json{{"size_bytes", file->size()},
                        {"xxh64", Hash64Hex(XXH64(file->data(), file->size(), 0))}};
}

StatusOr<std::string> StateJson(const Optimizer& optimizer, const TrainingState& state,
                                nlohmann::json files) {
  nlohmann::json rng = nlohmann::json::object();
  for (const auto& [name, bytes] : state.rng_states) rng[name] = HexEncode(bytes);
  nlohmann::json j = {
      {"format", kFormatName},
      {"format_version", kTrainingCheckpointFormatVersion},
      {"global_step", state.global_step},
      {"policy_version", state.policy_version},
      {"optimizer",
       {{"config", optimizer.config().ToJson()},
        {"step", optimizer.step()},
        {"skipped_steps", optimizer.skipped_steps()},
        {"buffers", optimizer.buffer_names()}}},
      {"rng_states", std::move(rng)},
      {"user", state.user},
      {"files", std::move(files)},
  };
  try {
    return j.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {  // e.g. a user string that is not UTF-8
    return InvalidArgumentError(std::string("TrainingState.user cannot be written as JSON: ") +
                                e.what());
  }
}

// Writes the three files into `folder` (which exists and is empty).
Status WriteFolder(const std::string& folder, const ParameterSet& params,
                   const Optimizer& optimizer, const TrainingState& state) {
  std::vector<model::SafetensorsWriteItem> model_items;
  AddItems(params, params.values().data(), "", &model_items);
  const std::string model_path = folder + "/" + kModelFile;
  LAMINAR_RETURN_IF_ERROR(model::WriteSafetensors(model_path, std::move(model_items)));
  std::vector<model::SafetensorsWriteItem> optimizer_items;
  for (const std::string& buffer : optimizer.buffer_names()) {
    AddItems(params, optimizer.buffer(buffer).data(), buffer + ".", &optimizer_items);
  }
  const std::string optimizer_path = folder + "/" + kOptimizerFile;
  LAMINAR_RETURN_IF_ERROR(model::WriteSafetensors(optimizer_path, std::move(optimizer_items)));
  nlohmann::json files;
  LAMINAR_ASSIGN_OR_RETURN(files[kModelFile], FileDigest(model_path));
  LAMINAR_ASSIGN_OR_RETURN(files[kOptimizerFile], FileDigest(optimizer_path));
  LAMINAR_ASSIGN_OR_RETURN(std::string json, StateJson(optimizer, state, std::move(files)));
  LAMINAR_RETURN_IF_ERROR(WriteFileAtomic(folder + "/" + kStateFile, json));
  return FsyncPath(folder);
}

// Moves `tmp` to `target`. When `target` exists it is exchanged atomically (renameat2
// RENAME_EXCHANGE; two renames where the file system lacks it) and the old folder's path, now
// holding the replaced checkpoint, is returned; "" otherwise.
StatusOr<std::string> Install(const std::string& tmp, const std::string& target) {
  std::error_code ec;
  if (!fs::exists(target, ec)) {
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      return ErrnoError("cannot rename " + tmp + " to " + target, errno);
    }
    return std::string();
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    return tmp;
  }
  if (errno != EINVAL && errno != ENOSYS) {
    return ErrnoError("cannot exchange " + tmp + " and " + target, errno);
  }
  const std::string aside = tmp + "-old";
  if (::rename(target.c_str(), aside.c_str()) != 0) {
    return ErrnoError("cannot move " + target + " aside", errno);
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    int err = errno;
    (void)::rename(aside.c_str(), target.c_str());
    return ErrnoError("cannot rename " + tmp + " to " + target, err);
  }
  return aside;
}

// Undoes Install after `latest` could not be written: the new folder goes, the old one (if any)
// comes back. Best effort; the caller returns the original error.
void Uninstall(const std::string& tmp, const std::string& target, const std::string& displaced) {
  std::error_code ec;
  if (!displaced.empty() &&
      ::renameat2(AT_FDCWD, displaced.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(displaced, ec);
    return;
  }
  if (::rename(target.c_str(), tmp.c_str()) == 0) fs::remove_all(tmp, ec);
  if (!displaced.empty()) (void)::rename(displaced.c_str(), target.c_str());
}

// Removes what interrupted saves left: DIR/.tmp-step_* folders and DIR/latest.tmp.* files (one
// process at a time saves into DIR).
void RemoveTempFolders(const std::string& dir) {
  std::error_code ec;
  const std::string latest_tmp = std::string(kLatestFile) + ".tmp.";
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kTempPrefix, 0) != 0 && name.rfind(latest_tmp, 0) != 0) continue;
    std::error_code remove_ec;
    fs::remove_all(entry.path(), remove_ec);
    if (remove_ec) {
      LAMINAR_LOG(WARN, TRAINER) << "cannot remove the leftover " << entry.path().string() << ": "
                                 << remove_ec.message();
    }
  }
}

// Deletes step_<M> folders with M < `step` beyond the newest keep_last - 1 of them. Each is first
// renamed to a temporary name, so a crash mid-delete leaves nothing that looks like a checkpoint.
void PruneOld(const std::string& dir, int64_t step, int keep_last) {
  if (keep_last <= 0) return;
  std::vector<int64_t> older;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    auto n = ParseStepName(entry.path().filename().string());
    if (n && *n < step && entry.is_directory(ec)) older.push_back(*n);
  }
  std::sort(older.rbegin(), older.rend());
  for (size_t i = static_cast<size_t>(keep_last - 1); i < older.size(); ++i) {
    const std::string path = dir + "/" + StepName(older[i]);
    const std::string doomed = dir + "/" + std::string(kTempPrefix) + std::to_string(older[i]) +
                               "-" + std::to_string(::getpid()) + "-delete";
    std::error_code remove_ec;
    if (::rename(path.c_str(), doomed.c_str()) == 0) fs::remove_all(doomed, remove_ec);
    if (remove_ec || fs::exists(path, remove_ec)) {
      LAMINAR_LOG(WARN, TRAINER) << "keep_last: cannot delete the old checkpoint " << path;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Load.

struct SavedState {
  TrainingState state;
  OptimizerConfig optimizer_config;
  int64_t optimizer_step = 0, skipped_steps = 0;
  std::vector<std::string> buffers;
  nlohmann::json files;
};

// A member of `j` of the kind `is` accepts, or DataLoss naming `where` and `key`.
StatusOr<const nlohmann::json*> Member(const nlohmann::json& j, const std::string& key,
                                       bool (nlohmann::json::*is)() const, const char* kind,
                                       const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) return DataLossError(where + ": missing \"" + key + "\"");
  if (!((*it).*is)()) return DataLossError(where + ": \"" + key + "\" is not " + kind);
  return &*it;
}

StatusOr<int64_t> IntMember(const nlohmann::json& j, const std::string& key,
                            const std::string& where) {
  LAMINAR_ASSIGN_OR_RETURN(auto v,
                           Member(j, key, &nlohmann::json::is_number_integer, "an integer", where));
  const auto n = v->get<int64_t>();
  if (n < 0) return DataLossError(where + ": \"" + key + "\" is negative");
  return n;
}

StatusOr<SavedState> ParseState(const std::string& text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return DataLossError(path + ": not a JSON object");
  SavedState s;
  LAMINAR_ASSIGN_OR_RETURN(auto format,
                           Member(j, "format", &nlohmann::json::is_string, "a string", path));
  if (*format != kFormatName) {
    return DataLossError(path + ": format " + format->dump() + " is not " + kFormatName);
  }
  LAMINAR_ASSIGN_OR_RETURN(int64_t version, IntMember(j, "format_version", path));
  if (version != kTrainingCheckpointFormatVersion) {
    return UnimplementedError(path + ": format_version " + std::to_string(version) +
                              "; this build reads " +
                              std::to_string(kTrainingCheckpointFormatVersion));
  }
  LAMINAR_ASSIGN_OR_RETURN(s.state.global_step, IntMember(j, "global_step", path));
  LAMINAR_ASSIGN_OR_RETURN(s.state.policy_version, IntMember(j, "policy_version", path));
  LAMINAR_ASSIGN_OR_RETURN(auto opt,
                           Member(j, "optimizer", &nlohmann::json::is_object, "an object", path));
  const std::string opt_where = path + " optimizer";
  LAMINAR_ASSIGN_OR_RETURN(s.optimizer_step, IntMember(*opt, "step", opt_where));
  LAMINAR_ASSIGN_OR_RETURN(s.skipped_steps, IntMember(*opt, "skipped_steps", opt_where));
  LAMINAR_ASSIGN_OR_RETURN(
      auto config, Member(*opt, "config", &nlohmann::json::is_object, "an object", opt_where));
  auto parsed = OptimizerConfig::FromJson(*config);
  if (!parsed.ok()) return DataLossError(opt_where + ": " + parsed.status().message());
  s.optimizer_config = *parsed;
  LAMINAR_ASSIGN_OR_RETURN(
      auto buffers, Member(*opt, "buffers", &nlohmann::json::is_array, "an array", opt_where));
  for (const auto& b : *buffers) {
    if (!b.is_string()) return DataLossError(opt_where + ": a buffer name is not a string");
    s.buffers.push_back(b.get<std::string>());
  }
  LAMINAR_ASSIGN_OR_RETURN(auto rng,
                           Member(j, "rng_states", &nlohmann::json::is_object, "an object", path));
  for (const auto& [name, hex] : rng->items()) {
    auto bytes = hex.is_string() ? HexDecode(hex.get<std::string>()) : std::nullopt;
    if (!bytes) return DataLossError(path + ": rng_states \"" + name + "\" is not a hex string");
    s.state.rng_states[name] = std::move(*bytes);
  }
  auto user = j.find("user");  // any JSON value
  if (user == j.end()) return DataLossError(path + ": missing \"user\"");
  s.state.user = *user;
  LAMINAR_ASSIGN_OR_RETURN(auto files,
                           Member(j, "files", &nlohmann::json::is_object, "an object", path));
  s.files = *files;
  return s;
}

// A safetensors file of the checkpoint, mapped, its size and checksum checked against `files`.
struct VerifiedFile {
  std::shared_ptr<MappedFile> mapping;  // keeps the views of `file` alive
  model::SafetensorsFile file;
  std::string path;
};

StatusOr<VerifiedFile> OpenVerified(const std::string& folder, const std::string& name,
                                    const nlohmann::json& files) {
  VerifiedFile v;
  v.path = folder + "/" + name;
  auto digest = files.find(name);
  if (digest == files.end() || !digest->is_object() || !digest->contains("size_bytes") ||
      !digest->contains("xxh64") || !(*digest)["size_bytes"].is_number_unsigned() ||
      !(*digest)["xxh64"].is_string()) {
    return DataLossError(folder + "/" + kStateFile + ": no size_bytes/xxh64 for " + name);
  }
  LAMINAR_ASSIGN_OR_RETURN(v.mapping, MappedFile::Open(v.path));
  const auto want_size = (*digest)["size_bytes"].get<uint64_t>();
  if (v.mapping->size() != want_size) {
    return DataLossError(v.path + ": " + std::to_string(v.mapping->size()) + " bytes, " +
                         kStateFile + " says " + std::to_string(want_size) + " (truncated?)");
  }
  const std::string got = Hash64Hex(XXH64(v.mapping->data(), v.mapping->size(), 0));
  const auto want = (*digest)["xxh64"].get<std::string>();
  if (got != want) {
    return DataLossError(v.path + ": xxh64 " + got + " differs from " + want + " recorded in " +
                         kStateFile + " (the file is corrupted)");
  }
  LAMINAR_ASSIGN_OR_RETURN(v.file, model::SafetensorsFile::Parse(v.mapping->bytes(), v.path));
  return v;
}

// One checked copy from a mapped tensor into a live buffer, done at commit.
struct CopyOp {
  float* dst;
  const uint8_t* src;
  size_t size_bytes;
};

// Checks that `file` holds exactly one F32 tensor prefix + name of each parameter's shape, and
// plans the copies into `dst` (a flat buffer laid out as `params`).
Status PlanCopies(const VerifiedFile& file, const ParameterSet& params, const std::string& prefix,
                  float* dst, std::vector<CopyOp>* ops) {
  for (const ParamInfo& p : params.params()) {
    const std::string name = prefix + p.name;
    const model::SafetensorsTensor* t = file.file.Find(name);
    if (t == nullptr) {
      return InvalidArgumentError(file.path + ": tensor '" + name + "' is missing (shape " +
                                  p.shape.ToString() + " in the ParameterSet)");
    }
    if (t->dtype != DType::kF32) {
      return InvalidArgumentError(file.path + ": tensor '" + name + "' is " +
                                  std::string(DTypeName(t->dtype)) + ", expected f32");
    }
    if (t->shape != p.shape) {
      return InvalidArgumentError(file.path + ": tensor '" + name + "' has shape " +
                                  t->shape.ToString() + ", the ParameterSet has " +
                                  p.shape.ToString());
    }
    ops->push_back({dst + p.offset, t->data, t->size_bytes});
  }
  return OkStatus();
}

// InvalidArgument naming a tensor of `file` that is not one of `expected` names.
Status CheckNoExtraTensors(const VerifiedFile& file, size_t num_expected,
                           const std::function<bool(const std::string&)>& expected) {
  if (file.file.tensors().size() == num_expected) return OkStatus();
  for (const auto& t : file.file.tensors()) {
    if (!expected(t.name)) {
      return InvalidArgumentError(file.path + ": unexpected tensor '" + t.name +
                                  "' (not in the ParameterSet)");
    }
  }
  return InvalidArgumentError(file.path + ": holds " + std::to_string(file.file.tensors().size()) +
                              " tensors, expected " + std::to_string(num_expected));
}

}  // namespace

// ---------------------------------------------------------------------------------------------

StatusOr<std::string> SaveTrainingCheckpoint(const std::string& dir, const ParameterSet& params,
                                             const Optimizer& optimizer, const TrainingState& state,
                                             const CheckpointSaveOptions& options) {
  LAMINAR_CHECK_EQ(optimizer.num_elements(), params.num_elements())
      << "the optimizer was built for another ParameterSet";
  LAMINAR_CHECK(optimizer.shard_begin() == 0 && optimizer.shard_end() == params.num_elements())
      << "a sharded optimizer (ZeRO-1) is saved gathered (Trainer::SaveCheckpoint)";
  if (state.global_step < 0) {
    return InvalidArgumentError(dir + ": global_step " + std::to_string(state.global_step) +
                                " is negative");
  }
  if (options.keep_last < 0) {
    return InvalidArgumentError(dir + ": keep_last " + std::to_string(options.keep_last) +
                                " is negative (0 keeps all)");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
  const std::string name = StepName(state.global_step);
  const std::string target = dir + "/" + name;
  if (fs::exists(target, ec) && !options.overwrite) {
    auto latest = LatestCheckpointStep(dir);
    return AlreadyExistsError(
        target + " already exists (latest: " +
        (latest.ok() ? StepName(*latest) : latest.status().message()) +
        "); it is from an earlier run or an interrupted save; pass overwrite to replace it");
  }
  RemoveTempFolders(dir);
  const std::string tmp = dir + "/" + std::string(kTempPrefix) + std::to_string(state.global_step) +
                          "-" + std::to_string(::getpid());
  fs::create_directory(tmp, ec);
  if (ec) return InternalError("cannot create " + tmp + ": " + ec.message());
  Status st = WriteFolder(tmp, params, optimizer, state);
  StatusOr<std::string> displaced = st.ok() ? Install(tmp, target) : StatusOr<std::string>(st);
  if (!displaced.ok()) {
    fs::remove_all(tmp, ec);
    return displaced.status().WithContext("saving " + target);
  }
  st = FsyncPath(dir);
  if (st.ok()) st = WriteFileAtomic(dir + "/" + kLatestFile, name + "\n");
  if (!st.ok()) {
    Uninstall(tmp, target, *displaced);
    return st.WithContext("saving " + target);
  }
  LAMINAR_RETURN_IF_ERROR(FsyncPath(dir), "saving " + target);
  if (!displaced->empty()) fs::remove_all(*displaced, ec);
  PruneOld(dir, state.global_step, options.keep_last);
  return target;
}

StatusOr<int64_t> LatestCheckpointStep(const std::string& dir) {
  const std::string path = dir + "/" + kLatestFile;
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFoundError(dir + " holds no checkpoint (no " + path + ")");
  LAMINAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  auto step = ParseStepName(text);
  if (!step) return DataLossError(path + " reads '" + text.substr(0, 40) + "', not step_<N>");
  return *step;
}

StatusOr<LoadedCheckpoint> LoadTrainingCheckpoint(const std::string& dir, ParameterSet* params,
                                                  Optimizer* optimizer,
                                                  std::optional<int64_t> step) {
  LAMINAR_CHECK(params != nullptr && optimizer != nullptr);
  LAMINAR_CHECK_EQ(optimizer->num_elements(), params->num_elements())
      << "the optimizer was built for another ParameterSet";
  LAMINAR_CHECK(optimizer->shard_begin() == 0 && optimizer->shard_end() == params->num_elements())
      << "a sharded optimizer (ZeRO-1) loads through an unsharded one (Trainer::LoadCheckpoint)";
  int64_t n = 0;
  if (step) {
    n = *step;
  } else {
    LAMINAR_ASSIGN_OR_RETURN(n, LatestCheckpointStep(dir));
  }
  LoadedCheckpoint out;
  out.path = dir + "/" + StepName(n);
  const std::string state_path = out.path + "/" + kStateFile;
  LAMINAR_ASSIGN_OR_RETURN(std::string text, ReadFileToString(state_path));
  LAMINAR_ASSIGN_OR_RETURN(SavedState saved, ParseState(text, state_path));
  if (saved.state.global_step != n) {
    return DataLossError(state_path + ": global_step " + std::to_string(saved.state.global_step) +
                         " does not match the folder name");
  }
  LAMINAR_ASSIGN_OR_RETURN(VerifiedFile model_file,
                           OpenVerified(out.path, kModelFile, saved.files));
  LAMINAR_ASSIGN_OR_RETURN(VerifiedFile optimizer_file,
                           OpenVerified(out.path, kOptimizerFile, saved.files));

  std::vector<CopyOp> ops;
  LAMINAR_RETURN_IF_ERROR(PlanCopies(model_file, *params, "", params->values().data(), &ops));
  LAMINAR_RETURN_IF_ERROR(CheckNoExtraTensors(
      model_file, params->params().size(),
      [params](const std::string& name) { return params->IndexOf(name) >= 0; }));
  const std::vector<std::string> buffers = optimizer->buffer_names();
  if (saved.optimizer_config.name != optimizer->config().name || saved.buffers != buffers) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
      return "[" + s + "]";
    };
    return InvalidArgumentError(state_path + ": saved by optimizer '" +
                                saved.optimizer_config.name + "' with buffers " +
                                join(saved.buffers) + ", loading into '" +
                                optimizer->config().name + "' with buffers " + join(buffers));
  }
  for (const std::string& b : buffers) {
    LAMINAR_RETURN_IF_ERROR(
        PlanCopies(optimizer_file, *params, b + ".", optimizer->mutable_buffer(b).data(), &ops));
  }
  LAMINAR_RETURN_IF_ERROR(CheckNoExtraTensors(
      optimizer_file, buffers.size() * params->params().size(), [&](const std::string& name) {
        for (const auto& b : buffers) {
          if (name.rfind(b + ".", 0) == 0 && params->IndexOf(name.substr(b.size() + 1)) >= 0) {
            return true;
          }
        }
        return false;
      }));

  // Everything checked: commit.
  for (const CopyOp& op : ops) std::memcpy(op.dst, op.src, op.size_bytes);
  optimizer->RestoreCounters(saved.optimizer_step, saved.skipped_steps);
  out.state = std::move(saved.state);
  out.optimizer_config = std::move(saved.optimizer_config);
  return out;
}

Status ExportHuggingFace(const std::string& dir, const model::ModelConfig& config,
                         const ParameterSet& params,
                         const std::map<std::string, std::string>& tokenizer_files, DType dtype,
                         bool overwrite) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return InvalidArgumentError(dir + ": export dtype " + std::string(DTypeName(dtype)) +
                                " is not f32 or bf16");
  }
  model::HfSaveOptions options;
  options.tokenizer_files = tokenizer_files;
  options.overwrite = overwrite;
  return model::SaveHfCheckpoint(dir, config, params.ToWeightStore(dtype), options);
}

}  // namespace laminar::trainer
