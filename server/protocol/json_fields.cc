#include "server/protocol/json_fields.h"

#include <cmath>
#include <limits>

namespace tinyserve::protocol {
namespace {

// The field's value, or null if absent or JSON null.
const nlohmann::json* Find(const nlohmann::json& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

ApiError WrongType(const std::string& param, const char* expected, const nlohmann::json& value) {
  return ApiError::BadRequest(
      "`" + param + "` must be " + expected + ", got " + JsonTypePhrase(value), param);
}

}  // namespace

bool JsonDepthAtMost(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

ApiErrorOr<nlohmann::json> ParseJsonBody(std::string_view body) {
  if (!JsonDepthAtMost(body, kMaxJsonDepth)) {
    return ApiError::BadRequest(
        "Invalid JSON body: arrays and objects nest deeper than the limit "
        "of " +
        std::to_string(kMaxJsonDepth) + " levels");
  }
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(body.begin(), body.end());
  } catch (const nlohmann::json::exception& e) {
    return ApiError::BadRequest(std::string("Invalid JSON body: ") + e.what());
  }
  if (!parsed.is_object()) return ApiError::BadRequest("The request body must be a JSON object");
  return parsed;
}

std::string JsonTypePhrase(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::object:
      return "an object";
    default:
      return "null";
  }
}

bool AsInt32(const nlohmann::json& value, int32_t* out) {
  constexpr int64_t kMin = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(kMax)) return false;
    *out = static_cast<int32_t>(v);
    return true;
  }
  if (value.is_number_integer()) {
    int64_t v = value.get<int64_t>();
    if (v < kMin || v > kMax) return false;
    *out = static_cast<int32_t>(v);
    return true;
  }
  if (value.is_number_float()) {
    double v = value.get<double>();
    if (!(v >= static_cast<double>(kMin) && v <= static_cast<double>(kMax)) || std::floor(v) != v) {
      return false;
    }
    *out = static_cast<int32_t>(v);
    return true;
  }
  return false;
}

std::optional<ApiError> GetBool(const nlohmann::json& object, std::string_view key,
                                const std::string& param, bool* out) {
  const nlohmann::json* v = Find(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return WrongType(param, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> GetInt32(const nlohmann::json& object, std::string_view key,
                                 const std::string& param, std::optional<int32_t>* out) {
  const nlohmann::json* v = Find(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(param, "an integer", *v);
  int32_t value = 0;
  if (!AsInt32(*v, &value)) {
    if (v->is_number_float() && std::isfinite(v->get<double>()) &&
        std::floor(v->get<double>()) != v->get<double>()) {
      return WrongType(param, "an integer", *v);
    }
    return ApiError::BadRequest("`" + param + "` must be a 32-bit integer", param);
  }
  *out = value;
  return std::nullopt;
}

std::optional<ApiError> GetInt32(const nlohmann::json& object, std::string_view key,
                                 const std::string& param, int32_t* out) {
  std::optional<int32_t> value;
  TS_RETURN_IF_API_ERROR(GetInt32(object, key, param, &value));
  if (value) *out = *value;
  return std::nullopt;
}

std::optional<ApiError> GetFloat(const nlohmann::json& object, std::string_view key,
                                 const std::string& param, float* out) {
  const nlohmann::json* v = Find(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(param, "a number", *v);
  double d = v->get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) {
    return ApiError::BadRequest("`" + param + "` must be a finite number", param);
  }
  *out = static_cast<float>(d);
  return std::nullopt;
}

std::optional<ApiError> GetString(const nlohmann::json& object, std::string_view key,
                                  const std::string& param, std::optional<std::string>* out) {
  const nlohmann::json* v = Find(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return WrongType(param, "a string", *v);
  *out = v->get<std::string>();
  return std::nullopt;
}

}  // namespace tinyserve::protocol
