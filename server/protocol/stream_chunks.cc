#include "server/protocol/stream_chunks.h"

#include <cassert>
#include <variant>

#include "base/json_writer.h"

namespace tinyserve::protocol {
namespace {

void AppendFinishReason(FinishReason reason, std::string* out) {
  if (reason == FinishReason::kNone) {
    out->append("null");
    return;
  }
  AppendJsonString(FinishReasonName(reason), out);
}

void AppendStopReason(const StopReason& reason, std::string* out) {
  if (const auto* id = std::get_if<int32_t>(&reason)) {
    AppendJsonInt(*id, out);
  } else if (const auto* text = std::get_if<std::string>(&reason)) {
    AppendJsonString(*text, out);
  } else {
    out->append("null");
  }
}

void AppendJson(const nlohmann::ordered_json& value, std::string* out) {
  if (value.is_null()) {
    out->append("null");
  } else {
    out->append(DumpJson(value));
  }
}

}  // namespace

StreamChunks::StreamChunks(const ResponseMeta& meta, Kind kind) : kind_(kind) {
  prefix_ = "data: {\"id\":";
  AppendJsonString(meta.id, &prefix_);
  prefix_ += kind == Kind::kCompletion ? R"(,"object":"text_completion","created":)"
                                       : R"(,"object":"chat.completion.chunk","created":)";
  AppendJsonInt(meta.created, &prefix_);
  prefix_ += ",\"model\":";
  AppendJsonString(meta.model, &prefix_);
  prefix_ += ",\"choices\":[";
}

void StreamChunks::AppendHead(int32_t index, std::string* out) const {
  out->append(prefix_);
  out->append(R"({"index":)");
  AppendJsonInt(index, out);
}

void StreamChunks::AppendTail(const std::optional<Usage>& usage, std::string* out) {
  if (usage) {
    out->append(R"(,"usage":{"prompt_tokens":)");
    AppendJsonInt(usage->prompt_tokens, out);
    out->append(R"(,"total_tokens":)");
    AppendJsonInt(static_cast<int64_t>(usage->prompt_tokens) + usage->completion_tokens, out);
    out->append(R"(,"completion_tokens":)");
    AppendJsonInt(usage->completion_tokens, out);
    out->push_back('}');
  }
  out->append("}\n\n");
}

void StreamChunks::AppendCompletionChunk(const CompletionChoice& choice,
                                         const std::optional<Usage>& usage, std::string* out,
                                         std::string_view logprobs_json) const {
  assert(kind_ == Kind::kCompletion);
  AppendHead(choice.index, out);
  out->append(R"(,"text":)");
  AppendJsonString(choice.text, out);
  out->append(R"(,"logprobs":)");
  if (logprobs_json.empty()) {
    AppendJson(choice.logprobs, out);
  } else {
    out->append(logprobs_json);
  }
  out->append(R"(,"finish_reason":)");
  AppendFinishReason(choice.finish_reason, out);
  out->append(R"(,"stop_reason":)");
  AppendStopReason(choice.stop_reason, out);
  out->append("}]");
  AppendTail(usage, out);
}

void StreamChunks::AppendChatRoleChunk(int32_t index, std::string* out) const {
  assert(kind_ == Kind::kChat);
  AppendHead(index, out);
  out->append(
      R"(,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}])");
  AppendTail(std::nullopt, out);
}

void StreamChunks::AppendChatContentChunk(int32_t index, std::string_view content,
                                          const nlohmann::ordered_json& logprobs,
                                          const std::optional<Usage>& usage,
                                          std::string* out) const {
  assert(kind_ == Kind::kChat);
  AppendHead(index, out);
  out->append(R"(,"delta":{"content":)");
  AppendJsonString(content, out);
  out->append(R"(},"logprobs":)");
  AppendJson(logprobs, out);
  out->append(R"(,"finish_reason":null}])");
  AppendTail(usage, out);
}

void StreamChunks::AppendChatFinishChunk(int32_t index, FinishReason finish_reason,
                                         const StopReason& stop_reason,
                                         const std::optional<Usage>& usage,
                                         std::string* out) const {
  assert(kind_ == Kind::kChat);
  AppendHead(index, out);
  out->append(R"(,"delta":{},"logprobs":null,"finish_reason":)");
  AppendFinishReason(finish_reason, out);
  out->append(R"(,"stop_reason":)");
  AppendStopReason(stop_reason, out);
  out->append("}]");
  AppendTail(usage, out);
}

void StreamChunks::AppendUsageChunk(const Usage& usage, std::string* out) const {
  out->append(prefix_);
  out->push_back(']');
  AppendTail(usage, out);
}

}  // namespace tinyserve::protocol
