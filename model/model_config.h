// ModelConfig: the architecture hyper-parameters of a Llama-family model (Llama 2/3, Qwen2/2.5,
// SmolLM2, Mistral), whatever checkpoint format it came from. Field names follow Hugging Face's
// config.json (LlamaConfig / Qwen2Config).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace laminar::model {

// How RoPE pairs dimensions inside a head. llama2.c and GGUF `llama` rotate adjacent pairs
// (x[2i], x[2i+1]); Hugging Face rotates halves (x[i], x[i + D/2]). q/k projection rows are
// permuted between the two (see rope_permute.h).
enum class RopeLayout : uint8_t { kInterleaved, kRotateHalf };

// Llama-3 style `rope_scaling` (rope_type "llama3"), or linear scaling; absent means none.
struct RopeScaling {
  std::string type;  // "llama3", "linear"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture = "llama";  // "llama", "qwen2", "mistral" (all the same graph here)
  int64_t vocab_size = 0;              // V
  int64_t hidden_size = 0;             // C
  int64_t intermediate_size = 0;       // F
  int64_t num_hidden_layers = 0;       // L
  int64_t num_attention_heads = 0;     // H
  int64_t num_key_value_heads = 0;     // Hkv
  int64_t head_dim = 0;                // D (hidden_size / H unless the checkpoint says otherwise)
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  bool attention_bias = false;         // q/k/v projections carry a bias (Qwen2)
  int64_t bos_token_id = -1;           // -1: none
  std::vector<int64_t> eos_token_ids;  // may be several (Llama-3: <|end_of_text|>, <|eot_id|>)
  // Layout of the q/k weights as stored in this object's WeightStore.
  RopeLayout rope_layout = RopeLayout::kRotateHalf;

  // Checks the numbers are positive and consistent (H divisible by Hkv, head_dim * H sane).
  // Errors are InvalidArgument naming the field; `source` (a path) is included in the message.
  Status Validate(const std::string& source) const;
};

}  // namespace laminar::model
