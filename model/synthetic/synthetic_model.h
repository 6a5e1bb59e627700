// Models the project makes itself: a seeded, Llama-shaped checkpoint with deterministic weights
// and a small byte-level BPE tokenizer learned from text the project ships, written as a GGUF
// file and as a Hugging Face folder. Tests of mechanics (the RL loop, the CLI verbs, rollouts,
// speculation, training) run on it, so a user's clone needs nothing from outside to test them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/model_config.h"
#include "model/tokenizer/tokenizer.h"
#include "model/weight_store.h"

namespace laminar::model {

// The shape of a synthetic model. The vocabulary is the tokenizer's: 3 special tokens
// (<|endoftext|>, <|im_start|>, <|im_end|>), the 256 bytes, then up to `num_merges` learned pieces.
struct SyntheticPreset {
  std::string name;
  int num_merges = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t max_position_embeddings = 0;
  // Standard deviations of the embeddings and of the output layer (untied: a tied head makes a
  // random model repeat its last token). output_std sets how peaked the next-token
  // distributions are (logits' spread is about output_std * sqrt(hidden_size)). The other
  // projections use 1/sqrt(fan_in); norms are 1.
  float embedding_std = 0.f;
  float output_std = 0.f;
};

// The presets by name ("tiny-llama": 64 wide, 4 layers, GQA 4/2, ~250 merges). Unknown name:
// InvalidArgument listing the presets.
StatusOr<SyntheticPreset> FindSyntheticPreset(std::string_view name);
std::vector<std::string> SyntheticPresetNames();

// The text the tokenizer is learned from (shipped in the binary).
std::string_view SyntheticCorpus();

struct SyntheticModel {
  ModelConfig config;  // rope_layout kInterleaved (GGUF `llama`'s layout)
  WeightStore weights;
  Vocab vocab;  // pieces, types, bos/eos, the ChatML chat template
  std::vector<std::pair<std::string, std::string>> merges;
  std::string pre_tokenizer = "gpt2";
  std::string description;  // "tiny-llama seed 1"
};

// Builds the model of `preset` for `seed`: the same bytes for the same (preset, seed) on every
// run and machine (weights from a 64-bit Mersenne Twister through an explicit Box-Muller).
StatusOr<SyntheticModel> MakeSyntheticModel(const SyntheticPreset& preset, uint64_t seed);

// The tokenizer of `model` (the one its files load back into).
StatusOr<std::unique_ptr<Tokenizer>> SyntheticTokenizer(const SyntheticModel& model);

// Writes `dir`/model.gguf (weights, tokenizer, chat template) and `dir`/hf/ (safetensors,
// config.json, tokenizer.json, tokenizer_config.json). The folder is built beside `dir` and
// renamed into place. An existing `dir` is AlreadyExists unless `overwrite`.
Status WriteSyntheticModel(const SyntheticModel& model, const std::string& dir, bool overwrite);

}  // namespace laminar::model
