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
       "messages[1].role", "Unknown role 'robot'; expected 'system', 'user' or 'assistant'"},
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
       "tools", "Tool calling is not supported by this server; send no `tools`."},
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
