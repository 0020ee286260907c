// Tool calling on POST /v1/chat/completions over HTTP with the real stories260K model: tools
// rendered into the prompt (as /tokenize counts it), tool messages accepted, the tool-call parser
// on the streaming and the non-streaming path (the model writes stories, so its output has no
// calls: content passes through unchanged), calls forced by tool_choice "required" or a named
// function (decoded under the call grammar, parsed into tool_calls), and every bad tools /
// tool_choice value a 400 naming the field.
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
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
  ToolsTest() = default;
  explicit ToolsTest(TestServerOptions options) : server_(std::move(options)) {}

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
      {{{"tools", Tools()}, {"tool_choice", "required"}, {"guided_regex", "a+"}},
       "tool_choice",
       "tool_choice 'required' or a named function forces a tool call; it cannot be combined "
       "with `guided_regex`"},
      {{{"tools", json::parse(R"([{"type": "function", "function": {"name": "f",
          "parameters": {"type": "object", "not": {}}}}])")},
        {"tool_choice", "required"}},
       "tools",
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

json TwoTools() {
  json tools = Tools();
  tools[0]["function"]["parameters"]["properties"]["city"]["maxLength"] = 12;
  tools.push_back(json::parse(R"({"type": "function", "function": {"name": "get_time",
      "parameters": {"type": "object", "properties": {"hours": {"type": "integer",
      "minimum": 0, "maximum": 23}}, "required": ["hours"]}}})"));
  return tools;
}

// A forced call's arguments hold what its tool's schema requires.
void ExpectValidCall(const json& call) {
  EXPECT_EQ(call["type"], "function") << call;
  ASSERT_TRUE(call["id"].is_string()) << call;
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u) << call;
  const std::string name = call["function"]["name"];
  const json args = json::parse(call["function"]["arguments"].get<std::string>());
  if (name == "get_weather") {
    ASSERT_TRUE(args.contains("city")) << call;
    ASSERT_TRUE(args["city"].is_string()) << call;
    EXPECT_LE(args["city"].get<std::string>().size(), 12u * 4) << call;  // 12 code points
  } else {
    ASSERT_EQ(name, "get_time") << call;
    ASSERT_TRUE(args["hours"].is_number_integer()) << call;
    EXPECT_GE(args["hours"].get<int>(), 0);
    EXPECT_LE(args["hours"].get<int>(), 23);
  }
}

// The forced-call tests: two tools' Hermes preamble is about 600 stories260K tokens.
class ForcedToolsTest : public ToolsTest {
 protected:
  ForcedToolsTest() : ToolsTest(LongContext()) {}
  static TestServerOptions LongContext() {
    TestServerOptions options;
    options.max_model_len = 2048;
    return options;
  }
};

TEST_F(ForcedToolsTest, RequiredAndNamedToolChoicesForceParsedCalls) {
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const json required = PostOk("/v1/chat/completions", {{"messages", Messages()},
                                                          {"tools", TwoTools()},
                                                          {"tool_choice", "required"},
                                                          {"parallel_tool_calls", false},
                                                          {"temperature", 1.0},
                                                          {"seed", seed},
                                                          {"max_tokens", 400}});
    const json& choice = required["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << choice;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
    ExpectValidCall(choice["message"]["tool_calls"][0]);

    const json named =
        PostOk("/v1/chat/completions",
               {{"messages", Messages()},
                {"tools", TwoTools()},
                {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}},
                {"temperature", 1.0},
                {"seed", seed},
                {"max_tokens", 400}});
    const json& named_choice = named["choices"][0];
    ASSERT_EQ(named_choice["finish_reason"], "tool_calls") << named_choice;
    ASSERT_GE(named_choice["message"]["tool_calls"].size(), 1u) << named_choice;
    for (const json& call : named_choice["message"]["tool_calls"]) {
      EXPECT_EQ(call["function"]["name"], "get_time") << call;
      ExpectValidCall(call);
    }
  }
}

TEST_F(ForcedToolsTest, AForcedCallStreamsAsToolCallDeltas) {
  json body = {{"messages", Messages()},    {"tools", TwoTools()},
               {"tool_choice", "required"}, {"parallel_tool_calls", false},
               {"temperature", 1.0},        {"seed", 5},
               {"max_tokens", 400},         {"stream", true}};
  auto res = server_.Post("/v1/chat/completions", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::vector<std::string> events = SseEvents(res->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  json call = {{"function", {{"arguments", ""}}}};
  std::string finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    const json& c = chunk["choices"][0];
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish = c["finish_reason"];
    if (!c["delta"].contains("tool_calls")) continue;
    for (const json& d : c["delta"]["tool_calls"]) {
      EXPECT_EQ(d["index"], 0) << d;
      if (d.contains("id")) call["id"] = d["id"];
      if (d.contains("type")) call["type"] = d["type"];
      if (d["function"].contains("name")) call["function"]["name"] = d["function"]["name"];
      if (d["function"].contains("arguments")) {
        call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() +
                                        d["function"]["arguments"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(finish, "tool_calls");
  ExpectValidCall(call);
}

}  // namespace
}  // namespace tinyserve
