// Tokenizer: text <-> token ids for one vocabulary.
//
// A Tokenizer is built once by a loader (LoadLlama2cTokenizer, LoadGgufTokenizer) and owned by the
// caller through a std::unique_ptr; it keeps no reference to the file it came from. It is immutable
// after construction: every method is const and safe to call from many threads at once.
//
// Decoding is defined piece by piece: DecodePiece(prev, id) is the bytes `id` contributes when it
// follows `prev` (llama2.c's rule: a piece that follows BOS drops its leading space), and
// Decode(ids) is exactly the concatenation of DecodePiece(ids[i-1], ids[i]) with ids[-1] = -1.
// Pieces are raw bytes: one UTF-8 character may be split over several pieces (byte fallback), so a
// piece, and a prefix of a decoded sequence, may be invalid UTF-8. A streaming detokenizer builds
// on DecodePiece and holds back incomplete UTF-8 sequences.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tinyserve {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text` (any bytes; invalid UTF-8 is encoded, never rejected), with the BOS id first
  // when `add_bos` is true and the vocabulary has one. Special tokens written in the text (e.g.
  // "<s>", "<|endoftext|>") are encoded as plain text, never as the special id.
  // REQUIRES: text.size() < 2^31 - 1.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_bos) const = 0;

  // The bytes of `ids`: the concatenation of their pieces. Special (control/unknown) tokens
  // contribute nothing, and so do ids outside [0, vocab_size()).
  virtual std::string Decode(const std::vector<int32_t>& ids) const;

  // The bytes token `id` contributes when it follows `prev_id` (-1 when it is the first).
  // An id outside [0, vocab_size()) contributes nothing.
  virtual std::string DecodePiece(int32_t prev_id, int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 if none
  virtual int32_t eos_id() const = 0;  // -1 if none
  // Returns true iff the vocabulary's own configuration asks for BOS to be prepended to prompts.
  virtual bool add_bos_by_default() const = 0;
  // Returns true iff `id` is a control or unknown token (BOS, EOS, <unk>, <|endoftext|>...).
  virtual bool is_special(int32_t id) const = 0;

  // The special tokens that have a text form, as (text, id) pairs, e.g. ("<|im_start|>", 151644):
  // what a chat template may write and protocol::EncodeWithSpecialTokens maps to ids. Encode()
  // never produces them from text. Default: none. GGUF and tokenizer.json vocabularies list their
  // control tokens; a llama2.c one lists none (chat templates map "<s>" and "</s>" through
  // bos_id() and eos_id()).
  virtual std::vector<std::pair<std::string, int32_t>> special_tokens() const { return {}; }

  // The ids of `span`, one piece of a text that was split at special tokens: Encode(span, false),
  // where `at_start` says whether the span begins the whole text (a tokenizer whose normalizer
  // treats the start of the text apart, e.g. Metaspace with prepend_scheme "first", needs it).
  virtual std::vector<int32_t> EncodeSpan(std::string_view span, bool /*at_start*/) const {
    return Encode(span, /*add_bos=*/false);
  }
};

}  // namespace tinyserve
