#include "server/protocol/structured_fields.h"

#include <utility>
#include <vector>

#include "server/protocol/json_fields.h"

namespace tinyserve::protocol {
namespace {

using structured::ConstraintKind;

const nlohmann::json* Present(const nlohmann::json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && !it->is_null() ? &*it : nullptr;
}

std::optional<ApiError> Bad(const std::string& param, const std::string& message) {
  return ApiError::BadRequest(message, param);
}

// A JSON Schema given as an object, or (vLLM) as its JSON text.
std::optional<ApiError> ReadSchema(const nlohmann::json& value, const std::string& param,
                                   StructuredOutput* out) {
  out->spec.kind = ConstraintKind::kJsonSchema;
  out->param = param;
  if (value.is_object()) {
    out->spec.text = value.dump();
    return std::nullopt;
  }
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (!JsonDepthAtMost(text, kMaxJsonDepth)) {
      return Bad(param, "`" + param + "` nests arrays and objects deeper than the limit of " +
                            std::to_string(kMaxJsonDepth) + " levels.");
    }
    nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return Bad(param, "`" + param + "` is not valid JSON text of a JSON Schema.");
    }
    if (!parsed.is_object()) {
      return Bad(param, "`" + param + "` must be a JSON Schema object, got " +
                            JsonTypePhrase(parsed) + ".");
    }
    out->spec.text = parsed.dump();
    return std::nullopt;
  }
  return Bad(param, "`" + param + "` must be a JSON Schema object (or its JSON text), got " +
                        JsonTypePhrase(value) + ".");
}

std::optional<ApiError> ReadString(const nlohmann::json& value, const std::string& param,
                                   ConstraintKind kind, StructuredOutput* out) {
  if (!value.is_string()) {
    return Bad(param, "`" + param + "` must be a string, got " + JsonTypePhrase(value) + ".");
  }
  out->spec.kind = kind;
  out->spec.text = value.get<std::string>();
  out->param = param;
  if (out->spec.text.empty()) return Bad(param, "`" + param + "` must not be empty.");
  return std::nullopt;
}

std::optional<ApiError> ReadChoice(const nlohmann::json& value, const std::string& param,
                                   StructuredOutput* out) {
  const std::string shape = "`" + param + "` must be a non-empty array of strings";
  if (!value.is_array()) return Bad(param, shape + ", got " + JsonTypePhrase(value) + ".");
  if (value.empty()) return Bad(param, shape + ", got an empty array.");
  out->spec.kind = ConstraintKind::kChoice;
  out->param = param;
  for (const auto& choice : value) {
    if (!choice.is_string()) {
      return Bad(param, shape + ", got an element that is " + JsonTypePhrase(choice) + ".");
    }
    out->spec.choices.push_back(choice.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> ReadResponseFormat(const nlohmann::json& value,
                                           std::vector<StructuredOutput>* found) {
  const std::string param = "response_format";
  if (!value.is_object()) {
    return Bad(param, "`response_format` must be an object, got " + JsonTypePhrase(value) + ".");
  }
  std::optional<std::string> type;
  TS_RETURN_IF_API_ERROR(GetString(value, "type", "response_format.type", &type));
  if (!type) return Bad("response_format.type", "`response_format.type` is required.");
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") {
    StructuredOutput s;
    s.spec.kind = ConstraintKind::kJsonObject;
    s.param = param;
    found->push_back(std::move(s));
    return std::nullopt;
  }
  if (*type != "json_schema") {
    return Bad("response_format.type",
               "`response_format.type` must be one of \"text\", \"json_object\", "
               "\"json_schema\", got \"" +
                   *type + "\".");
  }
  const nlohmann::json* js = Present(value, "json_schema");
  if (js == nullptr) {
    return Bad("response_format.json_schema",
               "`response_format.json_schema` is required when the type is \"json_schema\".");
  }
  if (!js->is_object()) {
    return Bad("response_format.json_schema",
               "`response_format.json_schema` must be an object, "
               "got " +
                   JsonTypePhrase(*js) + ".");
  }
  std::optional<std::string> name;
  TS_RETURN_IF_API_ERROR(GetString(*js, "name", "response_format.json_schema.name", &name));
  if (!name || name->empty()) {
    return Bad("response_format.json_schema.name",
               "`response_format.json_schema.name` is required (a non-empty string).");
  }
  bool strict = false;
  TS_RETURN_IF_API_ERROR(GetBool(*js, "strict", "response_format.json_schema.strict", &strict));
  std::optional<std::string> description;
  TS_RETURN_IF_API_ERROR(
      GetString(*js, "description", "response_format.json_schema.description", &description));
  const nlohmann::json* schema = Present(*js, "schema");
  const std::string schema_param = "response_format.json_schema.schema";
  if (schema == nullptr) return Bad(schema_param, "`" + schema_param + "` is required.");
  if (!schema->is_object()) {
    return Bad(schema_param,
               "`" + schema_param + "` must be an object, got " + JsonTypePhrase(*schema) + ".");
  }
  StructuredOutput s;
  TS_RETURN_IF_API_ERROR(ReadSchema(*schema, schema_param, &s));
  found->push_back(std::move(s));
  return std::nullopt;
}

std::optional<ApiError> ReadStructuredOutputs(const nlohmann::json& value,
                                              std::vector<StructuredOutput>* found,
                                              std::optional<std::string>* whitespace,
                                              std::string* whitespace_param) {
  if (!value.is_object()) {
    return Bad("structured_outputs",
               "`structured_outputs` must be an object, got " + JsonTypePhrase(value) + ".");
  }
  for (auto it = value.begin(); it != value.end(); ++it) {
    static const char* const kKnown[] = {"json",
                                         "regex",
                                         "choice",
                                         "grammar",
                                         "json_object",
                                         "whitespace_pattern",
                                         "disable_any_whitespace",
                                         "disable_fallback",
                                         "disable_additional_properties",
                                         "structural_tag"};
    bool known = false;
    for (const char* k : kKnown) known = known || it.key() == k;
    if (!known) {
      return Bad("structured_outputs." + it.key(),
                 "Unknown field `structured_outputs." + it.key() + "`.");
    }
  }
  if (Present(value, "structural_tag") != nullptr) {
    return Bad("structured_outputs.structural_tag",
               "`structured_outputs.structural_tag` is not supported by this server.");
  }
  bool flag = false;
  TS_RETURN_IF_API_ERROR(GetBool(value, "disable_additional_properties",
                                 "structured_outputs.disable_additional_properties", &flag));
  if (flag) {
    return Bad("structured_outputs.disable_additional_properties",
               "`structured_outputs.disable_additional_properties` is not supported by this "
               "server; set \"additionalProperties\": false in the schema.");
  }
  bool disable_fallback = false;  // one backend, so there is no fallback to disable
  TS_RETURN_IF_API_ERROR(
      GetBool(value, "disable_fallback", "structured_outputs.disable_fallback", &disable_fallback));
  if (const nlohmann::json* v = Present(value, "json")) {
    StructuredOutput s;
    TS_RETURN_IF_API_ERROR(ReadSchema(*v, "structured_outputs.json", &s));
    found->push_back(std::move(s));
  }
  if (const nlohmann::json* v = Present(value, "regex")) {
    StructuredOutput s;
    TS_RETURN_IF_API_ERROR(ReadString(*v, "structured_outputs.regex", ConstraintKind::kRegex, &s));
    found->push_back(std::move(s));
  }
  if (const nlohmann::json* v = Present(value, "choice")) {
    StructuredOutput s;
    TS_RETURN_IF_API_ERROR(ReadChoice(*v, "structured_outputs.choice", &s));
    found->push_back(std::move(s));
  }
  if (const nlohmann::json* v = Present(value, "grammar")) {
    StructuredOutput s;
    TS_RETURN_IF_API_ERROR(
        ReadString(*v, "structured_outputs.grammar", ConstraintKind::kGrammar, &s));
    found->push_back(std::move(s));
  }
  bool json_object = false;
  TS_RETURN_IF_API_ERROR(
      GetBool(value, "json_object", "structured_outputs.json_object", &json_object));
  if (json_object) {
    StructuredOutput s;
    s.spec.kind = ConstraintKind::kJsonObject;
    s.param = "structured_outputs.json_object";
    found->push_back(std::move(s));
  }
  TS_RETURN_IF_API_ERROR(
      GetString(value, "whitespace_pattern", "structured_outputs.whitespace_pattern", whitespace));
  if (*whitespace) *whitespace_param = "structured_outputs.whitespace_pattern";
  bool no_whitespace = false;
  TS_RETURN_IF_API_ERROR(GetBool(value, "disable_any_whitespace",
                                 "structured_outputs.disable_any_whitespace", &no_whitespace));
  if (no_whitespace) {
    if (*whitespace) {
      return Bad("structured_outputs.disable_any_whitespace",
                 "`structured_outputs.disable_any_whitespace` and "
                 "`structured_outputs.whitespace_pattern` cannot both be set.");
    }
    *whitespace = std::string();  // the empty pattern: no whitespace at all
    *whitespace_param = "structured_outputs.disable_any_whitespace";
  }
  if (found->empty()) {
    return Bad("structured_outputs",
               "`structured_outputs` must set one of json, regex, choice, grammar, json_object.");
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseStructuredOutput(const nlohmann::json& body,
                                              std::optional<StructuredOutput>* out) {
  std::vector<StructuredOutput> found;
  std::optional<std::string> whitespace;
  std::string whitespace_param;
  if (const nlohmann::json* v = Present(body, "response_format")) {
    TS_RETURN_IF_API_ERROR(ReadResponseFormat(*v, &found));
  }
  if (const nlohmann::json* v = Present(body, "structured_outputs")) {
    TS_RETURN_IF_API_ERROR(ReadStructuredOutputs(*v, &found, &whitespace, &whitespace_param));
  }
  if (const nlohmann::json* v = Present(body, "guided_json")) {
    StructuredOutput s;
    TS_RETURN_IF_API_ERROR(ReadSchema(*v, "guided_json", &s));
    found.push_back(std::move(s));
  }
  if (const nlohmann::json* v = Present(body, "guided_regex")) {
    StructuredOutput s;
    TS_RETURN_IF_API_ERROR(ReadString(*v, "guided_regex", ConstraintKind::kRegex, &s));
    found.push_back(std::move(s));
  }
  if (const nlohmann::json* v = Present(body, "guided_choice")) {
    StructuredOutput s;
    TS_RETURN_IF_API_ERROR(ReadChoice(*v, "guided_choice", &s));
    found.push_back(std::move(s));
  }
  if (const nlohmann::json* v = Present(body, "guided_grammar")) {
    StructuredOutput s;
    TS_RETURN_IF_API_ERROR(ReadString(*v, "guided_grammar", ConstraintKind::kGrammar, &s));
    found.push_back(std::move(s));
  }
  if (Present(body, "guided_whitespace_pattern") != nullptr) {
    if (whitespace) {
      return Bad("guided_whitespace_pattern",
                 "`guided_whitespace_pattern` and `" + whitespace_param + "` cannot both be set.");
    }
    TS_RETURN_IF_API_ERROR(
        GetString(body, "guided_whitespace_pattern", "guided_whitespace_pattern", &whitespace));
    whitespace_param = "guided_whitespace_pattern";
  }
  if (found.size() > 1) {
    return Bad(found[1].param, "Only one structured-output constraint may be given; got `" +
                                   found[0].param + "` and `" + found[1].param + "`.");
  }
  if (whitespace) {
    const bool is_json = !found.empty() && (found[0].spec.kind == ConstraintKind::kJsonObject ||
                                            found[0].spec.kind == ConstraintKind::kJsonSchema);
    if (!is_json) {
      return Bad(whitespace_param, "`" + whitespace_param +
                                       "` applies only to a JSON constraint (json, " +
                                       "json_object, guided_json or response_format).");
    }
    found[0].spec.whitespace_pattern = std::move(whitespace);
  }
  if (found.empty()) {
    out->reset();
  } else {
    *out = std::move(found[0]);
  }
  return std::nullopt;
}

void KeepSchemaKeyOrder(std::string_view body, StructuredOutput* out) {
  if (out->spec.kind != structured::ConstraintKind::kJsonSchema) return;
  nlohmann::ordered_json ordered =
      nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  const nlohmann::ordered_json* at = &ordered;
  std::string_view path = out->param;  // dotted object keys, e.g. "structured_outputs.json"
  while (at != nullptr && !path.empty()) {
    const size_t dot = path.find('.');
    const std::string key(path.substr(0, dot));
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
    if (!at->is_object()) return;
    auto it = at->find(key);
    at = it == at->end() ? nullptr : &*it;
  }
  if (at == nullptr) return;
  if (at->is_object()) {
    out->spec.text = at->dump();
  } else if (at->is_string()) {  // vLLM's schema as JSON text
    nlohmann::ordered_json schema =
        ParseJsonText<nlohmann::ordered_json>(at->get_ref<const std::string&>());
    if (schema.is_object()) out->spec.text = schema.dump();
  }
}

}  // namespace tinyserve::protocol
