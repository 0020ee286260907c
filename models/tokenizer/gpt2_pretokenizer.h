// Gpt2PreTokenizer: splits text into the chunks GPT-2's byte-level BPE encodes one by one, with
// the GPT-2 regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (or another pattern: Llama-3's and Qwen2's tokenizer.json carry their own) matched by PCRE2 in
// UTF + UCP mode (Unicode letters, numbers and spaces). Matches and the text between them are the
// chunks (Hugging Face's Split behaviour "Isolated").
//
// Input is any bytes. Invalid UTF-8 never matches (PCRE2_MATCH_INVALID_UTF); each run of bytes
// between matches becomes a chunk of its own, so the chunks always tile the whole text and
// byte-level encoding stays lossless. Immutable after Create; Split is thread-safe (per-call match
// data).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tinyserve {

class Gpt2PreTokenizer {
 public:
  // Compiles the regex (Internal if PCRE2 rejects it, which means a broken PCRE2 build).
  static StatusOr<std::unique_ptr<Gpt2PreTokenizer>> Create();
  // The same splitting with `pattern` (PCRE2 syntax) instead of GPT-2's; InvalidArgument naming
  // the error and its offset when PCRE2 rejects the pattern.
  static StatusOr<std::unique_ptr<Gpt2PreTokenizer>> Create(std::string_view pattern);
  ~Gpt2PreTokenizer();
  Gpt2PreTokenizer(const Gpt2PreTokenizer&) = delete;
  Gpt2PreTokenizer& operator=(const Gpt2PreTokenizer&) = delete;

  // The chunks of `text`, views into it, in order; their concatenation is `text`.
  std::vector<std::string_view> Split(std::string_view text) const;

 private:
  struct Regex;
  explicit Gpt2PreTokenizer(std::unique_ptr<Regex> regex);
  std::unique_ptr<Regex> regex_;
};

}  // namespace tinyserve
