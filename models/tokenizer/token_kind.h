// TokenKind: what a vocabulary entry is, following GGUF's tokenizer.ggml.token_type values.
#pragma once

#include <cstdint>

namespace tinyserve {

enum class TokenKind : int32_t {
  kNormal = 1,       // text; produced by encoding
  kUnknown = 2,      // <unk>; special
  kControl = 3,      // BOS, EOS, <|endoftext|>...; special, never produced from text
  kUserDefined = 4,  // treated as normal text
  kUnused = 5,       // never produced from text, decodes to its text
  kByte = 6,         // a byte-fallback piece "<0xHH>"; decodes to that byte
};

// Returns true iff tokens of this kind are special: they decode to nothing.
inline bool IsSpecialKind(TokenKind kind) {
  return kind == TokenKind::kUnknown || kind == TokenKind::kControl;
}

}  // namespace tinyserve
