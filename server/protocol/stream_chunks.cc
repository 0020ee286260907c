#include "server/protocol/stream_chunks.h"

#include <cassert>
#include <charconv>
#include <variant>

#include "server/protocol/utf8.h"

namespace tinyserve::protocol {
namespace {

void AppendInt(int64_t value, std::string* out) {
  char buf[24];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  out->append(buf, result.ptr);
}

bool NeedsEscape(unsigned char c) { return c < 0x20 || c == '"' || c == '\\'; }

void AppendFinishReason(FinishReason reason, std::string* out) {
  if (reason == FinishReason::kNone) {
    out->append("null");
    return;
  }
  AppendJsonString(FinishReasonName(reason), out);
}

void AppendStopReason(const StopReason& reason, std::string* out) {
  if (const auto* id = std::get_if<int32_t>(&reason)) {
    AppendInt(*id, out);
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

void AppendJsonString(std::string_view text, std::string* out) {
  bool ascii = true;
  for (const char ch : text) {
    if (static_cast<unsigned char>(ch) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (!ascii && !IsValidUtf8(text)) {
    out->append(DumpJson(nlohmann::ordered_json(std::string(text))));  // nlohmann's U+FFFD rule
    return;
  }
  out->push_back('"');
  size_t run = 0;  // start of the bytes not yet appended
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (!NeedsEscape(c)) continue;
    out->append(text.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        const char escaped[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
        out->append(escaped, sizeof(escaped));
        break;
      }
    }
  }
  out->append(text.data() + run, text.size() - run);
  out->push_back('"');
}

StreamChunks::StreamChunks(const ResponseMeta& meta, Kind kind) : kind_(kind) {
  prefix_ = "data: {\"id\":";
  AppendJsonString(meta.id, &prefix_);
  prefix_ += kind == Kind::kCompletion ? R"(,"object":"text_completion","created":)"
                                       : R"(,"object":"chat.completion.chunk","created":)";
  AppendInt(meta.created, &prefix_);
  prefix_ += ",\"model\":";
  AppendJsonString(meta.model, &prefix_);
  prefix_ += ",\"choices\":[";
}

void StreamChunks::AppendTail(const std::optional<Usage>& usage, std::string* out) {
  if (usage) {
    out->append(R"(,"usage":{"prompt_tokens":)");
    AppendInt(usage->prompt_tokens, out);
    out->append(R"(,"total_tokens":)");
    AppendInt(static_cast<int64_t>(usage->prompt_tokens) + usage->completion_tokens, out);
    out->append(R"(,"completion_tokens":)");
    AppendInt(usage->completion_tokens, out);
    out->push_back('}');
  }
  out->append("}\n\n");
}

void StreamChunks::AppendCompletionChunk(const CompletionChoice& choice,
                                         const std::optional<Usage>& usage,
                                         std::string* out) const {
  assert(kind_ == Kind::kCompletion);
  out->append(prefix_);
  out->append(R"({"index":)");
  AppendInt(choice.index, out);
  out->append(R"(,"text":)");
  AppendJsonString(choice.text, out);
  out->append(R"(,"logprobs":)");
  AppendJson(choice.logprobs, out);
  out->append(R"(,"finish_reason":)");
  AppendFinishReason(choice.finish_reason, out);
  out->append(R"(,"stop_reason":)");
  AppendStopReason(choice.stop_reason, out);
  out->append("}]");
  AppendTail(usage, out);
}

void StreamChunks::AppendChatRoleChunk(int32_t index, std::string* out) const {
  assert(kind_ == Kind::kChat);
  out->append(prefix_);
  out->append(R"({"index":)");
  AppendInt(index, out);
  out->append(
      R"(,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}])");
  AppendTail(std::nullopt, out);
}

void StreamChunks::AppendChatContentChunk(int32_t index, std::string_view content,
                                          const nlohmann::ordered_json& logprobs,
                                          const std::optional<Usage>& usage,
                                          std::string* out) const {
  assert(kind_ == Kind::kChat);
  out->append(prefix_);
  out->append(R"({"index":)");
  AppendInt(index, out);
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
  out->append(prefix_);
  out->append(R"({"index":)");
  AppendInt(index, out);
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
