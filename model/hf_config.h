// Hugging Face config.json and generation_config.json <-> ModelConfig, for LlamaForCausalLM,
// Qwen2ForCausalLM and MistralForCausalLM (field names and defaults from transformers'
// LlamaConfig / Qwen2Config / MistralConfig).
#pragma once

#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/status.h"
#include "model/model_config.h"

namespace laminar::model {

struct HfConfig {
  ModelConfig model;        // rope_layout = kRotateHalf (Hugging Face's layout)
  std::string torch_dtype;  // "float32", "bfloat16", "float16", or "" when absent
};

// Parses config.json text. Architecture from "architectures"[0], else "model_type". Fields:
// hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size (required);
// num_key_value_heads (default H), head_dim (default C/H), max_position_embeddings, rope_theta,
// rope_scaling ("llama3" | "linear"; or transformers 5's rope_parameters), rms_norm_eps,
// tie_word_embeddings, attention_bias (Qwen2: always true), bos/eos_token_id (int, list or null),
// torch_dtype (or "dtype"). Absent optional fields take transformers' defaults for the
// architecture. Errors name `source` and the field: InvalidArgument (missing or wrong type, invalid
// values), Unimplemented (unknown architecture, rope type, hidden_act other than silu, mlp_bias,
// o_proj bias). Mistral's sliding_window W caps max_position_embeddings at W: we attend to the
// whole context, which equals sliding-window attention for sequences of at most W (GGUF files
// carry no window; their context_length stands). An absent
// num_key_value_heads means H for every architecture (Qwen2Config's own default would be 32).
StatusOr<HfConfig> ParseHfConfig(std::string_view json_text, const std::string& source);

// config.json text for `config` (architectures, model_type, torch_dtype and the fields above;
// rope_theta/rope_scaling in the legacy spelling that transformers 4.x and 5.x both read).
// Unimplemented when transformers could not express the config (Llama with attention_bias, whose
// HF attention would also expect an o_proj bias), or an unknown architecture.
StatusOr<std::string> HfConfigToJson(const ModelConfig& config, std::string_view torch_dtype);

// generation_config.json text: bos_token_id and eos_token_id (an int when there is one).
std::string HfGenerationConfigJson(const ModelConfig& config);

// "float32" / "bfloat16" / "float16" for the float DTypes, "" for the rest.
std::string_view TorchDTypeName(DType dtype);

}  // namespace laminar::model
