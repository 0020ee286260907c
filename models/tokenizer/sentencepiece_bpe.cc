#include "models/tokenizer/sentencepiece_bpe.h"

#include <utility>

namespace tinyserve {
namespace {

// run.c merges a pair only if its score beats this starting value of best_score.
constexpr float kMinMergeScore = -1e10f;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

int ParseBytePiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = HexDigit(piece[3]);
  const int lo = HexDigit(piece[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

StatusOr<std::unique_ptr<SentencePieceBpe>> SentencePieceBpe::Create(SentencePieceVocab vocab,
                                                                     const std::string& source) {
  const size_t n = vocab.pieces.size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgument(source + ": vocabulary has " + std::to_string(n) + " tokens");
  }
  if (vocab.scores.size() != n || vocab.kinds.size() != n) {
    return InvalidArgument(source + ": " + std::to_string(n) + " tokens but " +
                           std::to_string(vocab.scores.size()) + " scores and " +
                           std::to_string(vocab.kinds.size()) + " token types");
  }
  const int32_t size = static_cast<int32_t>(n);
  for (auto [name, id] : {std::pair<const char*, int32_t>{"BOS", vocab.bos_id},
                          {"EOS", vocab.eos_id},
                          {"unknown", vocab.unk_id}}) {
    if (id < -1 || id >= size) {
      return InvalidArgument(source + ": " + name + " token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(size));
    }
  }
  for (int32_t id : vocab.byte_ids) {
    if (id < -1 || id >= size) {
      return InvalidArgument(source + ": byte-fallback token id " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(size));
    }
  }
  std::unique_ptr<SentencePieceBpe> tokenizer(new SentencePieceBpe(std::move(vocab)));
  tokenizer->BuildTables();
  return tokenizer;
}

SentencePieceBpe::SentencePieceBpe(SentencePieceVocab vocab) : vocab_(std::move(vocab)) {}

void SentencePieceBpe::BuildTables() {
  const int32_t n = vocab_size();
  decoded_.resize(n);
  for (int32_t id = 0; id < n; ++id) {
    const std::string& piece = vocab_.pieces[id];
    const TokenKind kind = vocab_.kinds[id];
    const int byte = kind == TokenKind::kByte ? ParseBytePiece(piece) : -1;
    if (IsSpecialKind(kind)) {
      decoded_[id].clear();
    } else if (byte >= 0) {
      decoded_[id] = std::string(1, static_cast<char>(byte));
    } else {
      decoded_[id] = piece;
    }
    const bool matchable =
        vocab_.match_all_pieces || kind == TokenKind::kNormal || kind == TokenKind::kUserDefined;
    // emplace keeps the first id of a duplicated piece.
    if (matchable && !piece.empty()) piece_to_id_.emplace(std::string_view(piece), id);
  }
  // Every pair (a, b) whose concatenation is a matchable piece p merges into p. Enumerating the
  // splits of each piece finds all of them without building strings at encode time.
  for (const auto& [text, id] : piece_to_id_) {
    const float score = vocab_.scores[id];
    if (!(score > kMinMergeScore)) continue;
    for (size_t k = 1; k < text.size(); ++k) {
      const int32_t left = Lookup(text.substr(0, k));
      if (left < 0) continue;
      const int32_t right = Lookup(text.substr(k));
      if (right < 0) continue;
      merges_.Add(left, right, {score, id});
    }
  }
}

int32_t SentencePieceBpe::Lookup(std::string_view text) const {
  auto it = piece_to_id_.find(text);
  return it == piece_to_id_.end() ? -1 : it->second;
}

std::vector<int32_t> SentencePieceBpe::Encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && vocab_.bos_id >= 0) ids.push_back(vocab_.bos_id);
  if (text.empty()) return ids;

  std::vector<int32_t> symbols;
  symbols.reserve(text.size() + 1);
  auto append_codepoint = [&](std::string_view codepoint) {
    const int32_t id = Lookup(codepoint);
    if (id >= 0) {
      symbols.push_back(id);
      return;
    }
    for (char c : codepoint) {
      const int32_t byte_id = vocab_.byte_ids[static_cast<unsigned char>(c)];
      if (byte_id >= 0) symbols.push_back(byte_id);
    }
  };
  if (vocab_.add_dummy_prefix) append_codepoint(" ");
  size_t i = 0;
  while (i < text.size()) {
    // A codepoint as run.c reads it: one byte and the continuation bytes after it, 4 bytes at most.
    size_t end = i + 1;
    while (end < text.size() && end - i < 4 &&
           (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
      ++end;
    }
    const std::string_view codepoint = text.substr(i, end - i);
    // The text's own U+2581 is the space piece SentencePiece and llama.cpp make of it.
    append_codepoint(vocab_.text_u2581_is_space && codepoint == "\xE2\x96\x81" ? " " : codepoint);
    i = end;
  }
  ApplyBpeMerges(merges_, symbols);
  ids.insert(ids.end(), symbols.begin(), symbols.end());
  return ids;
}

std::string SentencePieceBpe::DecodePiece(int32_t prev_id, int32_t id) const {
  if (id < 0 || id >= vocab_size()) return {};
  const std::string& text = decoded_[id];
  if (prev_id >= 0 && prev_id == vocab_.bos_id && vocab_.kinds[id] != TokenKind::kByte &&
      !text.empty() && text[0] == ' ') {
    return text.substr(1);
  }
  return text;
}

bool SentencePieceBpe::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && IsSpecialKind(vocab_.kinds[id]);
}

std::vector<std::pair<std::string, int32_t>> SentencePieceBpe::special_tokens() const {
  std::vector<std::pair<std::string, int32_t>> out;
  if (vocab_.match_all_pieces) return out;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    if (vocab_.kinds[id] == TokenKind::kControl && !vocab_.pieces[id].empty()) {
      out.emplace_back(vocab_.pieces[id], id);
    }
  }
  return out;
}

}  // namespace tinyserve
