// Regex -> GBNF, for kRegex, JSON Schema `pattern` and whitespace_pattern. The supported subset of
// ECMA / Python syntax: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH, an escaped
// punctuation char), `.` (any char but \n), [classes] with ranges, negation and \d \w \s inside,
// \d \w \s \D \W \S, groups (capturing, (?:...), (?P<name>...) and (?<name>...)), |, the
// quantifiers * + ? {m} {m,} {m,n} (a lazy suffix `?` is accepted: it changes which match a search
// finds, not the language), and the anchors ^ at the start and $ at the end. Backreferences,
// lookaround, word boundaries, possessive quantifiers and anchors elsewhere are InvalidArgument
// naming the offset. The output is a full match of the pattern (anchored at both ends).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace tinyserve::structured {

enum class RegexTarget : uint8_t {
  kRaw,         // the output bytes themselves match
  kJsonString,  // the content of a JSON string matches: `"`, `\` and control chars are escaped
};

// The GBNF rules (helpers named `<rule_name>-...`) of `rule_name ::= <the pattern>`.
StatusOr<std::string> RegexToGbnf(std::string_view pattern, std::string_view rule_name,
                                  RegexTarget target = RegexTarget::kRaw);

// The GBNF char-class text ("[...]") of the code points [lo, hi] pairs. REQUIRES: non-empty.
std::string GbnfClass(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

}  // namespace tinyserve::structured
