#include "server/protocol/chat_request.h"

#include "server/protocol/json_fields.h"
#include "server/protocol/tool_request.h"

namespace tinyserve::protocol {
namespace {

std::optional<ApiError> ParseContent(const nlohmann::json& message, const std::string& path,
                                     bool allow_null, std::string* out) {
  const std::string param = path + ".content";
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) {
    if (allow_null) return std::nullopt;
    return ApiError::BadRequest("`" + param + "` is required", param);
  }
  if (it->is_string()) {
    *out = it->get<std::string>();
    return std::nullopt;
  }
  if (!it->is_array()) {
    return ApiError::BadRequest(
        "`" + param + "` must be a string or an array of content parts, got " + JsonTypePhrase(*it),
        param);
  }
  std::string text;
  for (size_t j = 0; j < it->size(); ++j) {
    const nlohmann::json& part = (*it)[j];
    const std::string part_path = param + "[" + std::to_string(j) + "]";
    if (!part.is_object()) {
      return ApiError::BadRequest("`" + part_path + "` must be an object", part_path);
    }
    std::optional<std::string> type;
    TS_RETURN_IF_API_ERROR(GetString(part, "type", part_path + ".type", &type));
    if (!type)
      return ApiError::BadRequest("`" + part_path + ".type` is required", part_path + ".type");
    if (*type != "text") {
      return ApiError::BadRequest("Unsupported content part type: '" + *type + "'",
                                  part_path + ".type");
    }
    std::optional<std::string> part_text;
    TS_RETURN_IF_API_ERROR(GetString(part, "text", part_path + ".text", &part_text));
    if (!part_text) {
      return ApiError::BadRequest("`" + part_path + ".text` is required", part_path + ".text");
    }
    if (j > 0) text += "\n";
    text += *part_text;
  }
  *out = std::move(text);
  return std::nullopt;
}

std::optional<ApiError> ParseMessages(const nlohmann::json& body, std::vector<ChatMessage>* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    return ApiError::BadRequest("`messages` is required", "messages");
  }
  if (!it->is_array()) {
    return ApiError::BadRequest("`messages` must be an array, got " + JsonTypePhrase(*it),
                                "messages");
  }
  if (it->empty()) return ApiError::BadRequest("`messages` must not be empty", "messages");
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& m = (*it)[i];
    const std::string path = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return ApiError::BadRequest("`" + path + "` must be an object", path);
    std::optional<std::string> role;
    TS_RETURN_IF_API_ERROR(GetString(m, "role", path + ".role", &role));
    if (!role) return ApiError::BadRequest("`" + path + ".role` is required", path + ".role");
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool") {
      return ApiError::BadRequest(
          "Unknown role '" + *role + "'; expected 'system', 'user', 'assistant' or 'tool'",
          path + ".role");
    }
    ChatMessage message{*role, ""};
    TS_RETURN_IF_API_ERROR(ParseContent(m, path, *role == "assistant", &message.content));
    TS_RETURN_IF_API_ERROR(ParseToolMessageFields(m, path, &message));
    out->push_back(std::move(message));
  }
  return std::nullopt;
}

}  // namespace

ApiErrorOr<ChatRequest> ParseChatRequest(const nlohmann::json& body, int32_t vocab_size,
                                         const nlohmann::ordered_json* ordered_tools) {
  if (!body.is_object()) return ApiError::BadRequest("The request body must be a JSON object");
  ChatRequest req;
  TS_RETURN_IF_API_ERROR(GetString(body, "model", "model", &req.model));
  TS_RETURN_IF_API_ERROR(ParseMessages(body, &req.messages));
  TS_RETURN_IF_API_ERROR(ParseMaxTokensField(body, "max_tokens", &req.sampling.max_tokens));
  TS_RETURN_IF_API_ERROR(
      ParseMaxTokensField(body, "max_completion_tokens", &req.sampling.max_tokens));
  TS_RETURN_IF_API_ERROR(ParseSamplingFields(body, vocab_size, &req.sampling));
  TS_RETURN_IF_API_ERROR(GetBool(body, "logprobs", "logprobs", &req.logprobs));
  TS_RETURN_IF_API_ERROR(GetInt32(body, "top_logprobs", "top_logprobs", &req.top_logprobs));
  if (req.top_logprobs) {
    if (!req.logprobs) {
      return ApiError::BadRequest("when using `top_logprobs`, `logprobs` must be set to true.",
                                  "top_logprobs");
    }
    if (*req.top_logprobs < 0) {
      return ApiError::BadRequest("`top_logprobs` must be a positive value.", "top_logprobs");
    }
    if (*req.top_logprobs > kMaxLogprobs) {
      return ApiError::BadRequest(
          "Requested sample logprobs of " + std::to_string(*req.top_logprobs) +
              ", which is greater than max allowed: " + std::to_string(kMaxLogprobs),
          "top_logprobs");
    }
  }
  if (req.logprobs) req.sampling.logprobs = req.top_logprobs.value_or(0);
  TS_RETURN_IF_API_ERROR(
      GetBool(body, "add_generation_prompt", "add_generation_prompt", &req.add_generation_prompt));
  TS_RETURN_IF_API_ERROR(ParseToolFields(body, ordered_tools, &req.tool_fields));
  return req;
}

ApiErrorOr<ChatRequest> ParseChatRequestBody(std::string_view body, int32_t vocab_size) {
  ApiErrorOr<nlohmann::json> json = ParseJsonBody(body);
  if (!json.ok()) return json.error();
  nlohmann::ordered_json ordered_tools = OrderedToolsOf(*json, body);
  ApiErrorOr<ChatRequest> req =
      ParseChatRequest(*json, vocab_size, ordered_tools.is_null() ? nullptr : &ordered_tools);
  if (req.ok() && req->sampling.structured) KeepSchemaKeyOrder(body, &*req->sampling.structured);
  return req;
}

nlohmann::ordered_json OrderedToolsOf(const nlohmann::json& parsed, std::string_view body) {
  auto it = parsed.find("tools");
  if (it == parsed.end() || !it->is_array() || it->empty()) return nullptr;
  nlohmann::ordered_json ordered =
      nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!ordered.is_object() || !ordered.contains("tools")) return nullptr;
  return ordered["tools"];
}

}  // namespace tinyserve::protocol
