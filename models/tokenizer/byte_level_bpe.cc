#include "models/tokenizer/byte_level_bpe.h"

#include <unordered_map>
#include <utility>

namespace tinyserve {
namespace {

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Maps each stand-in character (as UTF-8) back to its byte.
const std::unordered_map<std::string, uint8_t>& UnicodeToByte() {
  static const auto* map = [] {
    auto* m = new std::unordered_map<std::string, uint8_t>();
    const auto& forward = Gpt2ByteToUnicode();
    for (int b = 0; b < 256; ++b) (*m)[forward[b]] = static_cast<uint8_t>(b);
    return m;
  }();
  return *map;
}

// The length of the UTF-8 sequence that starts with `lead` (1 for stray bytes).
size_t Utf8Length(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

}  // namespace

std::string ByteLevelTokenBytes(std::string_view token) {
  const auto& back = UnicodeToByte();
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    size_t n = Utf8Length(static_cast<unsigned char>(token[i]));
    if (i + n > token.size()) n = token.size() - i;
    const std::string ch(token.substr(i, n));
    auto it = back.find(ch);
    if (it != back.end()) {
      out += static_cast<char>(it->second);
    } else {
      out += ch;
    }
    i += n;
  }
  return out;
}

const std::array<std::string, 256>& Gpt2ByteToUnicode() {
  static const auto* table = [] {
    auto* t = new std::array<std::string, 256>();
    // Printable bytes stand for themselves; the others get 256, 257, ... in byte order.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      AppendUtf8(printable ? b : next++, (*t)[b]);
    }
    return t;
  }();
  return *table;
}

StatusOr<std::unique_ptr<ByteLevelBpe>> ByteLevelBpe::Create(ByteLevelVocab vocab,
                                                             const std::string& source) {
  const size_t n = vocab.tokens.size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument(source + ": vocabulary has " + std::to_string(n) + " tokens");
  }
  if (vocab.kinds.size() != n) {
    return InvalidArgument(source + ": " + std::to_string(n) + " tokens but " +
                           std::to_string(vocab.kinds.size()) + " token types");
  }
  const int32_t size = static_cast<int32_t>(n);
  for (auto [name, id] :
       {std::pair<const char*, int32_t>{"BOS", vocab.bos_id}, {"EOS", vocab.eos_id}}) {
    if (id < -1 || id >= size) {
      return InvalidArgument(source + ": " + name + " token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(size));
    }
  }
  // Scores are -rank in a float: exact up to 2^24 merges.
  if (vocab.merges.size() > (size_t{1} << 24)) {
    return InvalidArgument(source + ": " + std::to_string(vocab.merges.size()) +
                           " merges; at most 2^24 are supported");
  }
  StatusOr<std::unique_ptr<Gpt2PreTokenizer>> pre = Gpt2PreTokenizer::Create();
  if (!pre.ok()) return pre.status();
  std::unique_ptr<ByteLevelBpe> bpe(new ByteLevelBpe(std::move(vocab), std::move(pre).value()));

  // Text can match normal tokens only (control tokens like <|endoftext|> stay out).
  std::unordered_map<std::string_view, int32_t> token_to_id;
  for (int32_t id = 0; id < size; ++id) {
    const TokenKind kind = bpe->vocab_.kinds[id];
    if (kind == TokenKind::kNormal || kind == TokenKind::kUserDefined || kind == TokenKind::kByte) {
      token_to_id.emplace(bpe->vocab_.tokens[id], id);
    }
  }
  const auto& byte_to_unicode = Gpt2ByteToUnicode();
  for (int b = 0; b < 256; ++b) {
    auto it = token_to_id.find(byte_to_unicode[b]);
    if (it == token_to_id.end()) {
      return InvalidArgument(source + ": byte-level vocabulary has no token for byte " +
                             std::to_string(b) + " ('" + byte_to_unicode[b] + "')");
    }
    bpe->byte_ids_[b] = it->second;
  }
  const std::vector<std::string>& merges = bpe->vocab_.merges;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos || merge.find(' ', space + 1) != std::string::npos) {
      return InvalidArgument(source + ": merge #" + std::to_string(rank) + " '" + merge +
                             "' is not of the form \"left right\"");
    }
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    auto l = token_to_id.find(left);
    auto r = token_to_id.find(right);
    auto m = token_to_id.find(left + right);
    if (l == token_to_id.end() || r == token_to_id.end() || m == token_to_id.end()) {
      return InvalidArgument(source + ": merge #" + std::to_string(rank) + " '" + merge +
                             "' has a part or a result that is not a token");
    }
    // The first (lowest-rank) rule for a pair wins, as in a rank lookup.
    if (bpe->merges_.Find(l->second, r->second) == nullptr) {
      bpe->merges_.Add(l->second, r->second, {-static_cast<float>(rank), m->second});
    }
  }
  bpe->decoded_.resize(size);
  for (int32_t id = 0; id < size; ++id) {
    if (!IsSpecialKind(bpe->vocab_.kinds[id]))
      bpe->decoded_[id] = ByteLevelTokenBytes(bpe->vocab_.tokens[id]);
  }
  return bpe;
}

ByteLevelBpe::ByteLevelBpe(ByteLevelVocab vocab, std::unique_ptr<Gpt2PreTokenizer> pre_tokenizer)
    : vocab_(std::move(vocab)), pre_tokenizer_(std::move(pre_tokenizer)) {}

std::vector<int32_t> ByteLevelBpe::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && vocab_.bos_id >= 0) ids.push_back(vocab_.bos_id);
  std::vector<int32_t> symbols;
  for (std::string_view chunk : pre_tokenizer_->Split(text)) {
    symbols.clear();
    for (char c : chunk) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    ApplyBpeMerges(merges_, symbols);
    ids.insert(ids.end(), symbols.begin(), symbols.end());
  }
  return ids;
}

std::string ByteLevelBpe::DecodePiece(int32_t /*prev_id*/, int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  return decoded_[id];
}

bool ByteLevelBpe::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && IsSpecialKind(vocab_.kinds[id]);
}

std::vector<std::pair<std::string, int32_t>> ByteLevelBpe::special_tokens() const {
  std::vector<std::pair<std::string, int32_t>> out;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (vocab_.kinds[id] == TokenKind::kControl && !vocab_.tokens[id].empty()) {
      out.emplace_back(vocab_.tokens[id], id);
    }
  }
  return out;
}

}  // namespace tinyserve
