// Issue 16: requests built to kill, flood or desynchronize the server get a clean error, and the
// server serves on: deep nesting, amplification (prompts x n, logprob entries), queue-sized n,
// and, at the HTTP level, bodies and headers the front end refuses before reading a body.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/protocol/json_fields.h"
#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::ExpectServing;
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

// JSON, regexes and grammars that arrive inside strings, which the body's nesting check skips:
// each of these killed the server (a stack overflow), pinned it, or answered 500 before. Too deep
// is a 400 naming the field and the limit; deep but valid is served.
TEST(OpenAiHostileTest, TextsInsideStringsCannotNestPastTheirLimits) {
  OpenAiTestServer server;
  const std::string deep_json =
      "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  json ref_chain = {{"$ref", "#/$defs/d0"}, {"$defs", json::object()}};
  for (int i = 0; i < 20000; ++i) {
    ref_chain["$defs"]["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  }
  ref_chain["$defs"]["d20000"] = {{"type", "integer"}};
  std::string gbnf_groups = "root ::= " + std::string(100000, '(') + "\"a\"";
  gbnf_groups.append(100000, ')');
  struct Case {
    json fields;
    std::string param;
    std::string message;  // part of the error's message
  };
  const Case cases[] = {
      {{{"guided_json", deep_json}}, "guided_json", "deeper than the limit of 64 levels"},
      {{{"structured_outputs", {{"json", deep_json}}}},
       "structured_outputs.json",
       "deeper than the limit of 64 levels"},
      {{{"structured_outputs",
         {{"regex", std::string(100000, '(') + "a" + std::string(100000, ')')}}}},
       "structured_outputs.regex",
       "groups nest deeper than the limit of 64"},
      {{{"structured_outputs", {{"regex", "a" + std::string(100000, '*')}}}},
       "structured_outputs.regex",
       "a quantifier may not follow a quantifier"},
      {{{"structured_outputs", {{"grammar", gbnf_groups}}}},
       "structured_outputs.grammar",
       "groups nest deeper than the limit of 256"},
      {{{"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "chain"}, {"schema", ref_chain}}}}}},
       "response_format.json_schema.schema",
       "nest deeper than the limit of 256"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema",
           {{"name", "index"},
            {"schema",
             {{"$ref", "#/$defs/a/99999999999999999999999"},
              {"$defs", {{"a", json::array({{{"type", "integer"}}})}}}}}}}}}},
       "response_format.json_schema.schema",
       "does not resolve"},
  };
  for (const Case& c : cases) {
    json body = {{"prompt", "Once"}, {"max_tokens", 2}};
    body.update(c.fields);
    auto res = server.Post("/v1/completions", body);
    ASSERT_TRUE(res) << c.param;
    EXPECT_EQ(res->status, 400) << c.param << ": " << res->body.substr(0, 300);
    EXPECT_NE(ErrorMessage(res).find(c.message), std::string::npos)
        << c.param << ": " << ErrorMessage(res);
    EXPECT_EQ(json::parse(res->body)["error"]["param"], c.param);
  }
  // A past tool call's arguments (a JSON object as text) on chat.
  const json chat = {{"max_tokens", 2},
                     {"messages",
                      {{{"role", "user"}, {"content", "Hi"}},
                       {{"role", "assistant"},
                        {"content", nullptr},
                        {"tool_calls",
                         {{{"id", "c1"},
                           {"type", "function"},
                           {"function", {{"name", "f"}, {"arguments", deep_json}}}}}}},
                       {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "ok"}}}}};
  auto res = server.Post("/v1/chat/completions", chat);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body.substr(0, 300);
  EXPECT_NE(ErrorMessage(res).find("deeper than the limit of 64 levels"), std::string::npos)
      << ErrorMessage(res);
  // Deep or ambiguous but valid grammars are served: a run of 100,000 empty rules (a recursion
  // per rule, then), and 60 rules in a row with two empty alternatives each (2^60 paths, then).
  std::string empties = "root ::= ";
  for (int i = 0; i < 100000; ++i) empties += "e ";
  empties += "\"a\"\ne ::= \"\" | \"\"\n";
  std::string ambiguous = "root ::= ";
  for (int i = 0; i < 60; ++i) ambiguous += "e ";
  ambiguous += "\"a\"\ne ::= f | g\nf ::= \"\" | \"b\"\ng ::= \"\" | \"b\"\n";
  for (const std::string& grammar : {empties, ambiguous}) {
    auto ok = server.Post(
        "/v1/completions",
        {{"prompt", "Once"}, {"max_tokens", 2}, {"structured_outputs", {{"grammar", grammar}}}});
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body.substr(0, 300);
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
  ExpectServing(server);
}

// {"prompt": [[1]] * 2000, "n": 128} was 10 KB and submitted 256,000 engine requests.
TEST(OpenAiHostileTest, ChoicesOverTheCapAre400BeforeAnythingIsQueued) {
  TestServerOptions options;
  options.start_engine = false;  // anything queued would stay waiting, and be counted
  OpenAiTestServer server(options);
  json prompts = json::array();
  for (int i = 0; i < 2000; ++i) prompts.push_back({1});
  for (const json& body : {json{{"prompt", prompts}, {"n", 128}, {"max_tokens", 1}},
                           json{{"prompt", json::array({{1}, {2}})}, {"n", 65}},
                           json{{"prompt", json::array({"a", "b", "c"})}, {"n", 43}}}) {
    const std::string route =
        body.contains("messages") ? "/v1/chat/completions" : "/v1/completions";
    auto res = server.Post(route, body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
    EXPECT_NE(ErrorMessage(res).find("--max-choices-per-request"), std::string::npos)
        << ErrorMessage(res);
    EXPECT_EQ(json::parse(res->body)["error"]["param"], "n");
  }
  // n alone is capped by the parser (128, as vLLM).
  auto chat = server.Post("/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"n", 129}});
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400);
  EXPECT_EQ(server.num_waiting(), 0);
  // At the cap: admitted.
  server.engine().Start();
  auto at_cap = server.Post("/v1/completions",
                            {{"prompt", json::array({{1}, {2}})}, {"n", 64}, {"max_tokens", 1}});
  ASSERT_TRUE(at_cap);
  EXPECT_EQ(at_cap->status, 200) << at_cap->body;
  EXPECT_EQ(json::parse(at_cap->body)["choices"].size(), 128u);
  ExpectServing(server);
}

// echo + logprobs + prompt_logprobs x n x prompts: 2.5 KB made a 105 MB response, 10 KB a
// bad_alloc on the engine thread.
TEST(OpenAiHostileTest, LogprobEntriesOverTheCapAre400) {
  OpenAiTestServer server;
  const std::vector<int> long_prompt(400, 1);
  json prompts = json::array();
  for (int i = 0; i < 16; ++i) prompts.push_back(long_prompt);
  const json bodies[] = {
      // 16 prompts x n 8 x 399 prompt tokens x 21 > 250,000 (the default cap)
      {{"prompt", prompts}, {"n", 8}, {"echo", true}, {"logprobs", 20}, {"max_tokens", 1}},
      {{"prompt", prompts}, {"n", 8}, {"prompt_logprobs", 20}, {"max_tokens", 1}},
      {{"prompt", prompts}, {"n", 2}, {"echo", true}, {"logprobs", 20}, {"max_tokens", 1}},
      // 128 choices x 400 tokens x 21 > 250,000 (generated tokens alone)
      {{"prompt", "Once"}, {"n", 128}, {"logprobs", 20}, {"max_tokens", 400}},
  };
  for (const json& body : bodies) {
    auto res = server.Post("/v1/completions", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body.substr(0, 300);
    EXPECT_NE(ErrorMessage(res).find("--max-logprobs-per-request"), std::string::npos)
        << ErrorMessage(res);
  }
  auto chat =
      server.Post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                           {"n", 128},
                                           {"logprobs", true},
                                           {"top_logprobs", 20},
                                           {"max_tokens", 400}});
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400) << chat->body.substr(0, 300);
  EXPECT_NE(ErrorMessage(chat).find("--max-logprobs-per-request"), std::string::npos);
  // Under the cap: served, with every entry.
  auto ok = server.Post(
      "/v1/completions",
      {{"prompt", long_prompt}, {"n", 2}, {"echo", true}, {"logprobs", 5}, {"max_tokens", 1}});
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body.substr(0, 300);
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["logprobs"]["tokens"].size(), 401u);
  ExpectServing(server);
}

TEST(OpenAiHostileTest, NLargerThanTheQueueIs400Not503) {
  TestServerOptions options;
  options.max_queue_len = 4;
  OpenAiTestServer server(options);
  auto res = server.Post("/v1/completions", {{"prompt", "a"}, {"n", 5}, {"max_tokens", 1}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_NE(ErrorMessage(res).find("--max-num-queued-reqs 4"), std::string::npos)
      << ErrorMessage(res);
  auto chat = server.Post("/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"n", 5}});
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400) << chat->body;
  // The request is admitted whole: 2 prompts x n = 3 is 6 engine requests, never under 4.
  auto prompts = server.Post("/v1/completions",
                             {{"prompt", json::array({"a", "b"})}, {"n", 3}, {"max_tokens", 1}});
  ASSERT_TRUE(prompts);
  EXPECT_EQ(prompts->status, 400) << prompts->body;
  EXPECT_NE(ErrorMessage(prompts).find("6 choices (2 prompts x n = 3), more than the server's "
                                       "queue can ever hold (--max-num-queued-reqs 4)"),
            std::string::npos)
      << ErrorMessage(prompts);
  auto fits = server.Post("/v1/completions", {{"prompt", "a"}, {"n", 4}, {"max_tokens", 1}});
  ASSERT_TRUE(fits);
  EXPECT_EQ(fits->status, 200) << fits->body;
  auto two = server.Post("/v1/completions",
                         {{"prompt", json::array({"a", "b"})}, {"n", 2}, {"max_tokens", 1}});
  ASSERT_TRUE(two);
  EXPECT_EQ(two->status, 200) << two->body;
  ExpectServing(server);
}

// Prompts holding more tokens than --max-num-queued-tokens could never be admitted: 400, not a
// 503 to retry forever; the prompt tokens count once per choice (each is its own prefill).
TEST(OpenAiHostileTest, PromptsLargerThanTheTokenQueueAre400Not503) {
  TestServerOptions options;
  options.max_num_queued_tokens = 8;
  OpenAiTestServer server(options);
  const json ids = json::array({1, 2, 3, 4, 5});  // 5 tokens
  auto res = server.Post("/v1/completions", {{"prompt", ids}, {"n", 2}, {"max_tokens", 1}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_NE(ErrorMessage(res).find("hold 10 tokens (counted once per choice), more than the "
                                   "server's prefill queue can ever hold (--max-num-queued-tokens "
                                   "8)"),
            std::string::npos)
      << ErrorMessage(res);
  EXPECT_EQ(json::parse(res->body)["error"]["param"], "prompt");
  auto fits = server.Post("/v1/completions", {{"prompt", ids}, {"max_tokens", 1}});
  ASSERT_TRUE(fits);
  EXPECT_EQ(fits->status, 200) << fits->body;
  ExpectServing(server);
}

}  // namespace
}  // namespace tinyserve
