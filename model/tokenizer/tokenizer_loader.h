// Loading a tokenizer from any file or folder we support, detected by name and content, and
// exporting one as Hugging Face tokenizer files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"
#include "model/tokenizer/tokenizer.h"

namespace laminar::model {

class GgufFile;

// Loads the tokenizer at `path`, which may be:
//   - a GGUF file (vocab-only or a full model): tokenizer.ggml.model "llama" or "gpt2";
//   - a Hugging Face tokenizer.json (model.type BPE), or a folder holding one (a checkpoint
//     folder); tokenizer_config.json beside it sets bos/eos/add_bos_token/add_eos_token and the
//     chat template when present;
//   - an OpenAI-style encoder.json with its sibling vocab.bpe (GPT-2, or the 128000-token Llama 3
//     base vocab, to which Llama 3's 256 special tokens are appended);
//   - a llama2.c tokenizer.bin (u32 max_token_length, then per token f32 score, i32 length, bytes).
// Errors: NotFound for a missing path; InvalidArgument naming the path when the content is none
// of these or is malformed; Unimplemented for a recognized format we do not support.
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& path);

// The tokenizer of a model checkpoint: `tokenizer_path` when non-empty, else LoadTokenizer of
// `model_path` (GGUF, HF folder, ...). A llama2.c model file (e.g. stories260K.bin) holds no
// vocabulary: then the one tokenizer.bin or tok*.bin beside it is used (tok512.bin). Errors: as
// LoadTokenizer, with a hint to pass the tokenizer explicitly when none is found.
StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerForModel(const std::string& model_path,
                                                           const std::string& tokenizer_path);

// Individual loaders (LoadTokenizer dispatches to these), each also over content already read
// (the Parse forms name the paths they are given in errors; nothing is read from them).
StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path);
StatusOr<std::unique_ptr<Tokenizer>> ParseLlama2cTokenizer(std::span<const uint8_t> bytes,
                                                           const std::string& path);
// encoder.json with the vocab.bpe beside it.
StatusOr<std::unique_ptr<Tokenizer>> LoadEncoderJsonTokenizer(const std::string& encoder_json_path);
StatusOr<std::unique_ptr<Tokenizer>> ParseEncoderJsonTokenizer(const std::string& text,
                                                               const std::string& bpe_text,
                                                               const std::string& encoder_json_path,
                                                               const std::string& bpe_path);
StatusOr<std::unique_ptr<Tokenizer>> LoadGgufTokenizer(const std::string& path);
// From a parsed GGUF file's tokenizer.ggml.* metadata; errors name gguf.name().
StatusOr<std::unique_ptr<Tokenizer>> GgufTokenizer(const GgufFile& gguf);
// `tokenizer_json` is the file's text; `config_json` the text of tokenizer_config.json or empty.
// `source` names the file in errors.
StatusOr<std::unique_ptr<Tokenizer>> ParseHfTokenizer(const std::string& tokenizer_json,
                                                      const std::string& config_json,
                                                      const std::string& source);

// Hugging Face files for `tokenizer`: file name → content, for "tokenizer.json",
// "tokenizer_config.json" and "special_tokens_map.json". A SentencePiece-BPE vocabulary becomes
// an HF BPE model with byte_fallback and the Llama "▁" normalizer/decoder; a byte-level one a BPE
// model with the Split regexes + ByteLevel pre-tokenizer and decoder. `chat_template` (may be
// empty) goes into tokenizer_config.json. LoadTokenizer on the written folder encodes as
// `tokenizer` does. Errors: Unimplemented for a tokenizer kind without an HF form.
StatusOr<std::map<std::string, std::string>> ExportHfTokenizerFiles(
    const Tokenizer& tokenizer, const std::string& chat_template);

}  // namespace laminar::model
