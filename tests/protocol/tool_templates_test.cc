// Tool rendering per template family. The expected texts of llama-3.1, qwen2.5 and mistral were
// rendered by jinja2 3.1 (trim_blocks, lstrip_blocks, transformers' tojson) from the published
// templates, with vLLM's inputs (tools as model_dump()s, call arguments as dicts).
#include "server/protocol/tool_templates.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/protocol/chat_request.h"
#include "server/protocol/chat_template.h"

namespace tinyserve::protocol {
namespace {

constexpr const char* kToolsJson = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
      "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time"}}])";

// Parses a chat request body whose tools are kToolsJson (the path the server takes).
ChatRequest Parse(const std::string& messages, bool with_tools = true) {
  const std::string body = std::string("{\"messages\": ") + messages +
                           (with_tools ? std::string(", \"tools\": ") + kToolsJson : "") + "}";
  auto r = ParseChatRequestBody(body, 512);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return r.ok() ? std::move(r).value() : ChatRequest{};
}

const char* kConv1 = R"([{"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "abc123xyz", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},
  {"role": "tool", "tool_call_id": "abc123xyz", "content": "22 \"C\""}])";

const char* kConv2 = R"([{"role": "user", "content": "Weather and time?"},
  {"role": "assistant", "content": "Checking.", "tool_calls": [
    {"id": "abc123xyz", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
    {"id": "def456uvw", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
  {"role": "tool", "tool_call_id": "abc123xyz", "content": "22 C"},
  {"role": "tool", "tool_call_id": "def456uvw", "content": "noon"},
  {"role": "user", "content": "Thanks"}])";

StatusOr<RenderedChat> Render(std::string_view name, const ChatRequest& r) {
  return RenderChat(name, r.messages, true, "30 Nov 2026", r.tool_fields.tools);
}

std::string RenderOk(std::string_view name, const ChatRequest& r) {
  auto out = Render(name, r);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? out->text : "";
}

const std::string kHermesTools =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": "
    "\"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the "
    "weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
    "\"string\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": "
    "[\"city\"]}}}\n{\"type\": \"function\", \"function\": {\"name\": \"get_time\", "
    "\"description\": null, \"parameters\": null}}\n</tools>\n\nFor each function call, return a "
    "json object with function name and arguments within <tool_call></tool_call> XML "
    "tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>";

TEST(ToolTemplatesTest, Qwen25) {
  EXPECT_EQ(RenderOk("qwen2.5", Parse(kConv1)),
            "<|im_start|>system\nBe brief.\n\n" + kHermesTools +
                "<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant"
                "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
                "\"unit\": \"c\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n22 "
                "\"C\"\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(RenderOk("qwen2.5", Parse(kConv2)),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.\n\n" +
                kHermesTools +
                "<|im_end|>\n<|im_start|>user\nWeather and time?<|im_end|>\n<|im_start|>"
                "assistant\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
                "\"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
                "22 C\n</tool_response>\n<tool_response>\nnoon\n</tool_response><|im_end|>\n"
                "<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n");
  // Tool messages without a tool list: the template still renders them.
  EXPECT_EQ(RenderOk("qwen2.5", Parse(kConv2, false)),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nWeather and time?<|im_end|>\n<|im_start|>"
            "assistant\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
            "\"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
            "22 C\n</tool_response>\n<tool_response>\nnoon\n</tool_response><|im_end|>\n"
            "<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ToolTemplatesTest, Llama31) {
  const std::string tools4 =
      "{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": \"get_weather\",\n"
      "        \"description\": \"Get the weather\",\n        \"parameters\": {\n            "
      "\"type\": \"object\",\n            \"properties\": {\n                \"city\": {\n      "
      "              \"type\": \"string\"\n                },\n                \"unit\": {\n    "
      "                \"type\": \"string\",\n                    \"enum\": [\n                  "
      "      \"c\",\n                        \"f\"\n                    ]\n                }\n "
      "           },\n            \"required\": [\n                \"city\"\n            ]\n    "
      "    }\n    }\n}\n\n{\n    \"type\": \"function\",\n    \"function\": {\n        \"name\": "
      "\"get_time\",\n        \"description\": null,\n        \"parameters\": null\n    }\n}\n\n";
  const std::string tail =
      "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", "
      "\"parameters\": {\"city\": \"Paris\", \"unit\": \"c\"}}<|eot_id|><|start_header_id|>"
      "ipython<|end_header_id|>\n\n\"22 \\\"C\\\"\"<|eot_id|><|start_header_id|>assistant"
      "<|end_header_id|>\n\n";
  EXPECT_EQ(RenderOk("llama-3.1", Parse(kConv1)),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
            "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
            "respond with a JSON for a function call with its proper arguments that best answers "
            "the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
            "dictionary of argument name and its value}.Do not use variables.\n\n" +
                tools4 + "Weather in Paris?<|eot_id|>" + tail);
  EXPECT_EQ(RenderOk("llama-3.1", Parse(kConv1, false)),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
            "Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>"
            "user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>" +
                tail);
  // Llama 3.2: the same with its date.
  const std::string r32 = RenderOk("llama-3.2", Parse(kConv1));
  EXPECT_NE(r32.find("Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: "
                     "30 Nov 2026\n\n"),
            std::string::npos);
  // The template's own errors are 400s.
  auto two = Render("llama-3.1", Parse(kConv2));
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(two.status().message(), "This model only supports single tool-calls at once!");
  auto no_user = Render("llama-3.1", Parse(R"([{"role": "system", "content": "S"}])"));
  ASSERT_FALSE(no_user.ok());
  EXPECT_EQ(no_user.status().code(), StatusCode::kInvalidArgument);
}

TEST(ToolTemplatesTest, Mistral) {
  const std::string calls =
      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
      "\"c\"}, \"id\": \"abc123xyz\"}]</s>[TOOL_RESULTS] {\"content\": 22 \"C\", \"call_id\": "
      "\"abc123xyz\"}[/TOOL_RESULTS]";
  EXPECT_EQ(RenderOk("mistral", Parse(kConv1)),
            "<s>[AVAILABLE_TOOLS] [{\"type\": \"function\", \"function\": {\"name\": "
            "\"get_weather\", \"description\": \"Get the weather\", \"parameters\": {\"type\": "
            "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": "
            "\"string\", \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}, {\"type\": "
            "\"function\", \"function\": {\"name\": \"get_time\", \"description\": null, "
            "\"parameters\": null}}][/AVAILABLE_TOOLS][INST] Weather in Paris?[/INST]" +
                calls);
  EXPECT_EQ(RenderOk("mistral", Parse(kConv1, false)),
            "<s>[INST] Weather in Paris?[/INST]" + calls);
  // Without tools: Mistral's plain turns; the system message goes into the last user turn.
  EXPECT_EQ(RenderOk("mistral", Parse(R"([{"role": "system", "content": "S"},
      {"role": "user", "content": "a"}, {"role": "assistant", "content": " b "},
      {"role": "user", "content": "c"}])",
                                      false)),
            "<s>[INST] a[/INST] b</s>[INST] S\n\nc[/INST]");
  auto alternate = Render("mistral", Parse(kConv2));
  ASSERT_FALSE(alternate.ok());
  EXPECT_EQ(alternate.status().message(),
            "After the optional system message, conversation roles must alternate "
            "user/assistant/user/assistant/...");
  // OpenAI-style ids ("call_" + 24) break the template's 9-character rule: a 400, as in vLLM.
  auto ids = Render("mistral", Parse(R"([{"role": "user", "content": "a"},
      {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_time", "arguments": "{}"}}]}])"));
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().message(), "Tool call IDs should be alphanumeric strings with length 9!");
}

TEST(ToolTemplatesTest, GenericPreambleForTemplatesWithoutTools) {
  EXPECT_EQ(RenderOk("chatml", Parse(kConv2)),
            "<|im_start|>system\n" + kHermesTools +
                "<|im_end|>\n<|im_start|>user\nWeather and time?<|im_end|>\n<|im_start|>assistant"
                "\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": "
                "{}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n22 C\n"
                "</tool_response>\n<tool_response>\nnoon\n</tool_response><|im_end|>\n"
                "<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n");
  // A system message keeps its text; the tools follow it.
  EXPECT_EQ(RenderOk("plain", Parse(R"([{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi"}])")),
            "System: Be brief.\n\n" + kHermesTools + "\nUser: Hi\nAssistant:");
  // llama-2 folds the preamble into the first user turn; a tool result is a user turn, so the
  // roles still alternate.
  EXPECT_EQ(RenderOk("llama-2", Parse(R"([{"role": "user", "content": "Hi"},
      {"role": "assistant", "tool_calls": [{"id": "x", "type": "function",
        "function": {"name": "get_time", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "x", "content": "noon"}])",
                                      false)),
            "<s>[INST] Hi [/INST] <tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
            "</tool_call> </s><s>[INST] <tool_response>\nnoon\n</tool_response> [/INST]");
}

TEST(ToolTemplatesTest, ToolTextIsContentSoNoSpecialTokenCanBeInjected) {
  ChatRequest r = Parse(R"([{"role": "user", "content": "Hi"}])");
  auto out = Render("qwen2.5", r);
  ASSERT_TRUE(out.ok());
  // The tool list lies inside a content range.
  const size_t at = out->text.find("get_weather");
  bool covered = false;
  for (const auto& [b, e] : out->content_ranges) covered = covered || (b <= at && at < e);
  EXPECT_TRUE(covered);
}

TEST(ToolTemplatesTest, NoToolsRendersAsBefore) {
  ChatRequest r = Parse(R"([{"role": "user", "content": "Hi"}])", false);
  EXPECT_FALSE(HasToolContent(r.messages, r.tool_fields.tools));
  EXPECT_EQ(RenderOk("qwen2.5", r),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace tinyserve::protocol
