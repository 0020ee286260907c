// The structured-output fields of /v1/completions and /v1/chat/completions (issue 21), read into
// one structured::ConstraintSpec. Accepted spellings:
//
//   OpenAI  response_format  {"type": "text"} (no constraint), {"type": "json_object"},
//                            {"type": "json_schema", "json_schema": {"name": string (required),
//                            "schema": object (required), "strict": bool, "description": string}}
//   vLLM    structured_outputs  an object with exactly one of json (a schema object, or its JSON
//                            text), regex (string), choice (non-empty array of strings), grammar
//                            (GBNF string), json_object (true); and optionally whitespace_pattern
//                            (string), disable_any_whitespace (bool: no whitespace between JSON
//                            tokens), disable_fallback (bool, accepted: there is one backend).
//                            structural_tag, and disable_additional_properties true, are a 400
//                            (not supported).
//   older vLLM  guided_json, guided_regex, guided_choice, guided_grammar (as above) and
//                            guided_whitespace_pattern.
//
// Two constraints at once (in any spelling) is a 400 naming both; a whitespace pattern without a
// JSON constraint is a 400. Every 400 names the field (`param`, its full path). The grammar
// itself is compiled later (structured::GrammarCache), and its errors name `param` too.
// Plain values and pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/protocol/api_error.h"
#include "structured/grammar.h"

namespace tinyserve::protocol {

struct StructuredOutput {
  structured::ConstraintSpec spec;
  std::string param;  // the request field it came from, e.g. "response_format.json_schema.schema"
};

// Reads the structured-output fields of `body` (REQUIRES: a JSON object). *out = nullopt when
// the request has no constraint.
std::optional<ApiError> ParseStructuredOutput(const nlohmann::json& body,
                                              std::optional<StructuredOutput>* out);

// nlohmann::json (what the request parsers read) sorts object keys, but a JSON Schema's
// `properties` are generated in the schema's order (as OpenAI and vLLM do). For a JSON-schema
// constraint, re-reads the schema at out->param from an order-keeping parse of `body` (the text
// ParseStructuredOutput's body was parsed from) and makes it spec.text. Anything else is left
// as it is.
void KeepSchemaKeyOrder(std::string_view body, StructuredOutput* out);

}  // namespace tinyserve::protocol
