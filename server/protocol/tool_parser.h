// ToolCallParser: a completion's text -> the tool calls in it and the content around them, for
// chat requests with tools (vLLM's tool parsers, by vLLM's --tool-call-parser names). The same
// parser serves a stream (Feed each text delta, then Finish) and a whole response
// (ParseToolCalls), so both give the same calls and content.
//
// Formats (whitespace around a call is part of the call; text the parser cannot read as a call
// stays content, byte for byte):
//   hermes       <tool_call>{"name": NAME, "arguments": {...}}</tool_call>, any number, anywhere;
//                an unclosed last block counts if its JSON is complete (vLLM). Qwen2.5, Hermes and
//                the generic preamble of tool_templates.h.
//   llama3_json  the output (after whitespace and an optional <|python_tag|>) starts with
//                {"name": NAME, "parameters" | "arguments": {...}}; more calls may follow, each
//                after an optional ";". Llama 3.1 / 3.2. An output that starts otherwise is
//                content.
//   mistral      [TOOL_CALLS] [{"name": NAME, "arguments": {...} | "<json object>"}, ...] after any
//                content; the array alone also counts at the start of the output (the detokenizer
//                drops the special token). Mistral.
// Calls are read front to back: a hermes block or mistral array that does not parse is content
// and reading goes on; in llama3_json the first thing that is not a call ends the calls and the
// rest is content. Each call is complete before it is returned: its `arguments` is the JSON text
// of the object (compact, keys in the model's order). With parallel_tool_calls false only the
// first call is returned; the text of later ones is consumed and dropped, as OpenAI returns at
// most one call then.
// Ids: "call_" + 24 characters of [A-Za-z0-9] (mistral: 9, what its template requires), drawn
// from a hash of (id_seed, call index), so they are unique per request (the seed holds the
// request id) and tests can pin them.
// Single-owner (one per choice).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/protocol/tool_spec.h"

namespace tinyserve::protocol {

enum class ToolParserKind { kHermes, kLlama3Json, kMistral };

// "hermes", "llama3_json", "mistral".
std::string_view ToolParserName(ToolParserKind kind);
const std::vector<std::string>& KnownToolParsers();
std::optional<ToolParserKind> ToolParserFromName(std::string_view name);
// llama-3.1, llama-3.2 -> llama3_json; mistral -> mistral; every other template -> hermes.
ToolParserKind DefaultToolParserFor(std::string_view chat_template);

// The id of call `index` (above).
std::string ToolCallId(ToolParserKind kind, std::string_view id_seed, int32_t index);

struct ToolParseDelta {
  std::string content;              // new content text
  std::vector<ChatToolCall> calls;  // new complete calls (their indices follow the earlier ones)
};

class ToolCallParser {
 public:
  ToolCallParser(ToolParserKind kind, bool parallel_tool_calls, std::string id_seed);

  // Consumes the next piece of the completion text.
  ToolParseDelta Feed(std::string_view text);
  // The completion ended: whatever is held back is resolved. Call once, after the last Feed.
  ToolParseDelta Finish();

  const std::vector<ChatToolCall>& calls() const { return calls_; }  // all so far
  const std::string& content() const { return content_; }            // all content so far

 private:
  enum class State { kStart, kContent, kInBlock, kJsonSequence, kArray };

  void Process(bool at_end, ToolParseDelta* out);
  // Each returns false when it needs more text (and !at_end).
  bool StepStart(bool at_end);
  bool StepContent(bool at_end, ToolParseDelta* out);
  bool StepInBlock(bool at_end, ToolParseDelta* out);
  bool StepJsonSequence(bool at_end, ToolParseDelta* out);
  bool StepArray(bool at_end, ToolParseDelta* out);
  void EmitContent(std::string_view text, ToolParseDelta* out);
  void AddCall(std::string name, std::string arguments, ToolParseDelta* out);

  const ToolParserKind kind_;
  const bool parallel_;
  const std::string id_seed_;
  State state_;
  std::string buf_;          // text not yet resolved
  std::string opener_;       // the text that opened the current block (content if it fails)
  bool skip_space_ = false;  // drop whitespace at the start of the next content (after a call)
  int32_t num_parsed_ = 0;   // calls read, returned or dropped
  std::vector<ChatToolCall> calls_;
  std::string content_;
};

// Feed(text) and Finish() of a fresh parser, merged.
ToolParseDelta ParseToolCalls(ToolParserKind kind, bool parallel_tool_calls,
                              std::string_view id_seed, std::string_view text);

}  // namespace tinyserve::protocol
