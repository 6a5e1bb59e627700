// The parts of Tokenizer shared by every kind: vocabulary lookups, special-token splitting,
// decoding through TokenBytes, the streaming decoder and the UTF-8 helpers.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>

namespace laminar::model {

namespace {

// Valid range of the second byte of a multi-byte sequence led by `lead` (Unicode table 3-7), and
// the sequence length; length 0 for a byte that cannot lead.
struct LeadInfo {
  int length;
  uint8_t lo, hi;
};

LeadInfo Lead(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Number of bytes of the valid prefix of the sequence at text[0] (1..length); `complete` says
// whether all `length` bytes are present and valid. Returns 0 if text[0] cannot lead.
size_t ValidPrefix(std::string_view text, bool* complete) {
  *complete = false;
  LeadInfo info = Lead(static_cast<uint8_t>(text[0]));
  if (info.length == 0) return 0;
  if (info.length == 1) {
    *complete = true;
    return 1;
  }
  size_t n = 1;
  for (; n < static_cast<size_t>(info.length) && n < text.size(); ++n) {
    auto b = static_cast<uint8_t>(text[n]);
    uint8_t lo = n == 1 ? info.lo : 0x80, hi = n == 1 ? info.hi : 0xBF;
    if (b < lo || b > hi) return n;
  }
  *complete = n == static_cast<size_t>(info.length);
  return n;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

std::optional<size_t> FindInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    size_t n = Utf8CharLength(text.substr(i));
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

Status CheckUtf8(std::string_view text) {
  if (auto bad = FindInvalidUtf8(text)) {
    return InvalidArgumentError("invalid UTF-8 at byte offset " + std::to_string(*bad));
  }
  return OkStatus();
}

size_t Utf8CharLength(std::string_view text) {
  if (text.empty()) return 0;
  bool complete = false;
  size_t n = ValidPrefix(text, &complete);
  return complete ? n : 0;
}

void AppendUtf8Lossy(std::string_view bytes, bool final, std::string* out, std::string* rest) {
  size_t i = 0;
  while (i < bytes.size()) {
    bool complete = false;
    size_t n = ValidPrefix(bytes.substr(i), &complete);
    if (complete) {
      out->append(bytes.substr(i, n));
      i += n;
    } else if (n > 0 && i + n == bytes.size() && !final) {
      rest->assign(bytes.substr(i));  // a valid but incomplete tail: wait for more bytes
      return;
    } else {
      out->append(kReplacement);  // one U+FFFD per maximal invalid subpart
      i += std::max<size_t>(n, 1);
    }
  }
  rest->clear();
}

void AppendCodepoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Status Vocab::Validate(std::string_view source) const {
  std::string where(source);
  if (pieces.empty()) return InvalidArgumentError(where + ": empty vocabulary");
  if (scores.size() != pieces.size() || types.size() != pieces.size()) {
    return InvalidArgumentError(where + ": vocabulary has " + std::to_string(pieces.size()) +
                                " pieces but " + std::to_string(scores.size()) + " scores and " +
                                std::to_string(types.size()) + " token types");
  }
  auto check_id = [&](int32_t id, const char* name) -> Status {
    if (id < -1 || id >= size()) {
      return InvalidArgumentError(where + ": " + name + " id " + std::to_string(id) +
                                  " outside the vocabulary of " + std::to_string(size()));
    }
    return OkStatus();
  };
  LAMINAR_RETURN_IF_ERROR(check_id(bos_id, "bos"));
  LAMINAR_RETURN_IF_ERROR(check_id(eos_id, "eos"));
  LAMINAR_RETURN_IF_ERROR(check_id(unk_id, "unknown-token"));
  LAMINAR_RETURN_IF_ERROR(check_id(pad_id, "padding"));
  return OkStatus();
}

Tokenizer::Tokenizer(Vocab vocab) : vocab_(std::move(vocab)), matchable_by_byte_(256) {
  piece_to_id_.reserve(vocab_.pieces.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    piece_to_id_.emplace(vocab_.pieces[id], id);  // the first id wins on duplicates
    if (IsSpecial(id) && !vocab_.pieces[id].empty()) {
      matchable_by_byte_[static_cast<uint8_t>(vocab_.pieces[id][0])].push_back(id);
    }
  }
  for (auto& ids : matchable_by_byte_) {
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
      return vocab_.pieces[a].size() > vocab_.pieces[b].size();
    });
  }
}

const std::string& Tokenizer::TokenToPiece(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && id < vocab_size() ? vocab_.pieces[id] : kEmpty;
}

std::optional<int32_t> Tokenizer::PieceToToken(std::string_view piece) const {
  auto it = piece_to_id_.find(piece);
  if (it == piece_to_id_.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  TokenType t = vocab_.types[id];
  return t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined;
}

std::vector<int32_t> Tokenizer::SpecialTokens() const {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (IsSpecial(id)) ids.push_back(id);
  }
  return ids;
}

std::vector<Tokenizer::Fragment> Tokenizer::SplitSpecial(std::string_view text,
                                                         bool parse_special) const {
  std::vector<Fragment> out;
  size_t start = 0;  // start of the pending plain-text run
  size_t i = 0;
  while (i < text.size()) {
    int32_t match = -1;
    for (int32_t id : matchable_by_byte_[static_cast<uint8_t>(text[i])]) {
      if (!parse_special && vocab_.types[id] != TokenType::kUserDefined) continue;
      const std::string& piece = vocab_.pieces[id];
      if (text.compare(i, piece.size(), piece) == 0) {
        match = id;
        break;  // longest first
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    if (i > start) out.push_back({text.substr(start, i - start), -1});
    out.push_back({std::string_view(), match});
    i += vocab_.pieces[match].size();
    start = i;
  }
  if (start < text.size()) out.push_back({text.substr(start), -1});
  return out;
}

StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    LAMINAR_ASSIGN_OR_RETURN(std::string piece, TokenBytes(id, skip_special));
    bytes += piece;
  }
  std::string out;
  std::string rest;
  AppendUtf8Lossy(bytes, /*final=*/true, &out, &rest);
  if (strips_leading_space() && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

StreamingDecoder Tokenizer::NewStreamingDecoder(bool skip_special) const {
  return StreamingDecoder(*this, skip_special);
}

StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

StatusOr<std::string> StreamingDecoder::Next(int32_t id) {
  LAMINAR_ASSIGN_OR_RETURN(std::string bytes, tokenizer_->TokenBytes(id, skip_special_));
  std::string out;
  std::string rest;
  AppendUtf8Lossy(pending_ + bytes, /*final=*/false, &out, &rest);
  pending_ = std::move(rest);
  if (at_start_ && !out.empty()) {
    at_start_ = false;
    if (tokenizer_->strips_leading_space() && out[0] == ' ') out.erase(0, 1);
  }
  return out;
}

std::string StreamingDecoder::Finish() {
  std::string out;
  std::string rest;
  AppendUtf8Lossy(pending_, /*final=*/true, &out, &rest);
  pending_.clear();
  if (at_start_ && !out.empty()) {
    at_start_ = false;
    if (tokenizer_->strips_leading_space() && out[0] == ' ') out.erase(0, 1);
  }
  return out;
}

Status Tokenizer::CheckId(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    return OutOfRangeError("token id " + std::to_string(id) + " outside the vocabulary of " +
                           std::to_string(vocab_size()));
  }
  return OkStatus();
}

}  // namespace laminar::model
