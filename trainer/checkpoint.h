// Training checkpoints: the full state needed to resume (weights, optimizer buffers and counters,
// global step, policy version, RNG states, the caller's JSON), saved atomically with checksums;
// and the export of the weights as a Hugging Face folder.
//
//   DIR/latest                          "step_<N>\n": the newest complete checkpoint
//   DIR/step_<N>/model.safetensors      f32 values, one tensor per parameter (Hugging Face names)
//   DIR/step_<N>/optimizer.safetensors  "<buffer>.<name>": exp_avg / exp_avg_sq (AdamW),
//                                       momentum_buffer (SGD with momentum); may hold no tensor
//   DIR/step_<N>/trainer_state.json     steps, version, counters, RNG states, user JSON, the
//                                       optimizer config, format version, XXH64 of both files
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "core/status.h"
#include "model/model_config.h"
#include "trainer/optimizer.h"
#include "trainer/parameters.h"

namespace laminar::trainer {

// trainer_state.json's "format_version"; a loader refuses versions it does not know.
inline constexpr int kTrainingCheckpointFormatVersion = 1;

// What a checkpoint holds besides the tensors and the optimizer (which come from the
// ParameterSet and the Optimizer themselves).
struct TrainingState {
  int64_t global_step = 0;     // names the folder: step_<global_step>; >= 0
  int64_t policy_version = 0;  // docs/architecture.md
  // Opaque byte strings by the caller's names (a serialized std::mt19937_64, a Xoshiro256 state);
  // any bytes, stored hex-encoded.
  std::map<std::string, std::string> rng_states;
  // The caller's data (the actor's data cursor and experience buffer), stored as it is.
  nlohmann::json user = nlohmann::json::object();
};

struct CheckpointSaveOptions {
  // Keep this many step_<N> folders, the new one included: older ones (smaller N) beyond that are
  // deleted once the new one is complete and `latest` names it. 0 keeps all. Folders with a larger
  // N than the new one (from an abandoned run) are never deleted.
  int keep_last = 2;
  // Replace an existing step_<N> (atomically, by exchanging the folders). Without it an existing
  // step_<N> is AlreadyExists.
  bool overwrite = false;
};

// Saves `params`, `optimizer` and `state` as DIR/step_<state.global_step> (DIR is created if
// needed) and points DIR/latest at it. Atomic: everything is written into
// DIR/.tmp-step_<N>-<pid>/, each file fsynced, the folder fsynced and renamed to step_<N>, DIR
// fsynced, then `latest` replaced by write-temp-and-rename; a crash at any point leaves the
// previous checkpoint loadable. If `latest` cannot be written the new folder is removed again.
// Leftover .tmp-step_* folders from an interrupted save are removed first, so one process at a
// time may save into DIR. optimizer.num_elements() must equal params.num_elements() (CHECK).
// Returns the new folder's path. Errors: InvalidArgument (negative step or keep_last),
// AlreadyExists (step_<N> exists: from an earlier run, or an interrupted save that got as far as
// the rename; pass overwrite), file-system errors naming the path. A failure to delete an old
// checkpoint is logged, not returned.
StatusOr<std::string> SaveTrainingCheckpoint(const std::string& dir, const ParameterSet& params,
                                             const Optimizer& optimizer, const TrainingState& state,
                                             const CheckpointSaveOptions& options = {});

// The N of DIR/latest. NotFound when DIR has no `latest` (no complete checkpoint yet); DataLoss
// when it does not read "step_<N>".
StatusOr<int64_t> LatestCheckpointStep(const std::string& dir);

struct LoadedCheckpoint {
  std::string path;  // DIR/step_<N>
  TrainingState state;
  // The config the optimizer was saved with; the live optimizer keeps its own (a resumed run may
  // change the lr, say). Compare them if that matters.
  OptimizerConfig optimizer_config;
};

// Loads DIR/step_<step>, by default the one DIR/latest names (temporary folders are ignored), into
// `params` and `optimizer` (values, buffers, step and skipped-step counters), and returns the rest.
// Everything is checked before anything is written: each file's size and XXH64 against
// trainer_state.json, then every tensor's name, dtype (F32) and shape against `params` (no tensor
// missing, none extra) and the optimizer's buffers against `optimizer`; on any error `params` and
// `optimizer` are untouched. (The checked bytes are copied straight from the memory-mapped files,
// so a load never holds a second copy of the model.) Errors name the file and tensor: NotFound (no
// checkpoint, a missing file), DataLoss (checksum or size mismatch, unreadable JSON),
// InvalidArgument (a tensor or buffer that does not fit, another optimizer's state),
// Unimplemented (an unknown format version).
StatusOr<LoadedCheckpoint> LoadTrainingCheckpoint(const std::string& dir, ParameterSet* params,
                                                  Optimizer* optimizer,
                                                  std::optional<int64_t> step = std::nullopt);

// Writes `params` as a Hugging Face folder `dir` (model.safetensors or shards, config.json,
// generation_config.json, and `tokenizer_files` as they are, e.g. from
// model::ExportHfTokenizerFiles): model::SaveHfCheckpoint on params.ToWeightStore(dtype), so
// `dir` appears atomically and `overwrite` replaces an existing one (else AlreadyExists).
// `config` describes the parameters, including their q/k layout: when config.rope_layout is
// kInterleaved (weights that came from GGUF or llama2.c) SaveHfCheckpoint permutes the q/k rows
// to rotate-half while writing, so the folder computes the same function in transformers; with
// kRotateHalf (weights from a Hugging Face folder) they are written as they are.
// `dtype`: kF32 or kBF16 (rounded to nearest even); anything else is InvalidArgument.
// Errors: SaveHfCheckpoint's (config/tensor mismatch naming the tensor, file-system errors).
Status ExportHuggingFace(const std::string& dir, const model::ModelConfig& config,
                         const ParameterSet& params,
                         const std::map<std::string, std::string>& tokenizer_files, DType dtype,
                         bool overwrite = false);

}  // namespace laminar::trainer
