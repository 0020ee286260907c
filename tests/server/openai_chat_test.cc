// POST /v1/chat/completions (plain template, streaming and not, logprobs), GET /v1/models,
// GET /version, POST /tokenize and /detokenize on the real stories260K model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::SseEvents;

class ChatTest : public ::testing::Test {
 protected:
  json PostOk(const std::string& path, const json& body) {
    auto res = server_.Post(path, body);
    EXPECT_TRUE(res);
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body);
  }
  static json Messages() {
    return json::array({{{"role", "system"}, {"content", "Tell a story."}},
                        {{"role", "user"}, {"content", "Once upon a time"}}});
  }

  OpenAiTestServer server_;
};

TEST_F(ChatTest, CompletionHasTheAssistantMessageAndUsage) {
  const json r = PostOk(
      "/v1/chat/completions",
      {{"model", "stories"}, {"messages", Messages()}, {"max_tokens", 20}, {"temperature", 0}});
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& c = r["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_FALSE(c["message"]["content"].get<std::string>().empty());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 20);
  // The prompt is the plain template's rendering, as /tokenize counts it.
  const json tok = PostOk("/tokenize", {{"messages", Messages()}});
  EXPECT_EQ(r["usage"]["prompt_tokens"], tok["count"]);
  const auto& t = server_.tokenizer();
  const std::vector<int32_t> expected =
      t.Encode("System: Tell a story.\nUser: Once upon a time\nAssistant:", true);
  EXPECT_EQ(tok["tokens"].get<std::vector<int32_t>>(), expected);
  EXPECT_EQ(tok["max_model_len"], server_.engine().max_model_len());
}

TEST_F(ChatTest, StreamHasRoleContentFinishUsageAndDone) {
  const json body = {{"messages", Messages()}, {"max_tokens", 30}, {"temperature", 0}};
  const json plain = PostOk("/v1/chat/completions", body);
  json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  auto res = server_.Post("/v1/chat/completions", streamed);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const std::vector<std::string> events = SseEvents(res->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  const json role = json::parse(events[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  for (size_t i = 1; i + 3 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
    content += chunk["choices"][0]["delta"]["content"].get<std::string>();
  }
  const json finish = json::parse(events[events.size() - 3]);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(content, plain["choices"][0]["message"]["content"]);
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], plain["usage"]);
}

TEST_F(ChatTest, LogprobsListEveryTokenWithTopAlternatives) {
  const json r = PostOk("/v1/chat/completions", {{"messages", Messages()},
                                                 {"max_tokens", 5},
                                                 {"temperature", 0},
                                                 {"logprobs", true},
                                                 {"top_logprobs", 2}});
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 5u);
  std::string joined;
  for (const json& t : content) {
    joined += t["token"].get<std::string>();
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_EQ(t["top_logprobs"][0]["logprob"], t["logprob"]);  // greedy: the best one
    EXPECT_TRUE(t["bytes"].is_array());
  }
  EXPECT_EQ(joined, r["choices"][0]["message"]["content"]);
  // Without logprobs: null.
  const json none = PostOk("/v1/chat/completions",
                           {{"messages", Messages()}, {"max_tokens", 2}, {"temperature", 0}});
  EXPECT_TRUE(none["choices"][0]["logprobs"].is_null());
}

TEST_F(ChatTest, NChoicesHaveTheirIndices) {
  const json r = PostOk("/v1/chat/completions",
                        {{"messages", Messages()}, {"max_tokens", 8}, {"n", 3}, {"seed", 5}});
  ASSERT_EQ(r["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(r["choices"][i]["index"], i);
  EXPECT_EQ(r["usage"]["completion_tokens"], 24);
}

TEST_F(ChatTest, ModelsListsTheServedModel) {
  auto res = server_.Client().Get("/v1/models");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const json r = json::parse(res->body);
  EXPECT_EQ(r["object"], "list");
  ASSERT_EQ(r["data"].size(), 1u);
  EXPECT_EQ(r["data"][0]["id"], "stories");
  EXPECT_EQ(r["data"][0]["object"], "model");
  EXPECT_EQ(r["data"][0]["max_model_len"], server_.engine().max_model_len());
  EXPECT_TRUE(r["data"][0]["created"].is_number_integer());
  EXPECT_TRUE(r["data"][0]["owned_by"].is_string());
}

TEST_F(ChatTest, VersionAnswers) {
  auto res = server_.Client().Get("/version");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(json::parse(res->body)["version"].is_string());
}

TEST_F(ChatTest, TokenizeDetokenizeRoundTrip) {
  const std::string text = "Lily had a big red ball. \xC3\xA9t\xC3\xA9!";
  const json tok = PostOk("/tokenize", {{"prompt", text}});
  const auto ids = tok["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(tok["count"], ids.size());
  EXPECT_EQ(ids, server_.tokenizer().Encode(text, true));
  EXPECT_EQ(PostOk("/detokenize", {{"tokens", ids}})["prompt"], text);
  const json no_bos = PostOk("/tokenize", {{"prompt", text}, {"add_special_tokens", false}});
  EXPECT_EQ(no_bos["count"], ids.size() - 1);
}

}  // namespace
}  // namespace tinyserve
