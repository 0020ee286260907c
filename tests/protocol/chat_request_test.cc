#include "server/protocol/chat_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tinyserve::protocol {
namespace {

constexpr int32_t kVocab = 512;

ChatRequest ParseOk(const std::string& body) {
  auto r = ParseChatRequestBody(body, kVocab);
  EXPECT_TRUE(r.ok()) << body << " -> " << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : ChatRequest{};
}

TEST(ChatRequestTest, Defaults) {
  ChatRequest req = ParseOk(R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}]})");
  EXPECT_EQ(req.model, "m");
  EXPECT_EQ(req.messages, (std::vector<ChatMessage>{{"user", "Hi"}}));
  EXPECT_FALSE(req.logprobs);
  EXPECT_FALSE(req.top_logprobs.has_value());
  EXPECT_TRUE(req.add_generation_prompt);
  EXPECT_FALSE(req.sampling.max_tokens.has_value());  // vLLM: the rest of the context
  EXPECT_EQ(req.sampling.temperature, 1.0f);
  EXPECT_EQ(req.sampling.n, 1);
  EXPECT_FALSE(req.sampling.logprobs.has_value());
  EXPECT_FALSE(req.sampling.stream);
}

TEST(ChatRequestTest, ContentPartsAreJoinedWithNewlines) {
  ChatRequest req = ParseOk(R"({"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
     "name": "bob"},
    {"role": "assistant", "content": null},
    {"role": "user", "content": []}]})");
  EXPECT_EQ(req.messages,
            (std::vector<ChatMessage>{
                {"system", "Be brief."}, {"user", "a\nb"}, {"assistant", ""}, {"user", ""}}));
}

TEST(ChatRequestTest, MaxCompletionTokensWinsOverMaxTokens) {
  EXPECT_EQ(ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5})")
                .sampling.max_tokens,
            5);
  EXPECT_EQ(ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5,
                        "max_completion_tokens": 9})")
                .sampling.max_tokens,
            9);
}

TEST(ChatRequestTest, LogprobsAndTopLogprobs) {
  ChatRequest a = ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})");
  EXPECT_EQ(a.sampling.logprobs, 0);
  ChatRequest b = ParseOk(
      R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 4})");
  EXPECT_EQ(b.sampling.logprobs, 4);
  EXPECT_EQ(b.top_logprobs, 4);
  ChatRequest c = ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})");
  EXPECT_FALSE(c.sampling.logprobs.has_value());
}

TEST(ChatRequestTest, SharedSamplingFields) {
  ChatRequest req = ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "n": 2,
    "seed": 7, "stop": "END", "stream": true, "stream_options": {"include_usage": true},
    "temperature": 0.2, "add_generation_prompt": false})");
  EXPECT_EQ(req.sampling.n, 2);
  EXPECT_EQ(req.sampling.seed, 7u);
  EXPECT_EQ(req.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(req.sampling.include_usage());
  EXPECT_FLOAT_EQ(req.sampling.temperature, 0.2f);
  EXPECT_FALSE(req.add_generation_prompt);
}

TEST(ChatRequestTest, ToolFields) {
  ChatRequest none = ParseOk(R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_TRUE(none.tool_fields.tools.empty());
  EXPECT_EQ(none.tool_fields.tool_choice.kind, ToolChoice::Kind::kNone);
  EXPECT_FALSE(none.tool_fields.parses_tool_calls());

  ChatRequest req = ParseOk(R"({"messages": [
      {"role": "user", "content": "x"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"b\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]}],
    "tools": [{"type": "function", "function": {"name": "f", "strict": true,
      "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}}],
    "parallel_tool_calls": false})");
  ASSERT_EQ(req.tool_fields.tools.size(), 1u);
  // The request's key order is kept (z before a), as the templates write it.
  EXPECT_EQ(req.tool_fields.tools[0].json.dump(),
            R"({"type":"function","function":{"name":"f","description":null,"parameters":)"
            R"({"type":"object","properties":{"z":{},"a":{}}},"strict":true}})");
  EXPECT_EQ(req.tool_fields.tool_choice.kind, ToolChoice::Kind::kAuto);
  EXPECT_TRUE(req.tool_fields.parses_tool_calls());
  EXPECT_FALSE(req.tool_fields.parallel_tool_calls);
  ASSERT_EQ(req.messages.size(), 3u);
  EXPECT_EQ(req.messages[1].content, "");
  EXPECT_EQ(req.messages[1].tool_calls, (std::vector<ChatToolCall>{{"c1", "f", "{\"b\": 1}"}}));
  EXPECT_EQ(req.messages[2].role, "tool");
  EXPECT_EQ(req.messages[2].content, "ok");
  EXPECT_EQ(req.messages[2].tool_call_id, "c1");

  auto choice = [](const std::string& c) {
    return ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": )" + c +
                   R"(, "tools": [{"type": "function", "function": {"name": "f"}}]})")
        .tool_fields.tool_choice;
  };
  EXPECT_EQ(choice(R"("none")").kind, ToolChoice::Kind::kNone);
  EXPECT_EQ(choice(R"("auto")").kind, ToolChoice::Kind::kAuto);
  EXPECT_EQ(choice(R"("required")").kind, ToolChoice::Kind::kRequired);
  EXPECT_EQ(choice(R"({"type": "function", "function": {"name": "f"}})"),
            (ToolChoice{ToolChoice::Kind::kFunction, "f"}));
  // "none" needs no tools; [] is no tools.
  EXPECT_EQ(ParseOk(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "none",
                        "tools": []})")
                .tool_fields.tool_choice.kind,
            ToolChoice::Kind::kNone);
}

struct BadCase {
  const char* body;
  const char* param;
  const char* message;  // exact, or nullptr
};

TEST(ChatRequestTest, BadInputsGive400NamingTheField) {
  const BadCase cases[] = {
      {"{\"messages\": [", nullptr, nullptr},
      {"\"hi\"", nullptr, "The request body must be a JSON object"},
      {R"({})", "messages", "`messages` is required"},
      {R"({"messages": "hi"})", "messages", "`messages` must be an array, got a string"},
      {R"({"messages": []})", "messages", "`messages` must not be empty"},
      {R"({"messages": ["hi"]})", "messages[0]", "`messages[0]` must be an object"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role", "`messages[0].role` is required"},
      {R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "x"}]})",
       "messages[1].role",
       "Unknown role 'robot'; expected 'system', 'user', 'assistant' or 'tool'"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content",
       "`messages[0].content` is required"},
      {R"({"messages": [{"role": "user", "content": null}]})", "messages[0].content", nullptr},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", nullptr},
      {R"({"messages": [{"role": "user", "content": ["x"]}]})", "messages[0].content[0]", nullptr},
      {R"({"messages": [{"role": "user", "content": [{"text": "x"}]}]})",
       "messages[0].content[0].type", nullptr},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "messages[0].content[0].type", "Unsupported content part type: 'image_url'"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text", nullptr},
      {R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]})",
       "messages[0].content[0].text", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens",
       nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -1})",
       "max_completion_tokens", "max_completion_tokens must be at least 1, got -1."},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": -1})", "temperature",
       nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 2})", "logprobs",
       "`logprobs` must be a boolean, got an integer"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs",
       "when using `top_logprobs`, `logprobs` must be set to true."},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
       "top_logprobs", "Requested sample logprobs of 21, which is greater than max allowed: 20"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": -1})",
       "top_logprobs", "`top_logprobs` must be a positive value."},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {}})",
       "stream_options", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})", "stop", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "seed": "s"})", "seed", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": 1})",
       "add_generation_prompt", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "model": ["m"]})", "model", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})",
       "tools[0].function", "`tools[0].function` is required"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval",
           "function": {"name": "f"}}]})",
       "tools[0].type", "Unsupported tool type 'retrieval'; only 'function' tools are supported"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "bad name"}}]})",
       "tools[0].function.name",
       "Invalid function name 'bad name': it must match [a-zA-Z0-9_-]{1,64}"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
           "function": {"name": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}]})",
       "tools[0].function.name", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]})",
       "tools[0].function.parameters",
       "`tools[0].function.parameters` must be a JSON Schema object, got a string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
           "function": {"name": "f", "parameters": {"type": 3}}}]})",
       "tools[0].function.parameters.type", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "f", "description": 1}}]})",
       "tools[0].function.description", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "f"}},
                     {"type": "function", "function": {"name": "f"}}]})",
       "tools[1].function.name", "Function name 'f' is given twice in `tools`"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", "tool_choice",
       "`tool_choice` other than 'none' needs a non-empty `tools` list"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes",
           "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tool_choice": {"type": "function", "function": {"name": "x"}},
           "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice.function.name", "tool_choice names unknown function 'x'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"},
           "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice.function", "`tool_choice.function` is required"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": 1,
           "tools": [{"type": "function", "function": {"name": "f"}}]})",
       "tool_choice", "`tool_choice` must be a string or an object, got an integer"},
      {R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": "yes"})",
       "parallel_tool_calls", nullptr},
      {R"({"messages": [{"role": "tool", "content": "r"}]})", "messages[0].tool_call_id",
       "`messages[0].tool_call_id` is required"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
       "messages[0].tool_calls", "Only assistant messages may carry `tool_calls`"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"type": "function",
           "function": {"name": "f", "arguments": "{}"}}]}]})",
       "messages[0].tool_calls[0].id", "`messages[0].tool_calls[0].id` is required"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
           "function": {"name": "f", "arguments": "[1]"}}]}]})",
       "messages[0].tool_calls[0].function.arguments",
       "`messages[0].tool_calls[0].function.arguments` must be a JSON object encoded as a string"},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
           "function": {"name": "f", "arguments": {}}}]}]})",
       "messages[0].tool_calls[0].function.arguments", nullptr},
      {R"({"messages": [{"role": "assistant", "tool_calls": {}}]})", "messages[0].tool_calls",
       nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools", nullptr},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_schema", "json_schema": {}}})",
       "response_format.json_schema.name",
       "`response_format.json_schema.name` is required (a non-empty string)."},
      {R"({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 21})",
       "prompt_logprobs", "Requested prompt logprobs of 21, which is greater than max allowed: 20"},
  };
  for (const BadCase& c : cases) {
    auto r = ParseChatRequestBody(c.body, kVocab);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.error().http_status, 400) << c.body;
    if (c.param == nullptr) {
      EXPECT_FALSE(r.error().param.has_value()) << c.body;
    } else {
      EXPECT_EQ(r.error().param, std::string(c.param)) << c.body;
    }
    if (c.message != nullptr) {
      EXPECT_EQ(r.error().message, c.message) << c.body;
    }
  }
}

}  // namespace
}  // namespace tinyserve::protocol
