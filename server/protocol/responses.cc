#include "server/protocol/responses.h"

#include <atomic>
#include <cassert>
#include <random>

namespace tinyserve::protocol {
namespace {

using Json = nlohmann::ordered_json;

Json Header(const ResponseMeta& meta, const char* object) {
  Json out;
  out["id"] = meta.id;
  out["object"] = object;
  out["created"] = meta.created;
  out["model"] = meta.model;
  return out;
}

Json ChatChunk(const ResponseMeta& meta, Json choice, const std::optional<Usage>& usage) {
  Json out = Header(meta, "chat.completion.chunk");
  out["choices"] = Json::array({std::move(choice)});
  if (usage) out["usage"] = UsageJson(*usage);
  return out;
}

}  // namespace

std::string NewRequestId(std::string_view prefix) {
  // Each thread's generator gets 128 bits of seed (one 32-bit random_device draw gives two of
  // 2,000 handler threads the same sequence with a chance of about 1 in 2,000, and the engine
  // refuses a second live request of the same id: a 500), and the first half is mixed with a count
  // of the process's ids (times an odd constant: a bijection), so two ids of one process differ.
  thread_local std::mt19937_64 rng = [] {
    std::random_device rd;
    std::seed_seq seed{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seed);
  }();
  static std::atomic<uint64_t> count{0};
  const uint64_t serial = count.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int half = 0; half < 2; ++half) {
    uint64_t bits = rng() ^ (half == 0 ? serial : 0);
    for (int i = 0; i < 16; ++i) {
      id.push_back(kHex[bits & 0xF]);
      bits >>= 4;
    }
  }
  return id;
}

int32_t ChoiceIndex(int32_t prompt_index, int32_t n, int32_t sample_index) {
  assert(sample_index >= 0 && sample_index < n);
  return prompt_index * n + sample_index;
}

Json UsageJson(const Usage& usage) {
  Json out;
  out["prompt_tokens"] = usage.prompt_tokens;
  out["total_tokens"] = int64_t{usage.prompt_tokens} + usage.completion_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  return out;
}

Json FinishReasonJson(FinishReason reason) {
  if (reason == FinishReason::kNone) return nullptr;
  return FinishReasonName(reason);
}

Json StopReasonJson(const StopReason& reason) {
  if (const auto* id = std::get_if<int32_t>(&reason)) return *id;
  if (const auto* text = std::get_if<std::string>(&reason)) return *text;
  return nullptr;
}

namespace {

Json CompletionChoiceJson(const CompletionChoice& c) {
  Json out;
  out["index"] = c.index;
  out["text"] = c.text;
  out["logprobs"] = c.logprobs;
  out["finish_reason"] = FinishReasonJson(c.finish_reason);
  out["stop_reason"] = StopReasonJson(c.stop_reason);
  if (!c.prompt_logprobs.is_null()) out["prompt_logprobs"] = c.prompt_logprobs;
  return out;
}

}  // namespace

Json CompletionResponseJson(const ResponseMeta& meta, const std::vector<CompletionChoice>& choices,
                            const Usage& usage) {
  Json out = Header(meta, "text_completion");
  out["choices"] = Json::array();
  for (const auto& c : choices) out["choices"].push_back(CompletionChoiceJson(c));
  out["usage"] = UsageJson(usage);
  return out;
}

Json CompletionChunkJson(const ResponseMeta& meta, const CompletionChoice& choice,
                         const std::optional<Usage>& usage) {
  Json out = Header(meta, "text_completion");
  out["choices"] = Json::array({CompletionChoiceJson(choice)});
  if (usage) out["usage"] = UsageJson(*usage);
  return out;
}

Json CompletionUsageChunkJson(const ResponseMeta& meta, const Usage& usage) {
  Json out = Header(meta, "text_completion");
  out["choices"] = Json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

Json ChatResponseJson(const ResponseMeta& meta, const std::vector<ChatChoice>& choices,
                      const Usage& usage, const Json& prompt_logprobs) {
  Json out = Header(meta, "chat.completion");
  out["choices"] = Json::array();
  for (const auto& c : choices) {
    Json choice;
    choice["index"] = c.index;
    Json message{{"role", "assistant"}, {"content", c.content}};
    if (!c.tool_calls.empty()) {
      if (c.content.empty()) message["content"] = nullptr;
      Json calls = Json::array();
      for (const ChatToolCall& call : c.tool_calls) {
        calls.push_back(
            Json{{"id", call.id},
                 {"type", "function"},
                 {"function", Json{{"name", call.name}, {"arguments", call.arguments}}}});
      }
      message["tool_calls"] = std::move(calls);
    }
    choice["message"] = std::move(message);
    choice["logprobs"] = c.logprobs;
    choice["finish_reason"] = ChatFinishReasonJson(c.finish_reason, !c.tool_calls.empty());
    choice["stop_reason"] = StopReasonJson(c.stop_reason);
    out["choices"].push_back(std::move(choice));
  }
  out["usage"] = UsageJson(usage);
  if (!prompt_logprobs.is_null()) out["prompt_logprobs"] = prompt_logprobs;
  return out;
}

Json ChatRoleChunkJson(const ResponseMeta& meta, int32_t index) {
  Json choice;
  choice["index"] = index;
  choice["delta"] = Json{{"role", "assistant"}, {"content", ""}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return ChatChunk(meta, std::move(choice), std::nullopt);
}

Json ChatContentChunkJson(const ResponseMeta& meta, int32_t index, const std::string& content,
                          const Json& logprobs, const std::optional<Usage>& usage) {
  Json choice;
  choice["index"] = index;
  choice["delta"] = Json{{"content", content}};
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = nullptr;
  return ChatChunk(meta, std::move(choice), usage);
}

Json ChatFinishReasonJson(FinishReason reason, bool had_tool_calls) {
  if (had_tool_calls && (reason == FinishReason::kStop || reason == FinishReason::kLength)) {
    return "tool_calls";
  }
  return FinishReasonJson(reason);
}

Json ChatToolCallChunkJson(const ResponseMeta& meta, int32_t index, int32_t call_index,
                           const ChatToolCall& call, bool header) {
  Json entry;
  entry["index"] = call_index;
  if (header) {
    entry["id"] = call.id;
    entry["type"] = "function";
    entry["function"] = Json{{"name", call.name}, {"arguments", ""}};
  } else {
    entry["function"] = Json{{"arguments", call.arguments}};
  }
  Json choice;
  choice["index"] = index;
  choice["delta"] = Json{{"tool_calls", Json::array({std::move(entry)})}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return ChatChunk(meta, std::move(choice), std::nullopt);
}

Json ChatFinishChunkJson(const ResponseMeta& meta, int32_t index, FinishReason finish_reason,
                         const StopReason& stop_reason, const std::optional<Usage>& usage,
                         bool had_tool_calls) {
  Json choice;
  choice["index"] = index;
  choice["delta"] = Json::object();
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = ChatFinishReasonJson(finish_reason, had_tool_calls);
  choice["stop_reason"] = StopReasonJson(stop_reason);
  return ChatChunk(meta, std::move(choice), usage);
}

Json ChatUsageChunkJson(const ResponseMeta& meta, const Usage& usage) {
  Json out = Header(meta, "chat.completion.chunk");
  out["choices"] = Json::array();
  out["usage"] = UsageJson(usage);
  return out;
}

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string SseData(const Json& chunk) { return "data: " + DumpJson(chunk) + "\n\n"; }

std::string SseDone() { return "data: [DONE]\n\n"; }

}  // namespace tinyserve::protocol
