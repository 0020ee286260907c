// Tool calling values shared by the request parser, the chat templates and the output parser:
// the tools a request offers, its tool_choice, and tool calls (an assistant message's, or parsed
// from a completion), plus the JSON text the published chat templates write for them.
//
// - ChatTool keeps the tool as vLLM hands it to a template (pydantic's model_dump of
//   ChatCompletionToolsParam): {"type": "function", "function": {"name", "description",
//   "parameters", then any other keys of the request's function object in their order}}, with
//   null for an absent description or parameters; `parameters` keeps the request's key order.
// - PythonJsonDumps(v, indent) is Python's json.dumps(v, ensure_ascii=False[, indent=indent]), as
//   Jinja's `tojson` in transformers' chat templates writes it: ", " and ": " between items
//   without an indent, "," and newlines of `indent` spaces with one (indent < 0: none).
// Plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tinyserve::protocol {

struct ChatTool {
  std::string name;             // [a-zA-Z0-9_-]{1,64}
  nlohmann::ordered_json json;  // {"type": "function", "function": {...}} (above)
  nlohmann::ordered_json parameters = nlohmann::ordered_json::object();  // JSON Schema object

  friend bool operator==(const ChatTool&, const ChatTool&) = default;
};

struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text of an object

  friend bool operator==(const ChatToolCall&, const ChatToolCall&) = default;
};

struct ToolChoice {
  enum class Kind { kNone, kAuto, kRequired, kFunction };
  Kind kind = Kind::kAuto;
  std::string function;  // kFunction: the named tool

  friend bool operator==(const ToolChoice&, const ToolChoice&) = default;
};

// Returns true iff `name` matches OpenAI's function name rule [a-zA-Z0-9_-]{1,64}.
bool IsValidToolName(std::string_view name);

std::string PythonJsonDumps(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace tinyserve::protocol
