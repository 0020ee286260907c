// IncrementalDetokenizer: one sequence's generated token ids -> text deltas that are always
// well-formed UTF-8, for streaming.
//
// Built on Tokenizer::DecodePiece(prev, id), whose pieces are raw bytes (a character may be split
// over byte-fallback tokens). Bytes that end in an incomplete but still possible UTF-8 sequence
// are held back until a later token completes it; bytes that can never become valid are emitted
// as U+FFFD (one per maximal subpart, as HF tokenizers and vLLM do) as soon as that is known, and
// Flush() turns a still-incomplete tail into U+FFFD. Special tokens (BOS, EOS, <unk>, ...) add no
// text when skip_special_tokens (the default; through the Tokenizer interface they decode to
// nothing anyway). So for ids that end on a complete character, the concatenated deltas equal
// Decode(ids) with ids[-1] = prev_id; in general they equal ToValidUtf8 of it.
//
// Single-owner (one per generated sequence); the Tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "models/tokenizer/tokenizer.h"

namespace tinyserve::protocol {

class IncrementalDetokenizer {
 public:
  // `prev_id` is the token before the first one added (the prompt's last token, which decides
  // e.g. whether the first piece keeps its leading space), or -1.
  IncrementalDetokenizer(const Tokenizer& tokenizer, int32_t prev_id,
                         bool skip_special_tokens = true);

  // Adds the next token and returns the text it completes (possibly empty).
  std::string Add(int32_t id);
  // Returns whatever is held back (incomplete bytes as U+FFFD) and clears it. Call once at the end.
  std::string Flush();

  // Returns true iff bytes are held back waiting for the rest of a character.
  bool has_pending() const { return !pending_.empty(); }

 private:
  const Tokenizer& tokenizer_;
  int32_t prev_id_;
  const bool skip_special_tokens_;
  std::string pending_;  // raw bytes of an incomplete UTF-8 sequence, at most 3
};

}  // namespace tinyserve::protocol
