// The tool-calling fields of a chat request, validated (OpenAI's and vLLM's rules). Each bad value
// is a 400 whose param names the field ("tools[1].function.name", "tool_choice",
// "messages[2].tool_calls[0].function.arguments").
//
//   tools                absent, null or an array (at most kMaxTools) of {"type": "function",
//                        "function": {"name": [a-zA-Z0-9_-]{1,64}, unique; "description": string
//                        (optional); "parameters": a JSON Schema object (optional, default {});
//                        "strict": bool (optional)}}
//   tool_choice          "none" | "auto" | "required" | {"type": "function", "function":
//                        {"name": a listed tool}}; default "auto" with tools, "none" without;
//                        anything but "none" needs a non-empty `tools`
//   parallel_tool_calls  bool (true)
// Messages (ParseToolMessageFields, for chat_request.cc): an assistant message may carry
// "tool_calls": [{"id": string, "type": "function", "function": {"name": string, "arguments":
// a string holding a JSON object}}] (its content may then be null or absent); a "tool" message
// needs "tool_call_id" (a string) and a content. Plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/protocol/api_error.h"
#include "server/protocol/chat_template.h"
#include "server/protocol/tool_spec.h"

namespace tinyserve::protocol {

inline constexpr size_t kMaxTools = 128;

struct ToolFields {
  std::vector<ChatTool> tools;
  ToolChoice tool_choice;  // after defaults: kNone when there are no tools
  bool parallel_tool_calls = true;

  // Returns true iff the completion is parsed for tool calls (tools given, tool_choice not none).
  bool parses_tool_calls() const {
    return !tools.empty() && tool_choice.kind != ToolChoice::Kind::kNone;
  }
};

// Reads tools, tool_choice and parallel_tool_calls of `body` (REQUIRES: a JSON object).
// `ordered_tools` is body["tools"] from an order-keeping parse of the same text (its key order is
// what the templates write, as vLLM's Python dicts keep it), or null: keys then come sorted.
std::optional<ApiError> ParseToolFields(const nlohmann::json& body,
                                        const nlohmann::ordered_json* ordered_tools,
                                        ToolFields* out);

// Reads message `m`'s (REQUIRES: an object whose role is already in message->role) tool_calls
// (assistant) or tool_call_id (tool); `path` is "messages[i]".
std::optional<ApiError> ParseToolMessageFields(const nlohmann::json& m, const std::string& path,
                                               ChatMessage* message);

}  // namespace tinyserve::protocol
