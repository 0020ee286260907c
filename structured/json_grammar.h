// The GBNF texts of the JSON kinds: any JSON object (kJsonObject) and a JSON Schema (kJsonSchema,
// JsonSchemaToGbnf in grammar.h), plus the whitespace rule both share.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace tinyserve::structured {

// The GBNF rule `<name> ::= ...` of the whitespace between JSON tokens: `pattern` as a regex, or
// by default at most one space, or a newline and up to 20 spaces or tabs.
StatusOr<std::string> WhitespaceRule(const std::string& name,
                                     const std::optional<std::string>& pattern);

// The rules of any JSON value, every name prefixed with `prefix`: `<prefix>value`,
// `<prefix>object`, `<prefix>array`, `<prefix>string`, `<prefix>number`; whitespace is the rule
// `ws_rule` (defined elsewhere). Strings allow every escape of RFC 8259 and any UTF-8 char but
// the control chars; numbers are RFC 8259's with at most 16 integer digits, 16 fraction digits and
// 2 exponent digits.
std::string JsonValueRules(std::string_view prefix, std::string_view ws_rule);

// A grammar whose root is any JSON object.
StatusOr<std::string> JsonObjectGbnf(const std::optional<std::string>& whitespace_pattern);

}  // namespace tinyserve::structured
