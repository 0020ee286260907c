// Response and stream-chunk JSON of /v1/completions and /v1/chat/completions (vLLM's shapes, keys
// in vLLM's order), and SSE framing.
//
//   text_completion         {"id": "cmpl-…", "object": "text_completion", "created", "model",
//                            "choices": [{"index", "text", "logprobs", "finish_reason",
//                            "stop_reason"[, "prompt_logprobs"]}], "usage": {"prompt_tokens",
//                            "total_tokens", "completion_tokens"}}
//   its stream chunk        the same object with one choice (finish_reason null until the last
//                            chunk of that choice) and no usage, unless continuous usage is asked
//   chat.completion         {"id": "chatcmpl-…", "object": "chat.completion", "created", "model",
//                            "choices": [{"index", "message": {"role": "assistant", "content"[,
//                            "tool_calls": [{"id", "type": "function", "function": {"name",
//                            "arguments"}}]]},
//                            "logprobs", "finish_reason", "stop_reason"}], "usage"[,
//                            "prompt_logprobs"]}
//   chat.completion.chunk   choices [{"index", "delta", "logprobs", "finish_reason"}]: first a
//                            role chunk (delta {"role": "assistant", "content": ""}), then content
//                            chunks (delta {"content": …}), then a finish chunk (delta {},
//                            finish_reason, stop_reason)
//   usage chunk             (include_usage) "choices": [] and "usage", after every choice finished
// finish_reason: "stop" | "length" | "abort" | "error" | "tool_calls" (null while running);
// stop_reason: null, the stop token id (int) that ended it, or the stop string (vLLM). For n > 1
// and several prompts, choice index = prompt_index * n + sample_index. A stream is a sequence of
// SseData(chunk) and ends with SseDone(). Only the fields above are sent: vLLM's always-empty
// extras (an empty message.tool_calls, reasoning_content, system_fingerprint) and a null
// prompt_logprobs are left out; OpenAI clients treat them as optional. Pure functions (NewRequestId
// draws random bits).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/events.h"
#include "server/protocol/tool_spec.h"

namespace tinyserve::protocol {

// Identifies one response and all of its stream chunks.
struct ResponseMeta {
  std::string id;       // "cmpl-<32 hex>" or "chatcmpl-<32 hex>"
  int64_t created = 0;  // Unix seconds when the request arrived
  std::string model;    // the served model name
};

struct Usage {
  int32_t prompt_tokens = 0;      // all prompts' tokens, once each (not times n)
  int32_t completion_tokens = 0;  // generated tokens of every choice

  friend bool operator==(const Usage&, const Usage&) = default;
};

// Why a choice stopped beyond finish_reason: nothing (EOS, length), a stop token id, or a string.
using StopReason = std::variant<std::monostate, int32_t, std::string>;

struct CompletionChoice {
  int32_t index = 0;
  std::string text;
  nlohmann::ordered_json logprobs = nullptr;  // CompletionLogprobsJson, or null
  FinishReason finish_reason = FinishReason::kNone;
  StopReason stop_reason;
  // PromptLogprobsJson when the engine scored the prompt (the request's prompt_logprobs, or echo
  // with logprobs), else null and left out. Never in stream chunks (vLLM).
  nlohmann::ordered_json prompt_logprobs = nullptr;
};

struct ChatChoice {
  int32_t index = 0;
  std::string content;                   // null in the message when empty and there are tool calls
  std::vector<ChatToolCall> tool_calls;  // message.tool_calls when not empty
  nlohmann::ordered_json logprobs = nullptr;  // ChatLogprobsJson, or null
  FinishReason finish_reason = FinishReason::kNone;
  StopReason stop_reason;
};

// prefix + 32 random lowercase hex digits ("cmpl-", "chatcmpl-"). Thread-safe.
std::string NewRequestId(std::string_view prefix);

// index = prompt_index * n + sample_index (vLLM). REQUIRES: 0 <= sample_index < n.
int32_t ChoiceIndex(int32_t prompt_index, int32_t n, int32_t sample_index);

nlohmann::ordered_json UsageJson(const Usage& usage);
// "stop", "length", ...; null for kNone.
nlohmann::ordered_json FinishReasonJson(FinishReason reason);
nlohmann::ordered_json StopReasonJson(const StopReason& reason);

// Completions.
nlohmann::ordered_json CompletionResponseJson(const ResponseMeta& meta,
                                              const std::vector<CompletionChoice>& choices,
                                              const Usage& usage);
nlohmann::ordered_json CompletionChunkJson(const ResponseMeta& meta, const CompletionChoice& choice,
                                           const std::optional<Usage>& usage = std::nullopt);
nlohmann::ordered_json CompletionUsageChunkJson(const ResponseMeta& meta, const Usage& usage);

// Chat.
// prompt_logprobs (PromptLogprobsJson of the one prompt, for the request's prompt_logprobs) goes
// after usage when not null, as in vLLM's ChatCompletionResponse.
nlohmann::ordered_json ChatResponseJson(const ResponseMeta& meta,
                                        const std::vector<ChatChoice>& choices, const Usage& usage,
                                        const nlohmann::ordered_json& prompt_logprobs = nullptr);
nlohmann::ordered_json ChatRoleChunkJson(const ResponseMeta& meta, int32_t index);
nlohmann::ordered_json ChatContentChunkJson(const ResponseMeta& meta, int32_t index,
                                            const std::string& content,
                                            const nlohmann::ordered_json& logprobs = nullptr,
                                            const std::optional<Usage>& usage = std::nullopt);
// `had_tool_calls`: the choice's finish_reason is "tool_calls" (ChatFinishReasonJson).
nlohmann::ordered_json ChatFinishChunkJson(const ResponseMeta& meta, int32_t index,
                                           FinishReason finish_reason,
                                           const StopReason& stop_reason,
                                           const std::optional<Usage>& usage = std::nullopt,
                                           bool had_tool_calls = false);
// A tool call's stream deltas (OpenAI's shape): the first, with `header`, is {"tool_calls":
// [{"index": call_index, "id", "type": "function", "function": {"name", "arguments": ""}}]}; the
// next is {"tool_calls": [{"index": call_index, "function": {"arguments": ARGS}}]}.
nlohmann::ordered_json ChatToolCallChunkJson(const ResponseMeta& meta, int32_t index,
                                             int32_t call_index, const ChatToolCall& call,
                                             bool header);
// "tool_calls" when `had_tool_calls` and the choice ended by stop or length (vLLM), else
// FinishReasonJson(reason).
nlohmann::ordered_json ChatFinishReasonJson(FinishReason reason, bool had_tool_calls);
nlohmann::ordered_json ChatUsageChunkJson(const ResponseMeta& meta, const Usage& usage);

// SSE framing: "data: <compact json>\n\n" (invalid UTF-8 replaced by U+FFFD, never thrown) and
// the stream's end "data: [DONE]\n\n". A keep-alive comment is kSsePing.
std::string SseData(const nlohmann::ordered_json& chunk);
std::string SseDone();
inline constexpr std::string_view kSsePing = ": ping\n\n";

// chunk.dump() that never throws: invalid UTF-8 becomes U+FFFD.
std::string DumpJson(const nlohmann::ordered_json& value);

}  // namespace tinyserve::protocol
