#include "server/protocol/tool_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/protocol/responses.h"

namespace tinyserve::protocol {
namespace {

struct Parsed {
  std::string content;
  std::vector<ChatToolCall> calls;
};

// Feeds `text` in pieces of `piece` bytes (0: whole), as a stream of token texts would come.
Parsed Run(ToolParserKind kind, const std::string& text, size_t piece, bool parallel = true) {
  ToolCallParser parser(kind, parallel, "seed");
  Parsed out;
  auto take = [&](ToolParseDelta d) {
    out.content += d.content;
    for (auto& c : d.calls) out.calls.push_back(std::move(c));
  };
  if (piece == 0) piece = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += piece) take(parser.Feed(text.substr(i, piece)));
  take(parser.Finish());
  EXPECT_EQ(parser.content(), out.content);
  EXPECT_EQ(parser.calls(), out.calls);
  return out;
}

// Every piece size gives the same result.
Parsed RunAll(ToolParserKind kind, const std::string& text, bool parallel = true) {
  Parsed whole = Run(kind, text, 0, parallel);
  for (size_t piece : {1, 2, 3, 7}) {
    Parsed p = Run(kind, text, piece, parallel);
    EXPECT_EQ(p.content, whole.content) << "piece " << piece << " of " << text;
    EXPECT_EQ(p.calls, whole.calls) << "piece " << piece << " of " << text;
  }
  return whole;
}

ChatToolCall Call(ToolParserKind kind, int32_t index, std::string name, std::string args) {
  return {ToolCallId(kind, "seed", index), std::move(name), std::move(args)};
}

constexpr auto kHermes = ToolParserKind::kHermes;
constexpr auto kLlama = ToolParserKind::kLlama3Json;
constexpr auto kMistral = ToolParserKind::kMistral;

TEST(ToolParserTest, Names) {
  EXPECT_EQ(ToolParserFromName("hermes"), kHermes);
  EXPECT_EQ(ToolParserFromName("llama3_json"), kLlama);
  EXPECT_EQ(ToolParserFromName("mistral"), kMistral);
  EXPECT_FALSE(ToolParserFromName("llama3").has_value());
  EXPECT_EQ(DefaultToolParserFor("llama-3.1"), kLlama);
  EXPECT_EQ(DefaultToolParserFor("llama-3.2"), kLlama);
  EXPECT_EQ(DefaultToolParserFor("mistral"), kMistral);
  EXPECT_EQ(DefaultToolParserFor("qwen2.5"), kHermes);
  EXPECT_EQ(DefaultToolParserFor("plain"), kHermes);
}

TEST(ToolParserTest, Ids) {
  const std::string id = ToolCallId(kHermes, "chatcmpl-1/0", 0);
  ASSERT_EQ(id.size(), 29u);
  EXPECT_EQ(id.substr(0, 5), "call_");
  for (char c : id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << id;
  EXPECT_EQ(id, ToolCallId(kHermes, "chatcmpl-1/0", 0));  // deterministic
  EXPECT_NE(id, ToolCallId(kHermes, "chatcmpl-1/0", 1));
  EXPECT_NE(id, ToolCallId(kHermes, "chatcmpl-2/0", 0));
  const std::string m = ToolCallId(kMistral, "chatcmpl-1/0", 0);
  ASSERT_EQ(m.size(), 9u);
  for (char c : m) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c))) << m;
}

TEST(ToolParserTest, HermesCallsAndContent) {
  Parsed p = RunAll(kHermes,
                    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                    "{\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n{\"name\":"
                    " \"get_time\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me check.");
  EXPECT_EQ(p.calls, (std::vector<ChatToolCall>{
                         Call(kHermes, 0, "get_weather", R"({"city":"Paris","unit":"c"})"),
                         Call(kHermes, 1, "get_time", "{}")}));
  // Text after a call stays content; the whitespace next to the call does not.
  p = RunAll(kHermes,
             "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, \"}\"]}}</tool_call>\n\nDone "
             "<b>now</b>");
  EXPECT_EQ(p.content, "Done <b>now</b>");
  EXPECT_EQ(p.calls, (std::vector<ChatToolCall>{Call(kHermes, 0, "f", R"({"a":[1,"}"]})")}));
  // An unclosed last block counts when its JSON is complete.
  p = RunAll(kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, (std::vector<ChatToolCall>{Call(kHermes, 0, "f", R"({"x":1})")}));
}

TEST(ToolParserTest, HermesMalformedCallsStayContent) {
  const std::vector<std::string> texts = {
      "A <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}</tool_call> B",  // bad JSON
      "A <tool_call>{\"arguments\": {}}</tool_call> B",                          // no name
      "A <tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call> B",          // not an object
      "A <tool_call>{\"name\": \"f\", \"argu",                                   // cut off
      "A <tool_ca",                                                              // a partial tag
      "no calls at all < tool_call >",
  };
  for (const std::string& t : texts) {
    Parsed p = RunAll(kHermes, t);
    EXPECT_EQ(p.content, t);
    EXPECT_TRUE(p.calls.empty()) << t;
  }
  // A bad block between good ones: only it is content.
  Parsed p = RunAll(kHermes,
                    "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call> <tool_call>oops"
                    "</tool_call> <tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>");
  EXPECT_EQ(p.content, "<tool_call>oops</tool_call>");
  EXPECT_EQ(p.calls,
            (std::vector<ChatToolCall>{Call(kHermes, 0, "a", "{}"), Call(kHermes, 1, "b", "{}")}));
}

TEST(ToolParserTest, ParallelToolCallsFalseKeepsTheFirstCall) {
  Parsed p = RunAll(kHermes,
                    "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n<tool_call>"
                    "{\"name\": \"b\", \"arguments\": {}}</tool_call>",
                    /*parallel=*/false);
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, (std::vector<ChatToolCall>{Call(kHermes, 0, "a", "{}")}));
}

TEST(ToolParserTest, Llama3Json) {
  Parsed p = RunAll(kLlama, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls,
            (std::vector<ChatToolCall>{Call(kLlama, 0, "get_weather", R"({"city":"Paris"})")}));
  p = RunAll(kLlama,
             "<|python_tag|>{\"name\": \"a\", \"arguments\": {\"k\": \"v\"}}; {\"name\": \"b\", "
             "\"parameters\": {}}");
  EXPECT_EQ(p.calls, (std::vector<ChatToolCall>{Call(kLlama, 0, "a", R"({"k":"v"})"),
                                                Call(kLlama, 1, "b", "{}")}));
  // Text first: all content (the template's calls open the output).
  p = RunAll(kLlama, "Sure: {\"name\": \"a\", \"parameters\": {}}");
  EXPECT_EQ(p.content, "Sure: {\"name\": \"a\", \"parameters\": {}}");
  EXPECT_TRUE(p.calls.empty());
  // Malformed: content, byte for byte.
  for (const std::string t : {" {\"name\": \"a\"}", "{\"name\": 1, \"parameters\": {}}",
                              "{\"name\": \"a\", \"param", "{not json}", "   "}) {
    p = RunAll(kLlama, t);
    EXPECT_EQ(p.content, t);
    EXPECT_TRUE(p.calls.empty()) << t;
  }
  // After a call, the first thing that is not one ends the calls.
  p = RunAll(kLlama, "{\"name\": \"a\", \"parameters\": {}} and then some text");
  EXPECT_EQ(p.calls, (std::vector<ChatToolCall>{Call(kLlama, 0, "a", "{}")}));
  EXPECT_EQ(p.content, "and then some text");
}

TEST(ToolParserTest, Mistral) {
  Parsed p = RunAll(kMistral,
                    "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", "
                    "\"arguments\": \"{\\\"y\\\": 2}\"}]");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.calls, (std::vector<ChatToolCall>{Call(kMistral, 0, "a", R"({"x":1})"),
                                                Call(kMistral, 1, "b", R"({"y":2})")}));
  // The special token dropped by the detokenizer: the array alone at the start.
  p = RunAll(kMistral, " [{\"name\": \"a\", \"arguments\": {}}]");
  EXPECT_EQ(p.calls, (std::vector<ChatToolCall>{Call(kMistral, 0, "a", "{}")}));
  // Content before the tag stays.
  p = RunAll(kMistral, "Checking. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}]");
  EXPECT_EQ(p.content, "Checking.");
  EXPECT_EQ(p.calls.size(), 1u);
  for (const std::string t :
       {"[1, 2]", "[TOOL_CALLS] [{\"name\": \"a\"}]", "[TOOL_CALLS] oops",
        "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}", "[not a call]"}) {
    p = RunAll(kMistral, t);
    EXPECT_EQ(p.content, t);
    EXPECT_TRUE(p.calls.empty()) << t;
  }
}

// The stream's chunks for a hermes completion fed token by token: no call text in content
// deltas, each call as a header delta then an arguments delta, finish_reason tool_calls.
TEST(ToolParserTest, StreamDeltasInOpenAiShape) {
  const ResponseMeta meta{"chatcmpl-1", 7, "m"};
  const std::vector<std::string> tokens = {"Hi",
                                           " <",
                                           "tool",
                                           "_call",
                                           ">\n{\"",
                                           "name\": \"",
                                           "f\", \"arguments\": {\"a\"",
                                           ": 1}}\n</tool_",
                                           "call>"};
  ToolCallParser parser(kHermes, true, "chatcmpl-1/0");
  std::vector<std::string> chunks;
  auto emit = [&](const ToolParseDelta& d) {
    if (!d.content.empty()) chunks.push_back(DumpJson(ChatContentChunkJson(meta, 0, d.content)));
    for (const ChatToolCall& c : d.calls) {
      const auto k = static_cast<int32_t>(parser.calls().size() - d.calls.size());
      chunks.push_back(DumpJson(ChatToolCallChunkJson(meta, 0, k, c, true)));
      chunks.push_back(DumpJson(ChatToolCallChunkJson(meta, 0, k, c, false)));
    }
  };
  for (const std::string& t : tokens) emit(parser.Feed(t));
  emit(parser.Finish());
  chunks.push_back(DumpJson(ChatFinishChunkJson(meta, 0, FinishReason::kStop, {}, std::nullopt,
                                                !parser.calls().empty())));
  const std::string id = ToolCallId(kHermes, "chatcmpl-1/0", 0);
  const std::string head = R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,)"
                           R"("model":"m","choices":[{"index":0,"delta":)";
  EXPECT_EQ(chunks,
            (std::vector<std::string>{
                head + R"({"content":"Hi"},"logprobs":null,"finish_reason":null}]})",
                head + R"({"tool_calls":[{"index":0,"id":")" + id +
                    R"(","type":"function","function":{"name":"f","arguments":""}}]},)"
                    R"("logprobs":null,"finish_reason":null}]})",
                head + R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]},)"
                       R"("logprobs":null,"finish_reason":null}]})",
                head + R"({},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null}]})",
            }));
}

TEST(ToolParserTest, ResponseMessageWithToolCalls) {
  ChatChoice c;
  c.tool_calls = {{"call_x", "f", R"({"a":1})"}};
  c.finish_reason = FinishReason::kStop;
  const nlohmann::ordered_json body = ChatResponseJson({"chatcmpl-1", 7, "m"}, {c}, {3, 4});
  EXPECT_EQ(DumpJson(body["choices"][0]),
            R"({"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":)"
            R"("call_x","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},)"
            R"("logprobs":null,"finish_reason":"tool_calls","stop_reason":null})");
  c.content = "text";
  c.finish_reason = FinishReason::kAbort;  // an abort stays an abort
  const nlohmann::ordered_json aborted = ChatResponseJson({"chatcmpl-1", 7, "m"}, {c}, {3, 4});
  EXPECT_EQ(aborted["choices"][0]["message"]["content"], "text");
  EXPECT_EQ(aborted["choices"][0]["finish_reason"], "abort");
}

}  // namespace
}  // namespace tinyserve::protocol
