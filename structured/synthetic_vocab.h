// A deterministic byte-level-BPE-like vocabulary for tests and benchmarks of structured/: the 256
// single bytes (so every byte string can be written), JSON punctuation and its combinations with
// quotes, digits and numbers, words with and without a leading space, quote+word combos, and some
// multi-byte UTF-8 chars, whole and split; the last id is the stop token (no bytes). Built from a
// seeded SplitMix64 stream, so equal (size, seed) give equal vocabularies. Pure function.
#pragma once

#include <cstdint>
#include <memory>

#include "structured/grammar.h"

namespace tinyserve::structured {

// REQUIRES: size >= 300 (room for the bytes and the punctuation).
std::shared_ptr<const Vocabulary> SyntheticVocabulary(int32_t size, uint64_t seed);

}  // namespace tinyserve::structured
