// ModelConfig validation.
#include "model/model_config.h"

namespace laminar::model {

Status ModelConfig::Validate(const std::string& source) const {
  auto bad = [&](const std::string& what) {
    return InvalidArgumentError(source + ": invalid model config: " + what);
  };
  auto positive = [&](const char* name, int64_t v) -> Status {
    if (v <= 0) return bad(std::string(name) + " must be positive, got " + std::to_string(v));
    return OkStatus();
  };
  LAMINAR_RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  LAMINAR_RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  LAMINAR_RETURN_IF_ERROR(positive("intermediate_size", intermediate_size));
  LAMINAR_RETURN_IF_ERROR(positive("num_hidden_layers", num_hidden_layers));
  LAMINAR_RETURN_IF_ERROR(positive("num_attention_heads", num_attention_heads));
  LAMINAR_RETURN_IF_ERROR(positive("num_key_value_heads", num_key_value_heads));
  LAMINAR_RETURN_IF_ERROR(positive("head_dim", head_dim));
  // Bounds far above any real model, so that shapes and tensor lists derived from a config read
  // from a file can neither overflow int64 nor exhaust memory before the tensors are checked.
  auto at_most = [&](const char* name, int64_t v, int64_t limit) -> Status {
    if (v > limit) {
      return bad(std::string(name) + " = " + std::to_string(v) + " exceeds the supported maximum " +
                 std::to_string(limit));
    }
    return OkStatus();
  };
  LAMINAR_RETURN_IF_ERROR(at_most("vocab_size", vocab_size, int64_t{1} << 24));
  LAMINAR_RETURN_IF_ERROR(at_most("hidden_size", hidden_size, int64_t{1} << 20));
  LAMINAR_RETURN_IF_ERROR(at_most("intermediate_size", intermediate_size, int64_t{1} << 22));
  LAMINAR_RETURN_IF_ERROR(at_most("num_hidden_layers", num_hidden_layers, 4096));
  LAMINAR_RETURN_IF_ERROR(at_most("num_attention_heads", num_attention_heads, 4096));
  LAMINAR_RETURN_IF_ERROR(at_most("head_dim", head_dim, 4096));
  LAMINAR_RETURN_IF_ERROR(
      at_most("max_position_embeddings", max_position_embeddings, int64_t{1} << 26));
  if (num_key_value_heads > num_attention_heads) {
    return bad("num_key_value_heads (" + std::to_string(num_key_value_heads) +
               ") exceeds num_attention_heads (" + std::to_string(num_attention_heads) + ")");
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    return bad("num_attention_heads (" + std::to_string(num_attention_heads) +
               ") is not a multiple of num_key_value_heads (" +
               std::to_string(num_key_value_heads) + ")");
  }
  if (head_dim % 2 != 0)
    return bad("head_dim must be even for RoPE, got " + std::to_string(head_dim));
  if (!(rope_theta > 0)) return bad("rope_theta must be positive");
  if (!(rms_norm_eps > 0)) return bad("rms_norm_eps must be positive");
  if (bos_token_id >= vocab_size) return bad("bos_token_id beyond vocab_size");
  for (int64_t e : eos_token_ids) {
    if (e < 0 || e >= vocab_size) return bad("eos_token_id " + std::to_string(e) + " out of range");
  }
  return OkStatus();
}

}  // namespace laminar::model
