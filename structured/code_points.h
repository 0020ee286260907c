// Code-point helpers shared by the GBNF parser (grammar_ir.cc) and the regex compiler (regex.cc):
// sets of Unicode code points as sorted, disjoint, inclusive ranges, and UTF-8 encoding of one
// code point. Internal to structured/; pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tinyserve::structured {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // sorted, disjoint, inclusive

// Sorts `r` and merges overlapping or adjacent ranges.
Ranges Normalize(Ranges r);
// The code points in [0, kMaxCodePoint] outside `r` (REQUIRES: `r` normalized).
Ranges Complement(const Ranges& r);
// Appends the UTF-8 encoding of `cp` (REQUIRES: cp <= kMaxCodePoint).
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace tinyserve::structured
