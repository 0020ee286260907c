// SentencePieceBpe: SentencePiece-style BPE with scores and byte fallback (Llama 2, TinyStories).
//
// The algorithm is llama2.c run.c's encode(): optional BOS; for non-empty text the dummy prefix
// " "; each UTF-8 codepoint (a byte and up to 3 following continuation bytes) looked up as a
// piece, or else emitted as its byte-fallback tokens; then repeated merging of the adjacent pair
// whose concatenation is a piece with the highest score (leftmost on ties, and only scores above
// -1e10, as run.c's loop starts from best_score = -1e10). The merging is ApplyBpeMerges (O(n log
// n)). Unlike run.c, a NUL byte in the text is encoded (as its byte) instead of ending the text.
//
// Decoding: byte pieces "<0xHH>" give the raw byte, special pieces give nothing, and a piece that
// follows BOS drops its leading space (run.c; SentencePiece drops the dummy prefix the same way).
// Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "models/tokenizer/bpe_merge.h"
#include "models/tokenizer/token_kind.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

struct SentencePieceVocab {
  std::vector<std::string> pieces;  // spaces as ' ' (a GGUF's U+2581 already replaced)
  std::vector<float> scores;        // same size as pieces
  std::vector<TokenKind> kinds;     // same size as pieces
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  bool add_bos_by_default = true;
  // Encode() puts the dummy prefix " " before non-empty text (SentencePiece's add_dummy_prefix).
  bool add_dummy_prefix = true;
  // true (llama2.c): every piece, special and byte ones included, can be looked up and merged
  // into, as in run.c. false (GGUF, SentencePiece): only normal and user-defined pieces can.
  bool match_all_pieces = false;
  // true (GGUF): a U+2581 in the text is a space, as SentencePiece and llama.cpp read it (the
  // pieces store it as ' '). false (llama2.c): it is a codepoint without a piece (bytes).
  bool text_u2581_is_space = false;
  // The token each byte falls back to (-1: the byte is dropped). Filled by the loader: llama2.c
  // uses byte + 3, GGUF the piece "<0xHH>" or else <unk>.
  std::array<int32_t, 256> byte_ids{};
};

// The byte a piece of the exact form "<0xHH>" (hex digits in either case) stands for, or -1.
int ParseBytePiece(std::string_view piece);

class SentencePieceBpe final : public Tokenizer {
 public:
  // Checks the vocabulary (sizes agree, ids in range) and builds the lookup and merge tables.
  // `source` names the file in error messages.
  static StatusOr<std::unique_ptr<SentencePieceBpe>> Create(SentencePieceVocab vocab,
                                                            const std::string& source);

  SentencePieceBpe(const SentencePieceBpe&) = delete;
  SentencePieceBpe& operator=(const SentencePieceBpe&) = delete;

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;
  std::string DecodePiece(int32_t prev_id, int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.pieces.size()); }
  int32_t bos_id() const override { return vocab_.bos_id; }
  int32_t eos_id() const override { return vocab_.eos_id; }
  bool add_bos_by_default() const override { return vocab_.add_bos_by_default; }
  bool is_special(int32_t id) const override;
  // The control pieces with their text ("<s>", "</s>", a GGUF's "<|im_start|>"...); none for a
  // llama2.c vocabulary (match_all_pieces: its specials are stored as "\n<s>\n").
  std::vector<std::pair<std::string, int32_t>> special_tokens() const override;

  // The stored piece of `id` (spaces as ' '). REQUIRES: 0 <= id < vocab_size().
  const std::string& piece(int32_t id) const { return vocab_.pieces[id]; }
  float score(int32_t id) const { return vocab_.scores[id]; }

 private:
  explicit SentencePieceBpe(SentencePieceVocab vocab);
  void BuildTables();
  // The id of `text` as a whole piece that text can match, or -1.
  int32_t Lookup(std::string_view text) const;

  SentencePieceVocab vocab_;
  std::vector<std::string> decoded_;                           // per id, before the BOS rule
  std::unordered_map<std::string_view, int32_t> piece_to_id_;  // views into vocab_.pieces
  MergeTable merges_;
};

}  // namespace tinyserve
