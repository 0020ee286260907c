// Strictly typed reads of request JSON fields, each failure a 400 that names the field.
//
// Every Get* reads `object[key]` (REQUIRES: object.is_object()). An absent or null field leaves
// *out unchanged and returns nullopt (the caller's default stands); a present field of the wrong
// type returns the 400 ApiError with `param` = `param` (the field's full path, e.g.
// "stream_options.include_usage"). Types are JSON's, with no coercion: "0.5" is not a number and
// true is not an integer; an integer field accepts an integral number written as a float (16.0),
// as pydantic does for vLLM. Pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "server/protocol/api_error.h"

// Returns from the enclosing function if `expr` (an std::optional<ApiError>) holds an error.
#define TS_RETURN_IF_API_ERROR(expr)    \
  do {                                  \
    if (auto _ts_api_error = (expr)) {  \
      return *std::move(_ts_api_error); \
    }                                   \
  } while (0)

namespace tinyserve::protocol {

// The deepest nesting of arrays and objects a request body may have (the body object is depth 1).
// Deeper bodies are refused before they are parsed: nlohmann's copy, comparison and dump recurse
// once per level, and ~100,000 levels overflow a worker's stack.
inline constexpr int kMaxJsonDepth = 64;

// Parses a request body. 400 "Invalid JSON body: ..." for malformed JSON (including invalid
// UTF-8 in strings) and for nesting deeper than kMaxJsonDepth (checked first, by a scan of the
// bytes that skips strings), 400 "The request body must be a JSON object" for any other JSON value.
ApiErrorOr<nlohmann::json> ParseJsonBody(std::string_view body);

// Returns true iff the arrays and objects of the JSON text `text` nest at most `max_depth` deep
// (brackets inside strings do not count; malformed text is left to the parser).
bool JsonDepthAtMost(std::string_view text, int max_depth);

// JSON text found inside a string of a request or in a model's output (a schema or tool arguments
// sent as a string, a tool call the model wrote) is parsed only when it nests at most
// kMaxJsonDepth deep, as a body is: the depth check of the body skips strings, and the parsed
// value's dump, copy and comparison recurse once per level. Returns the parsed value, or a
// discarded one (is_discarded()) for malformed or too deeply nested text.
template <typename Json>
Json ParseJsonText(std::string_view text) {
  if (!JsonDepthAtMost(text, kMaxJsonDepth)) return Json(Json::value_t::discarded);
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// "a boolean", "an integer", "a number", "a string", "an array", "an object" by JSON type name.
std::string JsonTypePhrase(const nlohmann::json& value);

std::optional<ApiError> GetBool(const nlohmann::json& object, std::string_view key,
                                const std::string& param, bool* out);
// Integers must fit in int32 (else 400 "... must be a 32-bit integer").
std::optional<ApiError> GetInt32(const nlohmann::json& object, std::string_view key,
                                 const std::string& param, std::optional<int32_t>* out);
std::optional<ApiError> GetInt32(const nlohmann::json& object, std::string_view key,
                                 const std::string& param, int32_t* out);
// Numbers must be finite as a float (else 400 "... must be a finite number").
std::optional<ApiError> GetFloat(const nlohmann::json& object, std::string_view key,
                                 const std::string& param, float* out);
std::optional<ApiError> GetString(const nlohmann::json& object, std::string_view key,
                                  const std::string& param, std::optional<std::string>* out);

// Returns true iff `value` is a JSON integer, or a float with an integral value, in int32 range;
// then sets *out.
bool AsInt32(const nlohmann::json& value, int32_t* out);

}  // namespace tinyserve::protocol
