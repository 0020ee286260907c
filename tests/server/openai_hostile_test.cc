// Issue 16: requests built to kill the server get a clean error, and the server serves on: deep
// nesting.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/protocol/json_fields.h"
#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::TestServerOptions;

// `{"<key>": [[[...1...]]]}` (or objects {"a": {"a": ...}}) nested `depth` levels below the body.
std::string Nested(const std::string& key, int depth, bool objects) {
  std::string s = "{\"" + key + "\": ";
  for (int i = 0; i < depth; ++i) s += objects ? "{\"a\": " : "[";
  s += "1";
  s.append(static_cast<size_t>(depth), objects ? '}' : ']');
  return s + "}";
}

void ExpectServing(const OpenAiTestServer& server) {
  auto health = server.Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ok = server.Post("/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

std::string ErrorMessage(const httplib::Result& res) {
  const json body = json::parse(res->body, nullptr, false);
  if (!body.is_object() || !body.contains("error")) return "<no error JSON: " + res->body + ">";
  return body["error"]["message"].get<std::string>();
}

TEST(OpenAiHostileTest, DeeplyNestedBodiesAre400OnEveryJsonRoute) {
  OpenAiTestServer server;
  const char* routes[] = {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"};
  // ~280 KB each: 140,000 levels overflowed a worker's stack when a subtree was copied.
  for (const char* route : routes) {
    for (bool objects : {false, true}) {
      for (const char* key : {"prompt", "messages", "response_format", "tokens"}) {
        const std::string body = Nested(key, 140000, objects);
        auto res = server.Client().Post(route, body, "application/json");
        ASSERT_TRUE(res) << route << " " << key;
        EXPECT_EQ(res->status, 400) << route << " " << key;
        EXPECT_NE(ErrorMessage(res).find("limit of 64 levels"), std::string::npos)
            << route << ": " << ErrorMessage(res);
      }
    }
  }
  // response_format.type nested below a valid request (the reported crash).
  json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  std::string text = body.dump();
  text.pop_back();
  text += ", \"response_format\": {\"type\": " + std::string(140000, '[') +
          std::string(140000, ']') + "}}";
  for (const char* route : {"/v1/chat/completions", "/tokenize"}) {
    auto res = server.Client().Post(route, text, "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << route;
  }
  ExpectServing(server);
}

TEST(OpenAiHostileTest, NestingUpToTheLimitIsParsed) {
  OpenAiTestServer server;
  // One level for the body: a prompt nested to the limit is parsed and refused for its type.
  auto res = server.Client().Post(
      "/v1/completions", Nested("prompt", protocol::kMaxJsonDepth - 1, false), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(ErrorMessage(res).find("limit of 64"), std::string::npos) << ErrorMessage(res);
}

}  // namespace
}  // namespace tinyserve
