// ChatRequest: a validated POST /v1/chat/completions body (vLLM's ChatCompletionRequest).
//
// Fields beyond SamplingFields (sampling_fields.h):
//   model                  optional string (the server checks it against the served names)
//   messages               required, non-empty array of {role, content}; role "system", "user",
//                          "assistant" or "tool"; content a string or an array of {"type":
//                          "text", "text": ...} parts (joined with "\n", as vLLM does); null
//                          content only for an assistant message (read as ""); an assistant's
//                          tool_calls and a tool message's tool_call_id as tool_request.h says.
//                          Other keys ("name") are ignored. Errors name the element:
//                          "messages[2].role", "messages[0].content[1].type".
//   max_completion_tokens  preferred over max_tokens when both are given; both >= 1; default
//   | max_tokens           null = the rest of the context (vLLM)
//   logprobs               bool (false)
//   top_logprobs           0..20, only with logprobs: true; sampling.logprobs = top_logprobs (or 0)
//   add_generation_prompt  bool (true), vLLM's extension
//   tools, tool_choice, parallel_tool_calls
//                          tool_request.h
// Unknown fields are ignored. Plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/protocol/api_error.h"
#include "server/protocol/chat_template.h"
#include "server/protocol/sampling_fields.h"
#include "server/protocol/tool_request.h"

namespace tinyserve::protocol {

struct ChatRequest {
  std::optional<std::string> model;
  std::vector<ChatMessage> messages;  // non-empty
  bool logprobs = false;
  std::optional<int32_t> top_logprobs;
  bool add_generation_prompt = true;
  SamplingFields sampling;  // sampling.logprobs set from logprobs/top_logprobs
  ToolFields tool_fields;
};

// Validates `body` (any JSON value). Returns the request or the first 400 found. `ordered_tools`:
// see ParseToolFields (OrderedToolsOf gives it).
ApiErrorOr<ChatRequest> ParseChatRequest(const nlohmann::json& body, int32_t vocab_size,
                                         const nlohmann::ordered_json* ordered_tools = nullptr);
// Same from the raw body text (ParseJsonBody first).
ApiErrorOr<ChatRequest> ParseChatRequestBody(std::string_view body, int32_t vocab_size);
// body["tools"] of the raw `body` text parsed keeping key order, or null when `parsed` (the same
// text) has no non-empty tools array.
nlohmann::ordered_json OrderedToolsOf(const nlohmann::json& parsed, std::string_view body);

}  // namespace tinyserve::protocol
