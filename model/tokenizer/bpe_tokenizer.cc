// ByteLevelBpeTokenizer: the byte-to-unicode table, construction from ranked merges, encoding and
// the bytes of each token for decoding.
#include "model/tokenizer/bpe_tokenizer.h"

#include <cstdio>
#include <unordered_map>

namespace laminar::model {

namespace {

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::unordered_map<uint32_t, uint8_t> from_codepoint;
};

const ByteTables& Tables() {
  static const ByteTables tables = [] {
    ByteTables t;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      uint32_t cp = printable ? b : next++;
      AppendCodepoint(cp, &t.to_unicode[b]);
      t.from_codepoint[cp] = static_cast<uint8_t>(b);
    }
    return t;
  }();
  return tables;
}

// Decodes one UTF-8 character at text[i] (valid input assumed); advances i.
uint32_t NextCodepoint(std::string_view text, size_t* i) {
  size_t n = Utf8CharLength(text.substr(*i));
  if (n == 0) {
    ++*i;
    return 0xFFFD;
  }
  auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(text[*i + k])); };
  uint32_t cp = n == 1   ? byte(0)
                : n == 2 ? (byte(0) & 0x1F)
                : n == 3 ? (byte(0) & 0x0F)
                         : (byte(0) & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (byte(k) & 0x3F);
  *i += n;
  return cp;
}

}  // namespace

const std::string& ByteToUnicode(uint8_t b) { return Tables().to_unicode[b]; }

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(Vocab vocab, const Options& options,
                                             RegexPreTokenizer pre)
    : Tokenizer(std::move(vocab)), options_(options), pre_(std::move(pre)) {
  for (int b = 0; b < 256; ++b) {
    auto id = PieceToToken(ByteToUnicode(static_cast<uint8_t>(b)));
    byte_ids_[b] = id ? *id : -1;
  }
}

StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>> ByteLevelBpeTokenizer::Create(
    Vocab vocab, const std::vector<std::pair<std::string, std::string>>& merges,
    const Options& options, std::string_view source) {
  LAMINAR_RETURN_IF_ERROR(vocab.Validate(source));
  auto pre = RegexPreTokenizer::Create(options.pre_tokenizer_regexes);
  LAMINAR_RETURN_IF_ERROR(pre.status(), std::string(source));
  std::unique_ptr<ByteLevelBpeTokenizer> tok(
      new ByteLevelBpeTokenizer(std::move(vocab), options, std::move(*pre)));
  tok->pairs_.Reserve(merges.size());
  tok->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto left = tok->PieceToToken(a);
    auto right = tok->PieceToToken(b);
    auto result = tok->PieceToToken(a + b);
    if (!left || !right || !result) {
      return InvalidArgumentError(std::string(source) + ": merge " + std::to_string(rank) + " '" +
                                  a + " " + b + "' uses or makes a piece not in the vocabulary");
    }
    tok->pairs_.Add(*left, *right, static_cast<double>(rank), *result);
    tok->merges_.push_back({*left, *right});
  }
  return tok;
}

StatusOr<std::vector<std::string>> ByteLevelBpeTokenizer::PreTokenize(std::string_view text) const {
  LAMINAR_RETURN_IF_ERROR(CheckUtf8(text));
  LAMINAR_ASSIGN_OR_RETURN(auto views, pre_.Split(text));
  return std::vector<std::string>(views.begin(), views.end());
}

Status ByteLevelBpeTokenizer::EncodePreToken(std::string_view pre_token,
                                             std::vector<int32_t>* out) const {
  if (options_.ignore_merges) {
    std::string mapped;
    for (char c : pre_token) mapped += ByteToUnicode(static_cast<uint8_t>(c));
    auto id = PieceToToken(mapped);
    if (id && vocab_.types[*id] == TokenType::kNormal) {
      out->push_back(*id);
      return OkStatus();
    }
  }
  std::vector<BpeSymbol> symbols(pre_token.size());
  for (size_t i = 0; i < pre_token.size(); ++i) {
    symbols[i] = {byte_ids_[static_cast<uint8_t>(pre_token[i])], static_cast<uint32_t>(i), 1};
  }
  BpeMergeSymbols(pairs_, &symbols);
  for (const BpeSymbol& s : symbols) {
    if (s.id >= 0) {
      out->push_back(s.id);
    } else if (vocab_.unk_id >= 0) {
      out->push_back(vocab_.unk_id);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<uint8_t>(pre_token[s.start]));
      return InvalidArgumentError(std::string("byte ") + hex +
                                  " has no token and the vocabulary has no unknown token");
    }
  }
  return OkStatus();
}

StatusOr<std::vector<int32_t>> ByteLevelBpeTokenizer::Encode(std::string_view text,
                                                             const EncodeOptions& options) const {
  LAMINAR_RETURN_IF_ERROR(CheckUtf8(text));
  std::vector<int32_t> ids;
  if (options.add_special && vocab_.add_bos && vocab_.bos_id >= 0) ids.push_back(vocab_.bos_id);
  bool first = true;
  for (const Fragment& f : SplitSpecial(text, options.parse_special)) {
    if (f.id >= 0) {
      ids.push_back(f.id);
      first = false;
      continue;
    }
    std::string prefixed;
    std::string_view run = f.text;
    if (options_.add_prefix_space && first && run[0] != ' ') {
      prefixed = " " + std::string(run);
      run = prefixed;
    }
    first = false;
    LAMINAR_ASSIGN_OR_RETURN(auto pieces, pre_.Split(run));
    for (std::string_view piece : pieces) LAMINAR_RETURN_IF_ERROR(EncodePreToken(piece, &ids));
  }
  if (options.add_special && vocab_.add_eos && vocab_.eos_id >= 0) ids.push_back(vocab_.eos_id);
  return ids;
}

StatusOr<std::string> ByteLevelBpeTokenizer::TokenBytes(int32_t id, bool skip_special) const {
  LAMINAR_RETURN_IF_ERROR(CheckId(id));
  const std::string& piece = vocab_.pieces[id];
  switch (vocab_.types[id]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return skip_special ? std::string() : piece;
    case TokenType::kUserDefined:
      return piece;
    default:
      break;
  }
  const auto& from = Tables().from_codepoint;
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    size_t start = i;
    uint32_t cp = NextCodepoint(piece, &i);
    auto it = from.find(cp);
    if (it != from.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(piece, start, i - start);  // not a byte-level character: keep it as text
    }
  }
  return out;
}

}  // namespace laminar::model
