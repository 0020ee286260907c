// ByteLevelBpe: GPT-2 style byte-level BPE (GPT-2, and later Llama-3/Qwen2 style vocabularies).
//
// Encoding: the GPT-2 pre-tokenizer splits the text into chunks; each chunk's bytes start as one
// token each (byte b is the token whose text is GPT-2's printable stand-in for b, e.g. ' ' -> 'Ġ'),
// then pairs are merged by rank (lowest first, leftmost on ties) with ApplyBpeMerges. Any bytes
// encode, and decoding maps each token's stand-in characters back to bytes, so
// Decode(Encode(x)) == x for every x. Special tokens written in the text are encoded as plain text.
// Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "models/tokenizer/bpe_merge.h"
#include "models/tokenizer/gpt2_pretokenizer.h"
#include "models/tokenizer/token_kind.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

struct ByteLevelVocab {
  std::vector<std::string> tokens;  // in byte-level form ("Ġthe")
  std::vector<TokenKind> kinds;     // same size as tokens
  std::vector<std::string> merges;  // "Ġ t", rank order (first = merged first)
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos_by_default = false;
};

// GPT-2's bytes_to_unicode(): the UTF-8 of the printable character that stands for byte b.
const std::array<std::string, 256>& Gpt2ByteToUnicode();

// A byte-level token's bytes: each stand-in character maps back to its byte; other characters (in
// added tokens) are kept as they are.
std::string ByteLevelTokenBytes(std::string_view token);

class ByteLevelBpe final : public Tokenizer {
 public:
  // Checks the vocabulary (sizes, ids, a token for each of the 256 bytes, merges of the form
  // "a b" whose parts and result are tokens) and builds the tables. `source` names the file in
  // error messages.
  static StatusOr<std::unique_ptr<ByteLevelBpe>> Create(ByteLevelVocab vocab,
                                                        const std::string& source);
  ByteLevelBpe(const ByteLevelBpe&) = delete;
  ByteLevelBpe& operator=(const ByteLevelBpe&) = delete;

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;
  std::string DecodePiece(int32_t prev_id, int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const override { return vocab_.bos_id; }
  int32_t eos_id() const override { return vocab_.eos_id; }
  bool add_bos_by_default() const override { return vocab_.add_bos_by_default; }
  bool is_special(int32_t id) const override;
  // The control tokens with their text (a GGUF's <|im_start|>, <|endoftext|>, ...).
  std::vector<std::pair<std::string, int32_t>> special_tokens() const override;

 private:
  ByteLevelBpe(ByteLevelVocab vocab, std::unique_ptr<Gpt2PreTokenizer> pre_tokenizer);

  ByteLevelVocab vocab_;
  std::unique_ptr<Gpt2PreTokenizer> pre_tokenizer_;
  std::array<int32_t, 256> byte_ids_{};  // the token of each single byte
  std::vector<std::string> decoded_;     // per id: its bytes ("" for special tokens)
  MergeTable merges_;
};

}  // namespace tinyserve
