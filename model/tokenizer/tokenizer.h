// Tokenizer: the interface every tokenizer implements (SentencePiece-style BPE, byte-level BPE),
// the vocabulary it is built from, and a streaming decoder that emits only complete UTF-8.
// Loading from files lives in tokenizer_loader.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace laminar::model {

// Token types as GGUF's `tokenizer.ggml.token_type` numbers them (llama.cpp's llama_token_type).
enum class TokenType : uint8_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      // BOS, EOS, <|im_start|>: special tokens
  kUserDefined = 4,  // added tokens that are not special; always matched whole in the input
  kUnused = 5,
  kByte = 6,  // SentencePiece byte fallback piece "<0xHH>"
};

enum class TokenizerKind : uint8_t {
  kSentencePieceBpe,  // pieces use "▁" for spaces, byte fallback "<0xHH>"
  kByteLevelBpe,      // pieces are bytes through GPT-2's byte-to-unicode table
};

// Everything a tokenizer knows about its tokens. Piece text is stored as the model stores it:
// SentencePiece pieces with "▁"; byte-level pieces in GPT-2's unicode form ("Ġhello"); special
// and added tokens (control, user-defined) as their literal text.
struct Vocab {
  std::vector<std::string> pieces;  // [V]
  std::vector<float> scores;        // [V]; SentencePiece log-probabilities, 0 when absent
  std::vector<TokenType> types;     // [V]
  int32_t bos_id = -1;              // -1: none
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;       // Encode(add_special) prepends BOS
  bool add_eos = false;       // Encode(add_special) appends EOS
  std::string chat_template;  // Jinja text when the source carries one; may be empty

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
  // Checks sizes agree and the special ids are in range; `source` names the file in errors.
  Status Validate(std::string_view source) const;
};

struct EncodeOptions {
  // Prepend BOS / append EOS as the vocabulary's add_bos / add_eos say.
  bool add_special = false;
  // Text equal to a special (control/unknown) token's piece becomes that token, as Hugging Face
  // does with added tokens. Non-special added (user-defined) tokens are matched either way, as in
  // Hugging Face; with false, special-token text is tokenized as ordinary text.
  bool parse_special = true;
};

class StreamingDecoder;

// Abstract tokenizer. Immutable after construction: every method is const and thread-safe.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual TokenizerKind kind() const = 0;

  // UTF-8 `text` → token ids in [0, V). Errors: InvalidArgument "invalid UTF-8 at byte offset N"
  // when `text` is not valid UTF-8.
  virtual StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                const EncodeOptions& options) const = 0;
  StatusOr<std::vector<int32_t>> Encode(std::string_view text) const {
    return Encode(text, EncodeOptions{});
  }

  // Ids → UTF-8 text, as Hugging Face's decode does (SentencePiece: "▁" → space, bytes fused,
  // one leading space stripped). Byte sequences that are not valid UTF-8 become U+FFFD.
  // skip_special drops control/unknown tokens. Errors: OutOfRange naming the bad id.
  StatusOr<std::string> Decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes one token contributes to decoded text (before the leading-space strip), or
  // empty for a skipped special token. Errors: OutOfRange for an id outside [0, V).
  virtual StatusOr<std::string> TokenBytes(int32_t id, bool skip_special) const = 0;
  // True when Decode strips one leading space (SentencePiece's dummy prefix).
  virtual bool strips_leading_space() const { return false; }

  const Vocab& vocab() const { return vocab_; }
  int32_t vocab_size() const { return vocab_.size(); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  // The stored piece of `id` (see Vocab); empty string for an id out of range.
  const std::string& TokenToPiece(int32_t id) const;
  // The id whose stored piece is exactly `piece`.
  std::optional<int32_t> PieceToToken(std::string_view piece) const;
  // Ids of control, unknown and user-defined tokens, ascending.
  std::vector<int32_t> SpecialTokens() const;
  bool IsSpecial(int32_t id) const;

  // A decoder for one stream of ids; it borrows this tokenizer, which must outlive it.
  StreamingDecoder NewStreamingDecoder(bool skip_special = false) const;

 protected:
  explicit Tokenizer(Vocab vocab);

  // OutOfRange naming `id` when it is outside [0, V); for TokenBytes implementations.
  Status CheckId(int32_t id) const;

  // Splits `text` into runs of plain text and whole special/added tokens (leftmost-longest match,
  // as Hugging Face's added-token matcher). Each piece: {text, -1} or {"", id}.
  struct Fragment {
    std::string_view text;
    int32_t id = -1;
  };
  std::vector<Fragment> SplitSpecial(std::string_view text, bool parse_special) const;

  Vocab vocab_;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> piece_to_id_;
  // Added tokens matched in the input, grouped by first byte, longest first.
  std::vector<std::vector<int32_t>> matchable_by_byte_;  // [256]
};

// Turns ids into text one at a time. Each call returns only complete UTF-8 characters; bytes of a
// character split across tokens wait for the rest. Finish() flushes what is left (an incomplete
// sequence becomes U+FFFD). The concatenation of all outputs equals Tokenizer::Decode of all ids.
// Not thread-safe; one per stream.
class StreamingDecoder {
 public:
  StreamingDecoder(const Tokenizer& tokenizer, bool skip_special);
  // Errors: OutOfRange for an id outside [0, V) (the decoder state is unchanged).
  StatusOr<std::string> Next(int32_t id);
  std::string Finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool at_start_ = true;
  std::string pending_;  // bytes of an incomplete UTF-8 character
};

// ---- UTF-8 helpers shared by the tokenizers ----

// Offset of the first byte that does not start a valid UTF-8 sequence, or nullopt when valid.
// Rejects overlong forms, surrogates and code points above U+10FFFF.
std::optional<size_t> FindInvalidUtf8(std::string_view text);
// InvalidArgument "invalid UTF-8 at byte offset N" when `text` is not valid.
Status CheckUtf8(std::string_view text);
// Length in bytes of the valid UTF-8 character starting at text[0]; 0 if invalid or incomplete.
size_t Utf8CharLength(std::string_view text);
// Appends `bytes` to `out`, replacing invalid sequences with U+FFFD (one per maximal invalid
// subpart, as WHATWG / Python's errors="replace"). When `final` is false an incomplete sequence at
// the end is left in `*rest` instead; otherwise it is replaced.
void AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out, std::string* rest);
// Appends the UTF-8 encoding of code point `cp`.
void AppendCodepoint(uint32_t cp, std::string* out);

}  // namespace laminar::model
