#include "server/protocol/completion_request.h"

#include "base/utf8.h"
#include "server/protocol/json_fields.h"

namespace tinyserve::protocol {
namespace {

constexpr const char* kPromptShape =
    "`prompt` must be a string, an array of strings, an array of token ids or an array of arrays "
    "of token ids";

std::optional<ApiError> ParseTokenIds(const nlohmann::json& ids, int32_t vocab_size,
                                      std::vector<int32_t>* out) {
  if (ids.empty()) return ApiError::BadRequest("`prompt` must not be empty", "prompt");
  out->reserve(ids.size());
  for (const auto& v : ids) {
    int32_t id = 0;
    if (!v.is_number() || !AsInt32(v, &id)) return ApiError::BadRequest(kPromptShape, "prompt");
    if (id < 0 || id >= vocab_size) {
      return ApiError::BadRequest("Token id " + std::to_string(id) + " is out of vocabulary",
                                  "prompt");
    }
    out->push_back(id);
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const nlohmann::json& body, int32_t vocab_size,
                                    std::vector<CompletionPrompt>* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    return ApiError::BadRequest("`prompt` is required", "prompt");
  }
  const nlohmann::json& prompt = *it;
  if (prompt.is_string()) {
    if (prompt.get_ref<const std::string&>().empty()) {
      return ApiError::BadRequest("`prompt` must not be empty", "prompt");
    }
    out->push_back({true, prompt.get<std::string>(), {}});
    return std::nullopt;
  }
  if (!prompt.is_array()) return ApiError::BadRequest(kPromptShape, "prompt");
  if (prompt.empty()) return ApiError::BadRequest("`prompt` must not be empty", "prompt");
  const nlohmann::json& first = prompt.front();
  if (first.is_number()) {
    CompletionPrompt p{false, {}, {}};
    TS_RETURN_IF_API_ERROR(ParseTokenIds(prompt, vocab_size, &p.token_ids));
    out->push_back(std::move(p));
    return std::nullopt;
  }
  for (const auto& item : prompt) {
    if (first.is_string() && item.is_string()) {
      if (item.get_ref<const std::string&>().empty()) {
        return ApiError::BadRequest("`prompt` must not contain an empty string", "prompt");
      }
      out->push_back({true, item.get<std::string>(), {}});
    } else if (first.is_array() && item.is_array()) {
      CompletionPrompt p{false, {}, {}};
      TS_RETURN_IF_API_ERROR(ParseTokenIds(item, vocab_size, &p.token_ids));
      out->push_back(std::move(p));
    } else {
      return ApiError::BadRequest(kPromptShape, "prompt");
    }
  }
  return std::nullopt;
}

}  // namespace

ApiErrorOr<CompletionRequest> ParseCompletionRequest(const nlohmann::json& body,
                                                     int32_t vocab_size) {
  if (!body.is_object()) return ApiError::BadRequest("The request body must be a JSON object");
  CompletionRequest req;
  TS_RETURN_IF_API_ERROR(GetString(body, "model", "model", &req.model));
  TS_RETURN_IF_API_ERROR(ParsePrompt(body, vocab_size, &req.prompts));
  if (auto it = body.find("suffix"); it != body.end() && !it->is_null()) {
    return ApiError::BadRequest("suffix is not currently supported", "suffix");  // as vLLM
  }
  req.sampling.max_tokens = kDefaultCompletionMaxTokens;
  if (auto it = body.find("max_tokens"); it != body.end() && it->is_null()) {
    req.sampling.max_tokens.reset();  // explicit null: the rest of the context
  }
  TS_RETURN_IF_API_ERROR(GetBool(body, "echo", "echo", &req.echo));
  std::optional<int32_t> max_tokens;
  TS_RETURN_IF_API_ERROR(GetInt32(body, "max_tokens", "max_tokens", &max_tokens));
  if (req.echo && max_tokens == 0) {
    req.echo_only = true;  // vLLM: the prompt alone (ToSamplingParams asks the engine for 1 token)
    req.sampling.max_tokens = 0;
  } else {
    TS_RETURN_IF_API_ERROR(ParseMaxTokensField(body, "max_tokens", &req.sampling.max_tokens));
  }
  TS_RETURN_IF_API_ERROR(ParseSamplingFields(body, vocab_size, &req.sampling));
  TS_RETURN_IF_API_ERROR(GetInt32(body, "logprobs", "logprobs", &req.sampling.logprobs));
  if (req.sampling.logprobs && *req.sampling.logprobs < 0) {
    return ApiError::BadRequest("`logprobs` must be a positive value.", "logprobs");
  }
  if (req.sampling.logprobs && *req.sampling.logprobs > kMaxLogprobs) {
    return ApiError::BadRequest(
        "Requested sample logprobs of " + std::to_string(*req.sampling.logprobs) +
            ", which is greater than max allowed: " + std::to_string(kMaxLogprobs),
        "logprobs");
  }
  return req;
}

ApiErrorOr<CompletionRequest> ParseCompletionRequestBody(std::string_view body,
                                                         int32_t vocab_size) {
  ApiErrorOr<nlohmann::json> json = ParseJsonBody(body);
  if (!json.ok()) return json.error();
  ApiErrorOr<CompletionRequest> req = ParseCompletionRequest(*json, vocab_size);
  if (req.ok() && req->sampling.structured) KeepSchemaKeyOrder(body, &*req->sampling.structured);
  return req;
}

std::vector<int32_t> TokenizePrompt(const CompletionPrompt& prompt, const Tokenizer& tokenizer) {
  if (!prompt.is_text) return prompt.token_ids;
  return tokenizer.Encode(prompt.text, tokenizer.add_bos_by_default());
}

std::string EchoText(const CompletionPrompt& prompt, const Tokenizer& tokenizer) {
  if (prompt.is_text) return prompt.text;
  return ToValidUtf8(tokenizer.Decode(prompt.token_ids));
}

}  // namespace tinyserve::protocol
