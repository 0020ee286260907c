// The grammar IR of structured/: a context-free grammar over bytes, and the GBNF parser that builds
// it. Every constraint kind compiles to GBNF text and then to this IR.
//
// A Grammar is a list of rules; each rule is a list of alternatives; each alternative is a
// sequence of elements, each a set of bytes or a reference to a rule. All alternatives live in one
// flat array (`elements`), each ending with a kEnd element, so a grammar position is one int32.
// Code points never appear: a char class over code points becomes a helper rule whose
// alternatives are UTF-8 byte sequences, so a matcher works byte by byte (a partial UTF-8 char is
// a position inside such an alternative). Repetitions become helper rules (`x*` is
// `r ::= x r | ` ...). The parser refuses left recursion (a rule reaching itself before consuming
// a byte), which the stack matcher could not expand. Immutable after parsing; plain values.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace tinyserve::structured {

// A set of bytes: bit b of word b / 64.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool Has(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

struct Element {
  enum class Kind : uint8_t { kBytes, kRuleRef, kEnd };
  Kind kind = Kind::kEnd;
  int32_t value = 0;  // kBytes: index into Grammar::byte_sets; kRuleRef: the rule index
};

struct Grammar {
  std::vector<std::string> rule_names;                  // [num_rules]
  std::vector<std::vector<int32_t>> rule_alternatives;  // [num_rules][num_alts] start positions
  std::vector<Element> elements;                        // every alternative, each ended by kEnd
  std::vector<ByteSet> byte_sets;
  int32_t root = 0;

  int32_t num_rules() const { return static_cast<int32_t>(rule_names.size()); }
};

// Parses GBNF (llama.cpp's syntax): `name ::= body` rules, "literals" with escapes (\n \r \t
// \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH; \x is a code point, as in llama.cpp), [char classes] with
// ranges, negation (^) and escapes, `.` (any code point), ( ) groups, | alternatives, * + ? {m}
// {m,} {m,n} {,n} repetitions, # comments. Rule names are letters, digits, '-' and '_'. The start
// rule is `root`. A rule body continues across lines until the next `name ::=`. Errors are
// InvalidArgument naming the line and problem.
StatusOr<Grammar> ParseGbnf(std::string_view text);

// Appends the UTF-8 byte-sequence alternatives of the code points [lo, hi] (surrogates skipped)
// to *out: each alternative is one ByteSet per byte. REQUIRES: lo <= hi <= 0x10FFFF.
void Utf8RangeSequences(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteSet>>* out);

}  // namespace tinyserve::structured
