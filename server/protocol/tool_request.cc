#include "server/protocol/tool_request.h"

#include <set>

#include "server/protocol/json_fields.h"

namespace tinyserve::protocol {
namespace {

using Json = nlohmann::ordered_json;

std::string Quoted(const std::string& param) { return "`" + param + "`"; }

std::optional<ApiError> RequireObject(const nlohmann::json& v, const std::string& param) {
  if (v.is_object()) return std::nullopt;
  return ApiError::BadRequest(Quoted(param) + " must be an object, got " + JsonTypePhrase(v),
                              param);
}

std::optional<ApiError> ParseName(const nlohmann::json& object, const std::string& path,
                                  std::string* out) {
  std::optional<std::string> name;
  TS_RETURN_IF_API_ERROR(GetString(object, "name", path + ".name", &name));
  if (!name) return ApiError::BadRequest(Quoted(path + ".name") + " is required", path + ".name");
  *out = *name;
  return std::nullopt;
}

// `ordered` is the same tool from an order-keeping parse of the body, or null (sorted keys).
std::optional<ApiError> ParseTool(const nlohmann::json& t, const Json* ordered,
                                  const std::string& path, ChatTool* out) {
  TS_RETURN_IF_API_ERROR(RequireObject(t, path));
  std::optional<std::string> type;
  TS_RETURN_IF_API_ERROR(GetString(t, "type", path + ".type", &type));
  if (type && *type != "function") {
    return ApiError::BadRequest(
        "Unsupported tool type '" + *type + "'; only 'function' tools are supported",
        path + ".type");
  }
  const std::string fpath = path + ".function";
  auto f = t.find("function");
  if (f == t.end() || f->is_null()) {
    return ApiError::BadRequest(Quoted(fpath) + " is required", fpath);
  }
  TS_RETURN_IF_API_ERROR(RequireObject(*f, fpath));
  TS_RETURN_IF_API_ERROR(ParseName(*f, fpath, &out->name));
  if (!IsValidToolName(out->name)) {
    return ApiError::BadRequest(
        "Invalid function name '" + out->name + "': it must match [a-zA-Z0-9_-]{1,64}",
        fpath + ".name");
  }
  std::optional<std::string> description;
  TS_RETURN_IF_API_ERROR(GetString(*f, "description", fpath + ".description", &description));
  bool strict = false;
  TS_RETURN_IF_API_ERROR(GetBool(*f, "strict", fpath + ".strict", &strict));
  Json parameters = nullptr;
  if (auto p = f->find("parameters"); p != f->end() && !p->is_null()) {
    if (!p->is_object()) {
      return ApiError::BadRequest(Quoted(fpath + ".parameters") +
                                      " must be a JSON Schema object, got " + JsonTypePhrase(*p),
                                  fpath + ".parameters");
    }
    if (auto ty = p->find("type"); ty != p->end() && !ty->is_string() && !ty->is_array()) {
      return ApiError::BadRequest(
          Quoted(fpath + ".parameters.type") + " must be a string or an array of strings",
          fpath + ".parameters.type");
    }
    parameters =
        ordered != nullptr ? ordered->at("function").at("parameters") : Json::parse(p->dump());
    out->parameters = parameters;
  }
  // vLLM's model_dump order: type, function {name, description, parameters, extras...}.
  Json fn;
  fn["name"] = out->name;
  fn["description"] = description ? Json(*description) : Json(nullptr);
  fn["parameters"] = parameters;
  const Json function = ordered != nullptr ? ordered->at("function") : Json::parse(f->dump());
  for (const auto& [key, value] : function.items()) {
    if (key != "name" && key != "description" && key != "parameters") fn[key] = value;
  }
  out->json = Json{{"type", "function"}, {"function", std::move(fn)}};
  return std::nullopt;
}

std::optional<ApiError> ParseToolChoice(const nlohmann::json& v, const std::vector<ChatTool>& tools,
                                        ToolChoice* out) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "none") {
      out->kind = ToolChoice::Kind::kNone;
    } else if (s == "auto") {
      out->kind = ToolChoice::Kind::kAuto;
    } else if (s == "required") {
      out->kind = ToolChoice::Kind::kRequired;
    } else {
      return ApiError::BadRequest("Invalid `tool_choice` '" + s +
                                      "'; expected 'none', 'auto', 'required' or " +
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}",
                                  "tool_choice");
    }
  } else if (v.is_object()) {
    std::optional<std::string> type;
    TS_RETURN_IF_API_ERROR(GetString(v, "type", "tool_choice.type", &type));
    if (type != "function") {
      return ApiError::BadRequest("`tool_choice.type` must be 'function'", "tool_choice.type");
    }
    auto f = v.find("function");
    if (f == v.end() || f->is_null()) {
      return ApiError::BadRequest("`tool_choice.function` is required", "tool_choice.function");
    }
    TS_RETURN_IF_API_ERROR(RequireObject(*f, "tool_choice.function"));
    out->kind = ToolChoice::Kind::kFunction;
    TS_RETURN_IF_API_ERROR(ParseName(*f, "tool_choice.function", &out->function));
  } else {
    return ApiError::BadRequest(
        "`tool_choice` must be a string or an object, got " + JsonTypePhrase(v), "tool_choice");
  }
  if (out->kind != ToolChoice::Kind::kNone && tools.empty()) {
    return ApiError::BadRequest("`tool_choice` other than 'none' needs a non-empty `tools` list",
                                "tool_choice");
  }
  if (out->kind == ToolChoice::Kind::kFunction) {
    bool listed = false;
    for (const ChatTool& t : tools) listed = listed || t.name == out->function;
    if (!listed) {
      return ApiError::BadRequest("tool_choice names unknown function '" + out->function + "'",
                                  "tool_choice.function.name");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ParseToolCall(const nlohmann::json& c, const std::string& path,
                                      ChatToolCall* out) {
  TS_RETURN_IF_API_ERROR(RequireObject(c, path));
  std::optional<std::string> id;
  TS_RETURN_IF_API_ERROR(GetString(c, "id", path + ".id", &id));
  if (!id) return ApiError::BadRequest(Quoted(path + ".id") + " is required", path + ".id");
  out->id = *id;
  std::optional<std::string> type;
  TS_RETURN_IF_API_ERROR(GetString(c, "type", path + ".type", &type));
  if (type && *type != "function") {
    return ApiError::BadRequest(Quoted(path + ".type") + " must be 'function'", path + ".type");
  }
  const std::string fpath = path + ".function";
  auto f = c.find("function");
  if (f == c.end() || f->is_null()) {
    return ApiError::BadRequest(Quoted(fpath) + " is required", fpath);
  }
  TS_RETURN_IF_API_ERROR(RequireObject(*f, fpath));
  TS_RETURN_IF_API_ERROR(ParseName(*f, fpath, &out->name));
  std::optional<std::string> arguments;
  TS_RETURN_IF_API_ERROR(GetString(*f, "arguments", fpath + ".arguments", &arguments));
  if (!arguments) {
    return ApiError::BadRequest(Quoted(fpath + ".arguments") + " is required",
                                fpath + ".arguments");
  }
  if (!JsonDepthAtMost(*arguments, kMaxJsonDepth)) {
    return ApiError::BadRequest(Quoted(fpath + ".arguments") +
                                    " nests arrays and objects deeper than the limit of " +
                                    std::to_string(kMaxJsonDepth) + " levels",
                                fpath + ".arguments");
  }
  const Json parsed = Json::parse(*arguments, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) {
    return ApiError::BadRequest(
        Quoted(fpath + ".arguments") + " must be a JSON object encoded as a string",
        fpath + ".arguments");
  }
  out->arguments = *arguments;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseToolFields(const nlohmann::json& body, const Json* ordered_tools,
                                        ToolFields* out) {
  if (auto it = body.find("tools"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) {
      return ApiError::BadRequest("`tools` must be an array, got " + JsonTypePhrase(*it), "tools");
    }
    if (it->size() > kMaxTools) {
      return ApiError::BadRequest("`tools` has " + std::to_string(it->size()) + " tools; at most " +
                                      std::to_string(kMaxTools) + " are allowed",
                                  "tools");
    }
    std::set<std::string> names;
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string path = "tools[" + std::to_string(i) + "]";
      ChatTool tool;
      const bool use_order = ordered_tools != nullptr && ordered_tools->is_array() &&
                             ordered_tools->size() == it->size();
      TS_RETURN_IF_API_ERROR(
          ParseTool((*it)[i], use_order ? &(*ordered_tools)[i] : nullptr, path, &tool));
      if (!names.insert(tool.name).second) {
        return ApiError::BadRequest("Function name '" + tool.name + "' is given twice in `tools`",
                                    path + ".function.name");
      }
      out->tools.push_back(std::move(tool));
    }
  }
  out->tool_choice.kind = out->tools.empty() ? ToolChoice::Kind::kNone : ToolChoice::Kind::kAuto;
  if (auto it = body.find("tool_choice"); it != body.end() && !it->is_null()) {
    TS_RETURN_IF_API_ERROR(ParseToolChoice(*it, out->tools, &out->tool_choice));
  }
  TS_RETURN_IF_API_ERROR(
      GetBool(body, "parallel_tool_calls", "parallel_tool_calls", &out->parallel_tool_calls));
  return std::nullopt;
}

std::optional<ApiError> ParseToolMessageFields(const nlohmann::json& m, const std::string& path,
                                               ChatMessage* message) {
  auto calls = m.find("tool_calls");
  const bool has_calls = calls != m.end() && !calls->is_null();
  if (has_calls && message->role != "assistant") {
    return ApiError::BadRequest("Only assistant messages may carry `tool_calls`",
                                path + ".tool_calls");
  }
  if (has_calls) {
    if (!calls->is_array()) {
      return ApiError::BadRequest(
          Quoted(path + ".tool_calls") + " must be an array, got " + JsonTypePhrase(*calls),
          path + ".tool_calls");
    }
    for (size_t j = 0; j < calls->size(); ++j) {
      ChatToolCall call;
      TS_RETURN_IF_API_ERROR(
          ParseToolCall((*calls)[j], path + ".tool_calls[" + std::to_string(j) + "]", &call));
      message->tool_calls.push_back(std::move(call));
    }
  }
  if (message->role == "tool") {
    std::optional<std::string> id;
    TS_RETURN_IF_API_ERROR(GetString(m, "tool_call_id", path + ".tool_call_id", &id));
    if (!id) {
      return ApiError::BadRequest(Quoted(path + ".tool_call_id") + " is required",
                                  path + ".tool_call_id");
    }
    message->tool_call_id = *id;
  }
  return std::nullopt;
}

}  // namespace tinyserve::protocol
