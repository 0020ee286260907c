// AddedTokenMatcher: finds added tokens (Hugging Face `added_tokens`, chat-template special tokens)
// written in a text, before the model sees it.
//
// Find() returns the earliest occurrence at or after `from`, the longest token on ties (HF's
// leftmost-longest matching). A token with lstrip (rstrip) also takes the whitespace before (after)
// it; one with single_word matches only where the characters around it are not word characters
// (ASCII letters, digits, '_', or any non-ASCII byte). Immutable; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tinyserve {

struct AddedToken {
  std::string text;  // non-empty
  int32_t id = -1;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin;  // the span the token replaces, stripped whitespace included
    size_t end;
    size_t text_begin;  // the token's own text: [text_begin, text_end)
    size_t text_end;
    int32_t id;
  };

  AddedTokenMatcher() = default;
  // Tokens with empty text are ignored.
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }
  // The first match whose token text starts at or after `from`, or nullopt.
  std::optional<Match> Find(std::string_view text, size_t from) const;

 private:
  std::vector<AddedToken> tokens_;  // longest first
  // Per first byte, the indices into tokens_ (longest first) of the tokens starting with it.
  std::array<std::vector<uint32_t>, 256> by_first_byte_;
};

}  // namespace tinyserve
