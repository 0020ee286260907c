// StreamChunks: the SSE events of one streaming response, written straight into the output
// buffer without building a JSON tree. The per-token chunk is the hot path of streaming (one per
// stream per engine step, on the SSE writer thread), so the part every chunk of a response shares,
//   data: {"id":"…","object":"…","created":…,"model":"…","choices":[
// is made once, and each chunk appends its choice and its usage.
//
// Contract: every method appends exactly the bytes of SseData(<the matching builder of
// responses.h>) for the same arguments (compact JSON, keys in the same order, values written by
// json_writer.h). A logprobs object comes as an nlohmann value (dumped as it is) or, for the
// completion chunk, as its JSON text already written (AppendCompletionLogprobsJson).
// tests/protocol pin the equality over a catalogue and random inputs.
//
// Immutable after construction; thread-compatible.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/protocol/responses.h"

namespace tinyserve::protocol {

class StreamChunks {
 public:
  enum class Kind { kCompletion, kChat };

  StreamChunks(const ResponseMeta& meta, Kind kind);

  // SseData(CompletionChunkJson(meta, choice, usage)); with `logprobs_json` non-empty, that text
  // is the choice's logprobs (choice.logprobs is then not looked at). REQUIRES: kind kCompletion.
  void AppendCompletionChunk(const CompletionChoice& choice, const std::optional<Usage>& usage,
                             std::string* out, std::string_view logprobs_json = {}) const;
  // SseData(ChatRoleChunkJson(meta, index)). REQUIRES: kind kChat.
  void AppendChatRoleChunk(int32_t index, std::string* out) const;
  // SseData(ChatContentChunkJson(meta, index, content, logprobs, usage)). REQUIRES: kind kChat.
  void AppendChatContentChunk(int32_t index, std::string_view content,
                              const nlohmann::ordered_json& logprobs,
                              const std::optional<Usage>& usage, std::string* out) const;
  // SseData(ChatFinishChunkJson(meta, index, finish_reason, stop_reason, usage)). REQUIRES: kind
  // kChat.
  void AppendChatFinishChunk(int32_t index, FinishReason finish_reason,
                             const StopReason& stop_reason, const std::optional<Usage>& usage,
                             std::string* out) const;
  // SseData(CompletionUsageChunkJson(meta, usage)) or SseData(ChatUsageChunkJson(meta, usage)).
  void AppendUsageChunk(const Usage& usage, std::string* out) const;

 private:
  // `data: {…,"choices":[{"index":N`: every chunk's opening, up to its one choice's index.
  void AppendHead(int32_t index, std::string* out) const;
  // Appends `,"usage":{…}` if `usage` is set, then `}\n\n` (closes the chunk).
  static void AppendTail(const std::optional<Usage>& usage, std::string* out);

  Kind kind_;
  std::string prefix_;  // `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`
};

}  // namespace tinyserve::protocol
