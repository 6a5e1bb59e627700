// SentencePieceBpeTokenizer: building the pair table from scores or ranked merges, encoding a run
// of text, and the bytes of each token for decoding.
#include "model/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <cstdio>

namespace laminar::model {

namespace {

// Parses "<0xHH>" into its byte; -1 otherwise.
int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  int value = 0;
  for (char c : piece.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9')
      value |= c - '0';
    else if (c >= 'A' && c <= 'F')
      value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      value |= c - 'a' + 10;
    else
      return -1;
  }
  return value;
}

std::string ReplaceAll(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t i = 0;
  while (true) {
    size_t j = text.find(from, i);
    out.append(text.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i));
    if (j == std::string_view::npos) break;
    out.append(to);
    i = j + from.size();
  }
  return out;
}

}  // namespace

SentencePieceBpeTokenizer::SentencePieceBpeTokenizer(Vocab vocab, const Options& options)
    : Tokenizer(std::move(vocab)), options_(options) {
  byte_ids_.fill(-1);
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (vocab_.types[id] != TokenType::kByte) continue;
    int b = ParseBytePiece(vocab_.pieces[id]);
    if (b >= 0 && byte_ids_[b] < 0) byte_ids_[b] = id;
  }
}

int32_t SentencePieceBpeTokenizer::NormalPiece(std::string_view text) const {
  auto id = PieceToToken(text);
  if (!id || vocab_.types[*id] != TokenType::kNormal) return -1;
  return *id;
}

StatusOr<std::unique_ptr<SentencePieceBpeTokenizer>> SentencePieceBpeTokenizer::FromScores(
    Vocab vocab, const Options& options, std::string_view source) {
  LAMINAR_RETURN_IF_ERROR(vocab.Validate(source));
  std::unique_ptr<SentencePieceBpeTokenizer> tok(
      new SentencePieceBpeTokenizer(std::move(vocab), options));
  const Vocab& v = tok->vocab_;
  for (int32_t id = 0; id < v.size(); ++id) {
    if (v.types[id] != TokenType::kNormal) continue;
    std::string_view piece = v.pieces[id];
    // Every split of the piece at a character boundary into two normal pieces is a merge.
    for (size_t k = Utf8CharLength(piece); k > 0 && k < piece.size();) {
      int32_t left = tok->NormalPiece(piece.substr(0, k));
      int32_t right = left < 0 ? -1 : tok->NormalPiece(piece.substr(k));
      if (right >= 0) {
        tok->pairs_.Add(left, right, -static_cast<double>(v.scores[id]), id);
        tok->merge_list_.push_back({{left, right}, -static_cast<double>(v.scores[id])});
      }
      size_t n = Utf8CharLength(piece.substr(k));
      if (n == 0) break;
      k += n;
    }
  }
  return tok;
}

StatusOr<std::unique_ptr<SentencePieceBpeTokenizer>> SentencePieceBpeTokenizer::FromMerges(
    Vocab vocab, const std::vector<std::pair<int32_t, int32_t>>& merges, const Options& options,
    std::string_view source) {
  LAMINAR_RETURN_IF_ERROR(vocab.Validate(source));
  std::unique_ptr<SentencePieceBpeTokenizer> tok(
      new SentencePieceBpeTokenizer(std::move(vocab), options));
  const Vocab& v = tok->vocab_;
  tok->pairs_.Reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    auto [left, right] = merges[rank];
    if (left < 0 || right < 0 || left >= v.size() || right >= v.size()) {
      return InvalidArgumentError(std::string(source) + ": merge " + std::to_string(rank) +
                                  " names an id outside the vocabulary");
    }
    auto result = tok->PieceToToken(v.pieces[left] + v.pieces[right]);
    if (!result) {
      return InvalidArgumentError(std::string(source) + ": merge " + std::to_string(rank) + " '" +
                                  v.pieces[left] + " " + v.pieces[right] +
                                  "' makes a piece that is not in the vocabulary");
    }
    tok->pairs_.Add(left, right, static_cast<double>(rank), *result);
    tok->merge_list_.push_back({{left, right}, static_cast<double>(rank)});
  }
  return tok;
}

std::vector<std::pair<int32_t, int32_t>> SentencePieceBpeTokenizer::RankedMerges() const {
  auto list = merge_list_;
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<std::pair<int32_t, int32_t>> out;
  out.reserve(list.size());
  for (const auto& [pair, priority] : list) out.push_back(pair);
  return out;
}

Status SentencePieceBpeTokenizer::EncodeText(std::string_view text, bool prefix,
                                             std::vector<int32_t>* out) const {
  std::string normalized =
      ReplaceAll(prefix ? " " + std::string(text) : std::string(text), " ", kSpmSpace);
  std::vector<BpeSymbol> symbols;
  symbols.reserve(normalized.size());
  for (size_t i = 0; i < normalized.size();) {
    size_t n = Utf8CharLength(std::string_view(normalized).substr(i));
    if (n == 0) n = 1;  // unreachable: the input was validated
    int32_t id = NormalPiece(std::string_view(normalized).substr(i, n));
    symbols.push_back({id, static_cast<uint32_t>(i), static_cast<uint32_t>(n)});
    i += n;
  }
  BpeMergeSymbols(pairs_, &symbols);
  for (const BpeSymbol& s : symbols) {
    if (s.id >= 0) {
      out->push_back(s.id);
      continue;
    }
    for (uint32_t k = 0; k < s.length; ++k) {  // byte fallback
      int32_t b = byte_ids_[static_cast<uint8_t>(normalized[s.start + k])];
      if (b < 0 && vocab_.unk_id < 0) {
        return InvalidArgumentError("character at byte offset " + std::to_string(s.start) +
                                    " has no piece, no byte token and there is no unknown token");
      }
      if (b >= 0) {
        out->push_back(b);
      } else {
        out->push_back(vocab_.unk_id);
        break;  // one unknown token per character
      }
    }
  }
  return OkStatus();
}

StatusOr<std::vector<int32_t>> SentencePieceBpeTokenizer::Encode(
    std::string_view text, const EncodeOptions& options) const {
  LAMINAR_RETURN_IF_ERROR(CheckUtf8(text));
  std::vector<int32_t> ids;
  if (options.add_special && vocab_.add_bos && vocab_.bos_id >= 0) ids.push_back(vocab_.bos_id);
  bool after_special = true;  // the dummy prefix starts the text and follows each special token
  for (const Fragment& f : SplitSpecial(text, options.parse_special)) {
    if (f.id >= 0) {
      ids.push_back(f.id);
      after_special = true;
      continue;
    }
    LAMINAR_RETURN_IF_ERROR(EncodeText(f.text, options_.add_space_prefix && after_special, &ids));
    after_special = false;
  }
  if (options.add_special && vocab_.add_eos && vocab_.eos_id >= 0) ids.push_back(vocab_.eos_id);
  return ids;
}

StatusOr<std::string> SentencePieceBpeTokenizer::TokenBytes(int32_t id, bool skip_special) const {
  LAMINAR_RETURN_IF_ERROR(CheckId(id));
  const std::string& piece = vocab_.pieces[id];
  switch (vocab_.types[id]) {
    case TokenType::kByte: {
      int b = ParseBytePiece(piece);
      return b >= 0 ? std::string(1, static_cast<char>(b)) : piece;
    }
    case TokenType::kControl:
    case TokenType::kUnknown:
      return skip_special ? std::string() : piece;
    case TokenType::kUserDefined:
      return piece;
    default:
      return ReplaceAll(piece, kSpmSpace, " ");
  }
}

}  // namespace laminar::model
