// Every kind of bad request gets its status and vLLM's error JSON before anything is queued:
// a catalogue of 400s (each naming its field), 401 (API key), 404 (model, route), 405, 413 and
// 503 (queue full, engine stopped). The server keeps answering afterwards.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tests/server/openai_test_server.h"

namespace tinyserve {
namespace {

using nlohmann::json;
using testing::OpenAiTestServer;
using testing::TestServerOptions;

struct BadRequest {
  const char* name;
  const char* method;
  const char* path;
  std::string body;
  int status;
  std::optional<std::string> param;  // nullopt: not checked; "" : null
};

void ExpectErrorJson(const httplib::Result& res, int status,
                     const std::optional<std::string>& param, const std::string& name) {
  ASSERT_TRUE(res) << name;
  EXPECT_EQ(res->status, status) << name << ": " << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json") << name;
  const json body = json::parse(res->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << name << ": " << res->body;
  const json& e = body["error"];
  EXPECT_TRUE(e["message"].is_string()) << name;
  EXPECT_FALSE(e["message"].get<std::string>().empty()) << name;
  EXPECT_TRUE(e["type"].is_string()) << name;
  EXPECT_EQ(e["code"], status) << name;
  if (param) {
    if (param->empty()) {
      EXPECT_TRUE(e["param"].is_null()) << name << ": " << res->body;
    } else {
      EXPECT_EQ(e["param"], *param) << name << ": " << res->body;
    }
  }
}

std::string Long(int words) {
  std::string s;
  for (int i = 0; i < words; ++i) s += "Lily ran to the park. ";
  return s;
}

TEST(OpenAiErrorsTest, EveryBadRequestGetsItsStatusAndNothingIsQueued) {
  OpenAiTestServer server;
  const std::string msgs = R"("messages": [{"role": "user", "content": "Hi"}])";
  const std::vector<BadRequest> cases = {
      {"malformed json", "POST", "/v1/completions", R"({"prompt": )", 400, ""},
      {"not an object", "POST", "/v1/completions", "[1, 2]", 400, ""},
      {"invalid utf-8", "POST", "/v1/completions", "{\"prompt\": \"\xff\xfe\"}", 400, std::nullopt},
      {"missing prompt", "POST", "/v1/completions", "{}", 400, "prompt"},
      {"prompt number", "POST", "/v1/completions", R"({"prompt": 5})", 400, "prompt"},
      {"empty prompt list", "POST", "/v1/completions", R"({"prompt": []})", 400, "prompt"},
      {"token id out of vocab", "POST", "/v1/completions", R"({"prompt": [1, 100000]})", 400,
       "prompt"},
      {"negative token id", "POST", "/v1/completions", R"({"prompt": [[1, -1]]})", 400, "prompt"},
      {"max_tokens 0", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 0})", 400,
       "max_tokens"},
      {"max_tokens negative", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": -3})",
       400, "max_tokens"},
      {"max_tokens string", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": "9"})", 400,
       "max_tokens"},
      {"max_tokens huge", "POST", "/v1/completions", R"({"prompt": "a", "max_tokens": 100000})",
       400, "max_tokens"},
      {"prompt over max_model_len", "POST", "/v1/completions",
       R"({"prompt": ")" + Long(200) + R"(", "max_tokens": null})", 400, std::nullopt},
      {"temperature < 0", "POST", "/v1/completions", R"({"prompt": "a", "temperature": -0.5})", 400,
       "temperature"},
      {"top_p 0", "POST", "/v1/completions", R"({"prompt": "a", "top_p": 0})", 400, "top_p"},
      {"top_p > 1", "POST", "/v1/completions", R"({"prompt": "a", "top_p": 1.5})", 400, "top_p"},
      {"top_k -2", "POST", "/v1/completions", R"({"prompt": "a", "top_k": -2})", 400, "top_k"},
      {"min_p 2", "POST", "/v1/completions", R"({"prompt": "a", "min_p": 2})", 400, "min_p"},
      {"presence_penalty 3", "POST", "/v1/completions", R"({"prompt": "a", "presence_penalty": 3})",
       400, "presence_penalty"},
      {"logprobs 21", "POST", "/v1/completions", R"({"prompt": "a", "logprobs": 21})", 400,
       "logprobs"},
      {"n 0", "POST", "/v1/completions", R"({"prompt": "a", "n": 0})", 400, "n"},
      {"stop empty string", "POST", "/v1/completions", R"({"prompt": "a", "stop": [""]})", 400,
       "stop"},
      {"stream_options without stream", "POST", "/v1/completions",
       R"({"prompt": "a", "stream_options": {"include_usage": true}})", 400, "stream_options"},
      {"min_tokens > max_tokens", "POST", "/v1/completions",
       R"({"prompt": "a", "max_tokens": 2, "min_tokens": 5})", 400, "min_tokens"},
      {"unknown model", "POST", "/v1/completions", R"({"model": "gpt-4", "prompt": "a"})", 404,
       "model"},
      {"chat: no messages", "POST", "/v1/chat/completions", "{}", 400, "messages"},
      {"chat: empty messages", "POST", "/v1/chat/completions", R"({"messages": []})", 400,
       "messages"},
      {"chat: unknown role", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "wizard", "content": "Hi"}]})", 400, "messages[0].role"},
      {"chat: content number", "POST", "/v1/chat/completions",
       R"({"messages": [{"role": "user", "content": 7}]})", 400, "messages[0].content"},
      {"chat: top_logprobs 30", "POST", "/v1/chat/completions",
       "{" + msgs + R"(, "logprobs": true, "top_logprobs": 30})", 400, "top_logprobs"},
      {"chat: max_completion_tokens 0", "POST", "/v1/chat/completions",
       "{" + msgs + R"(, "max_completion_tokens": 0})", 400, "max_completion_tokens"},
      {"chat: unknown model", "POST", "/v1/chat/completions", "{" + msgs + R"(, "model": "llama"})",
       404, "model"},
      {"detokenize: bad id", "POST", "/detokenize", R"({"tokens": [1, 99999]})", 400, "tokens"},
      {"detokenize: no tokens", "POST", "/detokenize", "{}", 400, "tokens"},
      {"tokenize: nothing", "POST", "/tokenize", "{}", 400, std::nullopt},
      {"tokenize: unknown model", "POST", "/tokenize", R"({"model": "x", "prompt": "a"})", 404,
       "model"},
      {"unknown route", "POST", "/v1/embeddings", "{}", 404, ""},
      {"unknown route GET", "GET", "/nope", "", 404, ""},
      {"wrong method", "GET", "/v1/completions", "", 405, ""},
      {"wrong method models", "POST", "/v1/models", "{}", 405, ""},
  };
  ASSERT_GE(cases.size(), 30u);
  httplib::Client client = server.Client();
  for (const BadRequest& c : cases) {
    const httplib::Result res = std::string(c.method) == "GET"
                                    ? client.Get(c.path)
                                    : client.Post(c.path, c.body, "application/json");
    ExpectErrorJson(res, c.status, c.param, c.name);
  }
  EXPECT_TRUE(server.recorder().finishes().empty());  // nothing reached the engine
  EXPECT_EQ(server.num_waiting(), 0);
  // Still serving.
  auto ok =
      client.Post("/v1/completions", R"({"prompt": "a", "max_tokens": 2})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(OpenAiErrorsTest, OversizedBodyIs413) {
  OpenAiTestServer server;
  const std::string body = R"({"prompt": ")" + std::string(5 << 20, 'a') + R"("})";
  ExpectErrorJson(server.Client().Post("/v1/completions", body, "application/json"), 413, "",
                  "413");
}

TEST(OpenAiErrorsTest, ApiKeyGuardsV1Only) {
  TestServerOptions options;
  options.api_key = "sekret";
  OpenAiTestServer server(options);
  const std::string body = R"({"prompt": "a", "max_tokens": 1})";
  ExpectErrorJson(server.Client().Post("/v1/completions", body, "application/json"), 401, "",
                  "no key");
  ExpectErrorJson(server.Client("wrong").Post("/v1/completions", body, "application/json"), 401, "",
                  "wrong key");
  ExpectErrorJson(server.Client("sekre").Get("/v1/models"), 401, "", "prefix of the key");
  ExpectErrorJson(server.Client().Get("/v1/nothing"), 401, "", "unknown /v1 route");
  auto ok = server.Client("sekret").Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  auto health = server.Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto version = server.Client().Get("/version");
  ASSERT_TRUE(version);
  EXPECT_EQ(version->status, 200);
  auto tokenize = server.Client().Post("/tokenize", R"({"prompt": "a"})", "application/json");
  ASSERT_TRUE(tokenize);
  EXPECT_EQ(tokenize->status, 200);
}

TEST(OpenAiErrorsTest, FullQueueIs503AtOnce) {
  TestServerOptions options;
  options.max_queue_len = 2;
  options.start_engine = false;  // nothing gets scheduled: submitted requests stay waiting
  OpenAiTestServer server(options);
  const std::string one = R"({"prompt": "a", "max_tokens": 1})";
  auto first = std::async(std::launch::async, [&] {
    return server.Client().Post("/v1/completions", one, "application/json");
  });
  for (int i = 0; i < 500 && server.num_waiting() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(server.num_waiting(), 1);
  // Two more would make 3 > 2 waiting.
  ExpectErrorJson(
      server.Client().Post("/v1/completions", R"({"prompt": "a", "n": 2})", "application/json"),
      503, "", "queue full");
  auto second = std::async(std::launch::async, [&] {
    return server.Client().Post("/v1/chat/completions",
                                R"({"messages": [{"role": "user", "content": "Hi"}],
                                    "max_tokens": 1})",
                                "application/json");
  });
  for (int i = 0; i < 500 && server.num_waiting() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(server.num_waiting(), 2);
  const auto start = std::chrono::steady_clock::now();
  auto full = server.Client().Post("/v1/completions", one, "application/json");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  ExpectErrorJson(full, 503, "", "queue full");
  EXPECT_NE(json::parse(full->body)["error"]["message"].get<std::string>().find("overloaded"),
            std::string::npos);
  // Once the engine runs, the waiting ones complete and the queue empties.
  server.engine().Start();
  EXPECT_EQ(first.get()->status, 200);
  EXPECT_EQ(second.get()->status, 200);
  EXPECT_EQ(server.num_waiting(), 0);
  auto after = server.Client().Post("/v1/completions", one, "application/json");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
}

TEST(OpenAiErrorsTest, StoppedEngineIs503) {
  OpenAiTestServer server;
  server.engine().Stop();
  ExpectErrorJson(server.Client().Post("/v1/completions", R"({"prompt": "a"})", "application/json"),
                  503, "", "stopped engine");
  ExpectErrorJson(server.Client().Post("/v1/chat/completions",
                                       R"({"messages": [{"role": "user", "content": "Hi"}]})",
                                       "application/json"),
                  503, "", "stopped engine (chat)");
  EXPECT_EQ(server.num_waiting(), 0);
}

}  // namespace
}  // namespace tinyserve
