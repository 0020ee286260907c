// StreamChunks must write exactly the bytes of SseData(<the JSON builder>) (its contract): checked
// over a catalogue of awkward strings and over random ones.
#include "server/protocol/stream_chunks.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace tinyserve::protocol {
namespace {

using Json = nlohmann::ordered_json;

std::string Expected(const Json& value) { return DumpJson(value); }

std::string Written(std::string_view text) {
  std::string out;
  AppendJsonString(text, &out);
  return out;
}

// Strings that exercise every escape rule and the invalid-UTF-8 fallback.
std::vector<std::string> Catalogue() {
  std::vector<std::string> out = {
      "",
      "Once upon a time",
      " there",
      "\"quoted\" and \\backslash\\",
      "line\nbreak\r\n\ttab\b\f",
      std::string("nul\0inside", 10),
      "\x01\x02\x1e\x1f\x7f",
      "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80",  // é € 😀
      "\xEF\xBF\xBD",                               // U+FFFD itself
      "\xC3",                                       // truncated 2-byte sequence
      "a\x80z",                                     // lone continuation byte
      "\xED\xA0\x80",                               // a surrogate (invalid in UTF-8)
      "\xF4\x90\x80\x80",                           // above U+10FFFF
      "\xC0\xAF",                                   // overlong
      "ok \xE2\x82 then \xF0\x9F\x98",              // two incomplete sequences
      "</script>\u2028\u2029",
  };
  for (int c = 0; c < 0x20; ++c) out.push_back(std::string(1, static_cast<char>(c)) + "x");
  return out;
}

TEST(StreamChunksTest, JsonStringEqualsNlohmannDump) {
  for (const std::string& s : Catalogue()) {
    EXPECT_EQ(Written(s), Expected(Json(s))) << "input bytes: " << Json(s).dump(-1, ' ', true);
  }
}

TEST(StreamChunksTest, JsonStringEqualsNlohmannDumpOnRandomBytes) {
  std::mt19937 rng(12345);
  // Mostly text-like bytes, with control, quote, backslash and high bytes mixed in.
  const std::string alphabet = std::string("abc \"\\\n\t\x01\x1f\x7f", 12) +
                               "\xC3\xA9\xE2\x82\xAC" + "\xF0\x9F\x98\x80\x80\xBF\xC0\xFF\xED";
  std::uniform_int_distribution<size_t> len(0, 24);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    const size_t n = len(rng);
    for (size_t k = 0; k < n; ++k) s.push_back(alphabet[pick(rng)]);
    ASSERT_EQ(Written(s), Expected(Json(s))) << "case " << i;
  }
}

// Metas whose id and model need escaping too.
std::vector<ResponseMeta> Metas(const std::string& prefix) {
  return {{prefix + "0123456789abcdef0123456789abcdef", 1700000000, "stories260K"},
          {prefix + "1", 0, "odd \"model\"\n\xC3\xA9"},
          {prefix + "2", 4102444800, "bad \xFF utf8"}};
}

std::vector<std::optional<Usage>> Usages() { return {std::nullopt, Usage{0, 0}, Usage{5, 17}}; }

std::vector<StopReason> StopReasons() {
  return {StopReason{}, StopReason{int32_t{2}}, StopReason{int32_t{-1}},
          StopReason{std::string("\n\nThe")}, StopReason{std::string("\"")}};
}

const FinishReason kFinishReasons[] = {FinishReason::kNone, FinishReason::kStop,
                                       FinishReason::kLength, FinishReason::kAbort,
                                       FinishReason::kError};

Json SomeLogprobs() {
  Json out;
  out["text_offset"] = Json::array({0, 3});
  out["token_logprobs"] = Json::array({-0.25, -9999.0});
  out["tokens"] = Json::array({"Hel", "\"lo\""});
  out["top_logprobs"] = Json::array({Json{{"Hel", -0.25}}, Json{{"\"lo\"", -9999.0}}});
  return out;
}

TEST(StreamChunksTest, CompletionChunksEqualTheJsonBuilders) {
  int checked = 0;
  for (const ResponseMeta& meta : Metas("cmpl-")) {
    const StreamChunks chunks(meta, StreamChunks::Kind::kCompletion);
    for (const std::string& text : Catalogue()) {
      for (const int32_t index : {0, 7, 123456}) {
        for (const FinishReason finish : kFinishReasons) {
          for (const StopReason& stop : StopReasons()) {
            for (const auto& usage : Usages()) {
              for (const bool logprobs : {false, true}) {
                CompletionChoice choice{index, text, logprobs ? SomeLogprobs() : Json(nullptr),
                                        finish, stop};
                std::string out = "kept|";
                chunks.AppendCompletionChunk(choice, usage, &out);
                ASSERT_EQ(out, "kept|" + SseData(CompletionChunkJson(meta, choice, usage)));
                ++checked;
              }
            }
          }
        }
      }
    }
    for (const auto& usage : Usages()) {
      if (!usage) continue;
      std::string out;
      chunks.AppendUsageChunk(*usage, &out);
      EXPECT_EQ(out, SseData(CompletionUsageChunkJson(meta, *usage)));
    }
  }
  EXPECT_GT(checked, 10000);
}

TEST(StreamChunksTest, ChatChunksEqualTheJsonBuilders) {
  for (const ResponseMeta& meta : Metas("chatcmpl-")) {
    const StreamChunks chunks(meta, StreamChunks::Kind::kChat);
    for (const int32_t index : {0, 3, 99999}) {
      std::string out;
      chunks.AppendChatRoleChunk(index, &out);
      ASSERT_EQ(out, SseData(ChatRoleChunkJson(meta, index)));
      for (const auto& usage : Usages()) {
        for (const std::string& text : Catalogue()) {
          for (const bool logprobs : {false, true}) {
            const Json lp = logprobs ? SomeLogprobs() : Json(nullptr);
            out.clear();
            chunks.AppendChatContentChunk(index, text, lp, usage, &out);
            ASSERT_EQ(out, SseData(ChatContentChunkJson(meta, index, text, lp, usage)));
          }
        }
        for (const FinishReason finish : kFinishReasons) {
          for (const StopReason& stop : StopReasons()) {
            out.clear();
            chunks.AppendChatFinishChunk(index, finish, stop, usage, &out);
            ASSERT_EQ(out, SseData(ChatFinishChunkJson(meta, index, finish, stop, usage)));
          }
        }
        if (usage) {
          out.clear();
          chunks.AppendUsageChunk(*usage, &out);
          ASSERT_EQ(out, SseData(ChatUsageChunkJson(meta, *usage)));
        }
      }
    }
  }
}

// One exact chunk, so that a change to both sides of the equality above cannot go unnoticed.
TEST(StreamChunksTest, ExactCompletionChunk) {
  const StreamChunks chunks({"cmpl-1", 1700000000, "stories"}, StreamChunks::Kind::kCompletion);
  std::string out;
  chunks.AppendCompletionChunk({3, "Hel\"\n", nullptr, FinishReason::kNone, {}}, Usage{1, 2}, &out);
  EXPECT_EQ(out,
            "data: "
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
            R"("choices":[{"index":3,"text":"Hel\"\n","logprobs":null,"finish_reason":null,)"
            R"("stop_reason":null}],"usage":{"prompt_tokens":1,"total_tokens":3,)"
            R"("completion_tokens":2}})"
            "\n\n");
}

}  // namespace
}  // namespace tinyserve::protocol
