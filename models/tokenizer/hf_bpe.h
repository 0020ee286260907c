// HfBpeTokenizer: the runtime of a Hugging Face tokenizer.json with a BPE model (see
// hf_tokenizer.h for what the loader accepts). Built from an HfBpeSpec, which the loader fills.
//
// Encode(text): split at the non-special added tokens (special ones are plain text here), then per
// span: normalizers -> pre-tokenizers -> per split the BPE model (characters, or bytes after a
// ByteLevel pre-tokenizer; byte fallback / <unk>; merges by rank, leftmost on ties).
// Added tokens are matched on the raw text, before normalization, so every span between two added
// tokens is normalized on its own (a Prepend("▁") normalizer prefixes each span, as the legacy
// SentencePiece Llama tokenizer does after a special token).
// Immutable after Create; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "models/tokenizer/added_tokens.h"
#include "models/tokenizer/bpe_merge.h"
#include "models/tokenizer/gpt2_pretokenizer.h"
#include "models/tokenizer/token_kind.h"
#include "models/tokenizer/tokenizer.h"

namespace tinyserve {

struct HfNormalizerStep {
  enum class Kind { kPrepend, kReplace, kNfc };
  Kind kind = Kind::kPrepend;
  std::string text;     // kPrepend: the prefix; kReplace: the pattern
  std::string content;  // kReplace: the replacement
};

struct HfPreTokenizerStep {
  enum class Kind { kByteLevel, kSplit, kDigits, kMetaspace };
  enum class Prepend { kAlways, kFirst, kNever };
  Kind kind = Kind::kByteLevel;
  bool add_prefix_space = false;       // kByteLevel
  bool use_regex = true;               // kByteLevel: split with GPT-2's regex
  std::string pattern;                 // kSplit: a PCRE2 regex (behaviour Isolated)
  bool individual_digits = false;      // kDigits
  std::string replacement;             // kMetaspace ("▁")
  Prepend prepend = Prepend::kAlways;  // kMetaspace
  bool split = true;                   // kMetaspace: split before each replacement
};

struct HfBpeSpec {
  std::vector<std::string> tokens;  // by id, as written in the file ("" for an id with no token)
  std::vector<TokenKind> kinds;     // same size
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  bool byte_fallback = false;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::vector<HfNormalizerStep> normalizers;
  std::vector<HfPreTokenizerStep> pre_tokenizers;
  // Decoding: ByteLevel, or replace `decode_replace` by ' ' + byte fallback + strip of one leading
  // space of the first token (after BOS or at the start).
  bool decode_byte_level = false;
  std::string decode_replace;
  bool decode_byte_fallback = false;
  bool decode_strip_leading_space = false;
  std::vector<AddedToken> added_tokens;  // matched before the model
  std::vector<bool> added_is_special;    // same size
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  bool add_bos_by_default = false;
};

class HfBpeTokenizer final : public Tokenizer {
 public:
  // Checks the spec (ids in range, merges whose parts and result are tokens, a byte-level
  // vocabulary has all 256 byte tokens, regexes compile) and builds the tables. `source` names
  // the file in error messages.
  static StatusOr<std::unique_ptr<HfBpeTokenizer>> Create(HfBpeSpec spec,
                                                          const std::string& source);
  ~HfBpeTokenizer() override;
  HfBpeTokenizer(const HfBpeTokenizer&) = delete;
  HfBpeTokenizer& operator=(const HfBpeTokenizer&) = delete;

  std::vector<int32_t> Encode(std::string_view text, bool add_bos) const override;
  std::vector<int32_t> EncodeSpan(std::string_view span, bool at_start) const override;
  std::string DecodePiece(int32_t prev_id, int32_t id) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(spec_.tokens.size()); }
  int32_t bos_id() const override { return spec_.bos_id; }
  int32_t eos_id() const override { return spec_.eos_id; }
  bool add_bos_by_default() const override { return spec_.add_bos_by_default; }
  bool is_special(int32_t id) const override;
  std::vector<std::pair<std::string, int32_t>> special_tokens() const override;

  // The id of token text `token` as written in the file (model vocabulary or added token), or -1.
  int32_t TokenId(std::string_view token) const;

 private:
  explicit HfBpeTokenizer(HfBpeSpec spec);
  Status Build(const std::string& source);
  // Appends the ids of `text` (no added tokens in it) to `ids`.
  void EncodeText(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;
  // Appends the ids of one pre-tokenized word to `ids`.
  void EncodeWord(const std::string& word, std::vector<int32_t>& ids) const;

  HfBpeSpec spec_;
  bool byte_level_ = false;  // a ByteLevel pre-tokenizer maps bytes to stand-in characters
  std::vector<std::unique_ptr<Gpt2PreTokenizer>> regexes_;   // per pre-tokenizer step (or null)
  std::unordered_map<std::string_view, int32_t> model_ids_;  // views into spec_.tokens
  std::unordered_map<std::string_view, int32_t> all_ids_;    // model and added tokens
  std::array<int32_t, 256> byte_ids_{};                      // byte-level: token of each byte
  std::array<int32_t, 256> fallback_ids_{};                  // "<0xNN>" tokens, -1 if missing
  MergeTable merges_;
  AddedTokenMatcher plain_added_;  // the non-special added tokens
  std::vector<std::string> decoded_;
};

}  // namespace tinyserve
