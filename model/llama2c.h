// llama2.c checkpoints (karpathy/llama2.c): the legacy format read by run.c (7 x int32 header,
// fp32 weights) and export.py's "version 1" (magic "ak42", 256-byte header, fp32 weights), loaded
// into a ModelConfig and a WeightStore under Hugging Face names as zero-copy views of the mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/mapped_file.h"
#include "core/status.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace laminar::model {

enum class Llama2cFormat : uint8_t {
  kLegacy,    // run.c: int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size
              // (negative: unshared classifier follows), seq_len; then the weights
  kVersion1,  // export.py version1_export: u32 0x616b3432, i32 1, the 7 params, u8
              // shared_classifier, zero padding to 256 bytes; then the weights
};

// The header of a llama2.c checkpoint, validated (all sizes positive, heads divide dim, GQA
// groups whole, even head size).
struct Llama2cHeader {
  Llama2cFormat format = Llama2cFormat::kLegacy;
  int64_t dim = 0;         // C
  int64_t hidden_dim = 0;  // F
  int64_t n_layers = 0;    // L
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // Hkv
  int64_t vocab_size = 0;  // V (absolute value of the legacy field)
  int64_t seq_len = 0;     // max positions; legacy files also store RoPE tables for this many
  bool shared_classifier = true;
  size_t header_bytes = 0;    // 28 (legacy) or 256 (version 1)
  size_t expected_bytes = 0;  // exact file size the header implies
};

// Parses and validates the header of `bytes` (a whole file; `name` for messages). Checks that
// the file size is exactly what the header implies. Errors: InvalidArgument (bad parameters),
// DataLoss (size mismatch: "x.bin: file is 1000 bytes, header implies 1056540 (dim 64 ...)"),
// Unimplemented (version 2 int8 and other versions).
StatusOr<Llama2cHeader> ParseLlama2cHeader(std::span<const uint8_t> bytes, const std::string& name);

// Loads a llama2.c checkpoint (either format) from `path`.
//   config   architecture "llama", rope_layout kInterleaved, rope_theta 10000, rms_norm_eps 1e-5,
//            tie_word_embeddings = shared classifier, bos 1 / eos {2} (run.c's fixed ids),
//            max_position_embeddings = seq_len
//   weights  f32 views into the mapping: model.embed_tokens.weight [V, C],
//            model.layers.{i}.self_attn.{q,k,v,o}_proj.weight, mlp.{gate,up,down}_proj.weight
//            (w1 = gate, w3 = up, w2 = down), input_layernorm / post_attention_layernorm [C],
//            model.norm.weight [C], lm_head.weight [V, C] when not shared.
// `weights` is cleared first. Errors name the file.
Status LoadLlama2c(const std::string& path, ModelConfig* config, WeightStore* weights);
// Same, from an already mapped file (kept alive by `weights`).
Status LoadLlama2c(std::shared_ptr<MappedFile> file, ModelConfig* config, WeightStore* weights);

}  // namespace laminar::model
