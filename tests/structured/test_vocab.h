// Helpers of the structured tests: small vocabularies and a Matcher driven byte by byte.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/grammar.h"

namespace tinyserve::structured {

// Token b (0..255) is the byte b; token 256 is the stop token (no bytes).
inline std::shared_ptr<const Vocabulary> ByteVocab() {
  std::vector<std::string> bytes(257);
  for (int b = 0; b < 256; ++b) bytes[b] = std::string(1, static_cast<char>(b));
  return std::make_shared<const Vocabulary>(std::move(bytes), std::vector<int32_t>{256});
}

enum class Verdict { kComplete, kPrefix, kRejected };

// Feeds `s` to a fresh Matcher of a ByteVocab grammar, one byte token at a time.
inline Verdict Accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& s) {
  Matcher m(g);
  for (unsigned char c : s) {
    if (!m.AcceptToken(c)) return Verdict::kRejected;
  }
  return m.CanTerminate() ? Verdict::kComplete : Verdict::kPrefix;
}

// The ids whose bits are set in a mask.
inline std::vector<int32_t> AllowedIds(const Matcher& m) {
  std::vector<uint32_t> mask(m.bitmask_words());
  m.FillNextTokenBitmask(mask);
  std::vector<int32_t> out;
  for (int32_t t = 0; t < m.vocab_size(); ++t) {
    if ((mask[t / 32] >> (t % 32)) & 1) out.push_back(t);
  }
  return out;
}

}  // namespace tinyserve::structured
