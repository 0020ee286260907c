// Tool calling on POST /v1/chat/completions over HTTP with the real stories260K model: tools
// rendered into the prompt (as /tokenize counts it), tool messages accepted, the tool-call parser
// on the streaming and the non-streaming path (the model writes stories, so its output has no
// calls: content passes through unchanged; parsed calls are pinned by tests/protocol), and every
// bad tools / tool_choice value a 400 naming the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::SseEvents;
using testing::TestServerOptions;

json Tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get the weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
}

json Messages() {
  return json::array({{{"role", "system"}, {"content", "Tell a story."}},
                      {{"role", "user"}, {"content", "Once upon a time"}}});
}

// A conversation that went through one call: the assistant's call and the tool's result.
json MessagesAfterACall() {
  json m = Messages();
  m.push_back(json::parse(R"({"role": "assistant", "content": null, "tool_calls": [{"id":
      "call_abc", "type": "function", "function": {"name": "get_weather",
      "arguments": "{\"city\": \"Paris\"}"}}]})"));
  m.push_back({{"role", "tool"}, {"tool_call_id", "call_abc"}, {"content", "sunny"}});
  return m;
}

class ToolsTest : public ::testing::Test {
 protected:
  json PostOk(const std::string& path, const json& body) {
    auto res = server_.Post(path, body);
    EXPECT_TRUE(res);
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body);
  }

  OpenAiTestServer server_;
};

TEST_F(ToolsTest, ToolsAndToolMessagesAreRenderedIntoThePrompt) {
  // The plain template has no tool rendering: the generic Hermes preamble follows the system
  // message; the call and its result are an assistant and a user turn. (nlohmann::json sends the
  // schema's keys sorted; the server keeps the order it receives.)
  const json tok = PostOk("/tokenize", {{"messages", MessagesAfterACall()}, {"tools", Tools()}});
  const std::string expected =
      "System: Tell a story.\n\n# Tools\n\nYou may call one or more functions to assist with the "
      "user query.\n\nYou are provided with function signatures within <tools></tools> XML "
      "tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
      "\"description\": \"Get the weather\", \"parameters\": {\"properties\": {\"city\": "
      "{\"type\": \"string\"}}, \"required\": [\"city\"], \"type\": \"object\"}}}\n</tools>"
      "\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
      "<args-json-object>}\n</tool_call>\nUser: Once upon a time\nAssistant: <tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\nUser: "
      "<tool_response>\nsunny\n</tool_response>\nAssistant:";
  const json text = PostOk("/detokenize", {{"tokens", tok["tokens"]}});
  EXPECT_EQ(text["prompt"], expected);
  // A completion's prompt is what /tokenize counts (a shorter conversation: 512-token model).
  const json short_tok = PostOk("/tokenize", {{"messages", Messages()}, {"tools", Tools()}});
  const json r =
      PostOk("/v1/chat/completions",
             {{"messages", Messages()}, {"tools", Tools()}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(r["usage"]["prompt_tokens"], short_tok["count"]);
  const json no_tools = PostOk("/tokenize", {{"messages", Messages()}});
  EXPECT_GT(short_tok["count"].get<int>(), no_tools["count"].get<int>());
}

TEST_F(ToolsTest, OutputWithoutCallsStaysContentStreamingAndNot) {
  for (const char* choice : {"auto", "none"}) {
    const json body = {{"messages", Messages()}, {"tools", Tools()}, {"tool_choice", choice},
                       {"max_tokens", 24},       {"temperature", 1}, {"seed", 11}};
    const json plain = PostOk("/v1/chat/completions", body);
    const json& message = plain["choices"][0]["message"];
    EXPECT_FALSE(message.contains("tool_calls")) << message;
    const std::string content = message["content"].get<std::string>();
    EXPECT_FALSE(content.empty());
    EXPECT_EQ(plain["choices"][0]["finish_reason"], "length");

    json streamed = body;
    streamed["stream"] = true;
    auto res = server_.Post("/v1/chat/completions", streamed);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const std::vector<std::string> events = SseEvents(res->body);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), "[DONE]");
    std::string joined;
    for (size_t i = 1; i + 2 < events.size(); ++i) {
      const json delta = json::parse(events[i])["choices"][0]["delta"];
      EXPECT_FALSE(delta.contains("tool_calls")) << delta;
      joined += delta["content"].get<std::string>();
    }
    EXPECT_EQ(joined, content) << choice;
    EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length");
  }
}

TEST_F(ToolsTest, BadToolFieldsAre400sNamingTheField) {
  struct Case {
    json patch;
    std::string param;
    std::string message;  // "" = not checked
  };
  const std::vector<Case> cases = {
      {{{"tools", Tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "x"}}}}}},
       "tool_choice.function.name",
       "tool_choice names unknown function 'x'"},
      {{{"tools", Tools()}, {"tool_choice", "required"}},
       "tool_choice",
       "tool_choice 'required' and named functions are not supported yet (they need constrained "
       "decoding); use 'auto' or 'none'"},
      {{{"tools", Tools()},
        {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}}},
       "tool_choice",
       ""},
      {{{"tools", json::parse(R"([{"type": "function", "function": {"name": "a.b"}}])")}},
       "tools[0].function.name",
       "Invalid function name 'a.b': it must match [a-zA-Z0-9_-]{1,64}"},
      {{{"tools", json::parse(R"([{"type": "function", "function": {"name": "f",
          "parameters": []}}])")}},
       "tools[0].function.parameters",
       ""},
      {{{"tool_choice", "auto"}}, "tool_choice", ""},
      {{{"messages", json::parse(R"([{"role": "tool", "content": "x"}])")}},
       "messages[0].tool_call_id",
       ""},
  };
  for (const Case& c : cases) {
    json body = {{"messages", Messages()}, {"max_tokens", 4}};
    body.update(c.patch);
    auto res = server_.Post("/v1/chat/completions", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body.dump();
    const json error = json::parse(res->body)["error"];
    EXPECT_EQ(error["param"], c.param) << res->body;
    EXPECT_EQ(error["type"], "BadRequestError");
    EXPECT_EQ(error["code"], 400);
    if (!c.message.empty()) {
      EXPECT_EQ(error["message"], c.message);
    }
  }
}

TEST(ToolsTemplateTest, TemplateRulesAre400s) {
  TestServerOptions options;
  options.chat_template = "llama-3.1";
  options.tool_call_parser = "llama3_json";
  OpenAiTestServer server(options);
  json messages = MessagesAfterACall();
  messages[2]["tool_calls"].push_back(messages[2]["tool_calls"][0]);  // two calls in one turn
  auto res = server.Post("/v1/chat/completions",
                         {{"messages", messages}, {"tools", Tools()}, {"max_tokens", 4}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  const json error = json::parse(res->body)["error"];
  EXPECT_EQ(error["param"], "messages");
  EXPECT_EQ(error["message"], "This model only supports single tool-calls at once!");
  // One call and its result (no tool list, to fit the 512-token model) are fine, and the reply
  // is parsed by llama3_json (story text: content).
  res = server.Post("/v1/chat/completions",
                    {{"messages", MessagesAfterACall()}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(json::parse(res->body)["choices"][0]["message"].contains("tool_calls"));
}

}  // namespace
}  // namespace tinyserve
