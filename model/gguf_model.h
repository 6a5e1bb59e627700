// Loading a Llama-family model (GGUF architectures llama, mistral, qwen2) from a GGUF file into
// a ModelConfig and a WeightStore under Hugging Face tensor names. Naming: llama.cpp's
// llama-arch.cpp (token_embd, blk.N.attn_q, ...); keys: ggml's docs/gguf.md ("{arch}.*").
#pragma once

#include <string>

#include "core/status.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/weight_store.h"

namespace laminar::model {

// The ModelConfig described by `gguf`'s metadata (and, for the vocabulary size and the qkv bias,
// its tensor infos):
//   {arch}.context_length -> max_position_embeddings, embedding_length -> hidden_size,
//   block_count -> num_hidden_layers, feed_forward_length -> intermediate_size,
//   attention.head_count / head_count_kv (default: head_count) -> heads,
//   attention.key_length (default hidden/heads) -> head_dim, rope.freq_base (default 10000),
//   attention.layer_norm_rms_epsilon (default 1e-5), rope.scaling.type/factor ("linear" only),
//   {arch}.vocab_size, else the tokenizer.ggml.tokens count, else token_embd's rows;
//   tokenizer.ggml.bos_token_id, eos_token_id (+ eot_token_id when different).
// rope_layout is kInterleaved for llama/mistral (llama.cpp's converter permutes q/k for them) and
// kRotateHalf for qwen2 (stored unpermuted, NEOX RoPE). tie_word_embeddings is true when
// output.weight is absent or bit-identical to token_embd.weight (llama2.c-converted files).
// Errors: Unimplemented naming an unsupported architecture or rope scaling; InvalidArgument /
// NotFound naming the file and key otherwise.
StatusOr<ModelConfig> GgufModelConfig(const GgufFile& gguf);

// Loads config and weights. F32 tensors become zero-copy views of the mapping; every other type
// is dequantized to an owned f32 Tensor and its raw blocks are kept with PutQuantized (shape
// [rows, ne0]). `weights` is replaced on success only. Errors (all naming the file and tensor):
// a missing tensor, a shape that disagrees with the config ("tensor 'blk.0.attn_q.weight' has
// shape [8, 8], expected [16, 8]"), an unexpected tensor, a type we cannot dequantize.
Status LoadGgufModel(const GgufFile& gguf, ModelConfig* config, WeightStore* weights);
// Opens and loads `path`.
Status LoadGgufModel(const std::string& path, ModelConfig* config, WeightStore* weights);

}  // namespace laminar::model
